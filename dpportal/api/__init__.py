"""The portal's REST API (JSON over HTTPS, `/api/v1/`), authenticated by per-user API tokens.

Every endpoint reuses what the pages use: the permission rule (`dpportal.access.rules`), the forms
that validate input, the services that lock and spend budget and write the audit log, and the
per-address failure limit of the sign-in page. Modules:

    auth            token authentication, CSRF rule, JSON errors (`api_endpoint`)
    errors          JSON for every other failure under /api/ (middleware and error handlers)
    present         the JSON shape of datasets, releases, ledger entries and audit events
    dataset_views   datasets: list, upload, detail, schema, accuracy preview, ledger
    release_views   releases: list, create, progress, cancel, files; the audit log
    owner_views     an owner's other actions: budget, auditors, invitations, deletion
    openapi         the OpenAPI 3.1 description, served at /api/v1/openapi.json
"""
