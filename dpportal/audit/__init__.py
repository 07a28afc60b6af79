"""The auditors' pages: the releases list, each dataset's budget ledger and the audit log,
with their CSV exports."""
