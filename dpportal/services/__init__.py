"""Workflows that change datasets, budgets and releases. The only code that spends budget.

Views and tasks stay thin: they check permission, validate input and call one function here.
One module per concept:

    audit        the hash-chained audit log
    budget       admission locks, the budget check, ledger debits and refunds, budget changes
    releases     a release's life: create, cancel, finish
    delivery     sending a queued release to the job broker, and which queue
    execution    running a release on a worker: lease, heartbeat, storing the output
    reaper       retrying or failing releases whose worker died, resending lost jobs
    publishing   after publication: utility report, zip and chart data
    public_pages a release's public page: switched on or withdrawn by its owner
    publishing_details  the title, publisher, contact and note its public pages show
    datasets     upload, auditors, schema confirmation, deletion
    tokens       per-user API tokens: create, revoke, authenticate
    invitations  e-mailed, expiring, single-use invitations to audit a dataset
    analysts     analysts invited with an allotment (reserved), revoked; the second approver
    requests     an analyst's release request: submitted, approved or declined, withdrawn
    notifications  e-mails about waiting requests and decisions
    estimates    DP estimates of a column's bounds or categories for the schema page
    sources      registering a table that stays where it lives (PostgreSQL, Parquet)
    shared_budgets  one budget for two datasets their owner declares hold the same people

The names below are the ones views, commands and tests call as `services.<name>`. A test that
replaces a function must replace it in the module that calls it (`services.delivery.release_send`),
not here: replacing a re-exported name would not reach its callers.
"""

from dpportal.services.analysts import analyst_invite, analyst_revoke, second_approver_set
from dpportal.services.audit import audit_record, audit_verify_chain
from dpportal.services.budget import dataset_change_budget
from dpportal.services.datasets import (
    dataset_confirm_schema,
    dataset_create_from_path,
    dataset_create_from_upload,
    dataset_delete,
    dataset_remove_orphan_files,
    dataset_set_auditor,
    dataset_shared_with,
)
from dpportal.services.delivery import release_queue
from dpportal.services.dp_estimates import estimate_column, estimate_cost, latest_estimates
from dpportal.services.errors import (
    ClampingNotAccepted,
    DuplicateRequest,
    DuplicateSubmission,
    ServiceError,
)
from dpportal.services.execution import LeaseLost, release_run
from dpportal.services.invitations import (
    invitation_accept,
    invitation_for_secret,
    invitation_revoke,
    invitation_send,
    pending_invitations,
)
from dpportal.services.public_pages import public_pages, release_set_public
from dpportal.services.publishing_details import dataset_set_publishing
from dpportal.services.reaper import release_reap
from dpportal.services.releases import release_cancel, release_create
from dpportal.services.requests import request_decide, request_submit, request_withdraw
from dpportal.services.shared_budgets import budgets_join
from dpportal.services.sources import dataset_register_source
from dpportal.services.tokens import (
    token_authenticate,
    token_create,
    token_refusal_record,
    token_revoke,
)

__all__ = [
    "DuplicateRequest",
    "DuplicateSubmission",
    "LeaseLost",
    "ServiceError",
    "ClampingNotAccepted",
    "analyst_invite",
    "analyst_revoke",
    "audit_record",
    "budgets_join",
    "audit_verify_chain",
    "dataset_change_budget",
    "dataset_confirm_schema",
    "dataset_create_from_path",
    "dataset_create_from_upload",
    "dataset_delete",
    "dataset_register_source",
    "dataset_remove_orphan_files",
    "dataset_set_auditor",
    "dataset_set_publishing",
    "dataset_shared_with",
    "invitation_accept",
    "invitation_for_secret",
    "invitation_revoke",
    "invitation_send",
    "pending_invitations",
    "estimate_column",
    "estimate_cost",
    "latest_estimates",
    "release_cancel",
    "release_create",
    "release_queue",
    "release_reap",
    "public_pages",
    "release_set_public",
    "release_run",
    "request_decide",
    "request_submit",
    "request_withdraw",
    "second_approver_set",
    "token_authenticate",
    "token_refusal_record",
    "token_create",
    "token_revoke",
]
