"""Releases: the new-release form, the accuracy preview and planner, the worker's side, the
results and public pages, the package and the custodian-only report; each mechanism's own
part in `kinds/`."""
