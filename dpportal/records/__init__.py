"""A dataset's public, verifiable record (issue 46 item 3), published when its owner opts in.

    signing   the portal's Ed25519 key (DPPORTAL_SIGNING_KEY) and its deploy checks
    document  what the record says, read from the database, and its signed files
    switch    the owner's opt-in, audit-logged
    views     the owner's switch, the public record (zip, record.json, record.sig), the key page

The record's format and its offline check are in `mechanisms.public_record` and
`mechanisms.record_verify` (`dp-release verify`); what it proves is in docs/public-record.md.
"""
