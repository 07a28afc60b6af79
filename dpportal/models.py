"""Datasets, their privacy budget, releases, the budget ledger and the append-only audit log.

Privacy budgets are stored as exact decimals; only `services` changes them, inside a transaction
with the budget row locked. A budget belongs to the data, not to the upload: every upload of the
same table content (same content fingerprint) in the same scope draws on one `PrivacyBudget`.
"""

import hashlib
import json
from decimal import Decimal
from typing import TypedDict

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone


class _DecimalDigits(TypedDict):
    max_digits: int
    decimal_places: int


EPSILON_FIELD: _DecimalDigits = {"max_digits": 12, "decimal_places": 6}
DELTA_FIELD: _DecimalDigits = {"max_digits": 20, "decimal_places": 15}


class Neighbouring(models.TextChoices):
    REPLACE_ONE = "replace-one", "Replace one row (the number of rows is public)"
    ADD_REMOVE = "add-remove", "Add or remove one row"


class PrivacyBudget(models.Model):
    """The total and spent ε/δ of one table content, shared by every upload of that content.

    `scope` is "owner:<user pk>" (the default: uploads of different owners never share, and
    nothing tells one owner that another holds the same content) or "portal" (when the setting
    DPPORTAL_SHARE_FINGERPRINTS_ACROSS_OWNERS is on). `fingerprint` is the content fingerprint of
    the parsed table (`ingest.content_fingerprint`); budgets from before fingerprints existed
    carry "dataset-<pk>" and match no new upload.
    """

    scope = models.CharField(max_length=40)
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    neighbouring = models.CharField(
        max_length=20, choices=Neighbouring.choices, default=Neighbouring.REPLACE_ONE
    )
    epsilon_total = models.DecimalField(**EPSILON_FIELD)
    epsilon_spent = models.DecimalField(**EPSILON_FIELD, default=Decimal("0"))
    delta_total = models.DecimalField(**DELTA_FIELD, default=Decimal("0"))
    delta_spent = models.DecimalField(**DELTA_FIELD, default=Decimal("0"))
    # Set when the owner declared that this budget's data and another's hold the same people
    # (services.shared_budgets): its datasets moved to that budget, its spend was added there,
    # and new uploads of this content draw on that budget (`budget.budget_for`).
    joined_into = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="joined_from"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "fingerprint"], name="one_budget_per_content")
        ]

    def __str__(self):
        return f"Budget {self.pk} ({self.scope})"

    @property
    def epsilon_remaining(self) -> Decimal:
        return self.epsilon_total - self.epsilon_spent

    @property
    def delta_remaining(self) -> Decimal:
        return self.delta_total - self.delta_spent


def _from_budget(name):
    return property(
        lambda dataset: getattr(dataset.budget, name),
        doc=f"The shared budget's {name} (read only; `services` changes it).",
    )


class Dataset(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="datasets"
    )
    auditors = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="audited_datasets"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    # The stored raw file (private storage, relative to DATASET_STORAGE_DIR).
    original_filename = models.CharField(max_length=255, blank=True)
    storage_name = models.CharField(max_length=255, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    row_count = models.BigIntegerField(default=0)
    columns = models.JSONField(default=list, blank=True)
    attribution = models.TextField(blank=True)
    # The typed columnar copy every release reads (private storage), written once after validation.
    parquet_name = models.CharField(max_length=255, blank=True)
    # How the file was read and what its data suggests for the schema: owner-only, never public,
    # cleared when the dataset is deleted.
    profile = models.JSONField(null=True, blank=True)

    # Public metadata: the schema the mechanisms read. Releases need a confirmed schema.
    schema = models.JSONField(null=True, blank=True)
    schema_confirmed_at = models.DateTimeField(null=True, blank=True)
    # The privacy budget (and neighbouring relation) of this content, shared with every other
    # upload of the same content in the same scope, deleted ones included.
    budget = models.ForeignKey(PrivacyBudget, on_delete=models.PROTECT, related_name="datasets")

    # A table that stays where it lives (dpportal/sources/tables.py) instead of a stored copy; all
    # empty for uploads. `source_key`: the data's identity without credentials (its budget follows
    # it); `source_label`: the location with any password masked (owner-only); `source_secret`:
    # the location and its credentials, encrypted; `engine`: the default counting engine.
    source_key = models.CharField(max_length=1000, blank=True)
    source_label = models.CharField(max_length=1000, blank=True)
    source_secret = models.TextField(blank=True)
    source_table = models.CharField(max_length=200, blank=True)
    engine = models.CharField(max_length=20, blank=True)
    # The two-person rule (dpportal/analysts): a named user (an auditor or another custodian)
    # who must approve every analyst's request too, after the owner. Empty: the owner alone.
    second_approver = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="second_approver_of",
    )

    deleted_at = models.DateTimeField(null=True, blank=True)
    # The owner's opt-in to a public, signed record of the budget and public releases
    # (dpportal/records): served to anyone while on and the dataset is not deleted.
    public_record = models.BooleanField(default=False)

    # What the public pages and packages of its releases say about who publishes them (public;
    # set by the owner on the dataset page, `services.dataset_set_publishing`).
    publish_title = models.CharField(max_length=200, blank=True)
    publisher = models.CharField(max_length=200, blank=True)
    publish_contact = models.CharField(max_length=254, blank=True)
    publish_note = models.TextField(max_length=2000, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # Granted through the "Custodians" group (dpportal.access.rules.grant_custodian); an account
        # made from an invitation to audit has no grant (it reads what it was invited to).
        permissions = [
            ("custodian", "Is a custodian: may upload or register datasets, create API tokens")
        ]

    def __str__(self):
        return self.name

    @property
    def is_external(self) -> bool:
        """Whether the data stays where it lives (no stored copy; dpportal/sources/tables.py)."""
        return bool(self.source_key)

    neighbouring = _from_budget("neighbouring")
    epsilon_total = _from_budget("epsilon_total")
    epsilon_spent = _from_budget("epsilon_spent")
    delta_total = _from_budget("delta_total")
    delta_spent = _from_budget("delta_spent")
    epsilon_remaining = _from_budget("epsilon_remaining")
    delta_remaining = _from_budget("delta_remaining")

    def get_neighbouring_display(self) -> str:
        return self.budget.get_neighbouring_display()

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def schema_confirmed(self) -> bool:
        return self.schema is not None and self.schema_confirmed_at is not None


class Release(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    TERMINAL = (Status.DONE, Status.FAILED, Status.CANCELLED)

    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="releases")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="releases"
    )
    mechanism = models.CharField(max_length=40)
    columns = models.JSONField(default=list)
    params = models.JSONField(default=dict, blank=True)
    epsilon = models.DecimalField(**EPSILON_FIELD)
    delta = models.DecimalField(**DELTA_FIELD, default=Decimal("0"))
    neighbouring = models.CharField(max_length=20, choices=Neighbouring.choices)

    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    progress_stage = models.CharField(max_length=100, blank=True)
    error_message = models.TextField(blank=True)
    data_was_read = models.BooleanField(default=False)
    # The engine counting an external dataset's rows where they live (empty: the dataset's).
    engine = models.CharField(max_length=20, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    # Job delivery and the execution lease (see services: release_run, release_reap).
    enqueued_at = models.DateTimeField(null=True, blank=True)  # null: not yet sent to the broker
    attempts = models.PositiveSmallIntegerField(default=0)
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    lease_token = models.CharField(max_length=32, blank=True)  # the execution allowed to finish
    lease_owner = models.CharField(max_length=200, blank=True)  # "host:pid" of that execution

    # Output (written once; a release with output is never recomputed).
    output_dir = models.CharField(max_length=255, blank=True)
    manifest = models.JSONField(null=True, blank=True)
    trace = models.JSONField(null=True, blank=True)

    # The new-release form's one-time token (release_forms.submission_token): a second POST of
    # the same form finds this release instead of spending the budget again. Empty for releases
    # made without the form (commands, tests).
    submission_token = models.CharField(max_length=43, blank=True, default="")

    # The public page (services.public_pages): shown to anyone from `public_since` (set when the
    # owner switches it on) until `public_withdrawn_at`; a withdrawn page says so (HTTP 410).
    public_since = models.DateTimeField(null=True, blank=True)
    public_withdrawn_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "submission_token"],
                condition=~models.Q(submission_token=""),
                name="one_release_per_submission_token",
            )
        ]

    def __str__(self):
        return f"Release {self.pk} ({self.mechanism}) of {self.dataset}"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def is_public(self) -> bool:
        return self.public_since is not None and self.public_withdrawn_at is None


class BudgetLedgerEntry(models.Model):
    """One move of a dataset's privacy budget. Rows are never changed.

    A release's debit (or refund), or an analyst's allotment reserved (or returned): a
    reservation counts as spent on the budget until it is returned, so `epsilon_spent_after`
    is always the signed sum of the entries so far (debits and reservations add, refunds and
    returns subtract). An approved request turns part of its allotment into its release's
    debit: a return and a debit of the same ε, δ, both naming the release.
    """

    class Kind(models.TextChoices):
        DEBIT = "debit", "Debit"
        REFUND = "refund", "Refund"
        RESERVE = "reserve", "Reserved for an analyst"
        RETURN = "return", "Returned from an analyst's allotment"

    SUBTRACTING = (Kind.REFUND, Kind.RETURN)

    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="ledger")
    release = models.ForeignKey(
        Release, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger"
    )
    analyst = models.ForeignKey(
        "dpportal.Analyst", null=True, blank=True, on_delete=models.PROTECT, related_name="ledger"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.DEBIT)
    epsilon = models.DecimalField(**EPSILON_FIELD)
    delta = models.DecimalField(**DELTA_FIELD, default=Decimal("0"))
    epsilon_spent_after = models.DecimalField(**EPSILON_FIELD)
    delta_spent_after = models.DecimalField(**DELTA_FIELD)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["release", "kind"], name="one_entry_per_release_kind")
        ]

    def __str__(self):
        what = f"release {self.release_id}" if self.release_id else f"analyst {self.analyst_id}"
        return f"{self.kind} ε={self.epsilon} for {what}"

    @property
    def sign(self) -> int:
        return -1 if self.kind in self.SUBTRACTING else 1


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("Audit events are append-only: they cannot be updated.")

    def delete(self):
        raise PermissionError("Audit events are append-only: they cannot be deleted.")


class AuditEvent(models.Model):
    """An append-only event. Each carries the hash of the previous one, so edits are detectable.

    Privacy: the hash also covers a random 256-bit salt that never leaves the server (no page,
    export or admin view shows it), so a hash shown next to an auditor's view of the event
    (details cut down, time cut to the minute) cannot be used to test guesses of what is
    hidden. Events written before salts existed have salt "" and keep their old hash format.
    """

    class Action(models.TextChoices):
        LOGIN = "login", "Logged in"
        LOGIN_FAILED = "login_failed", "Login failed"
        LOGOUT = "logout", "Logged out"
        UPLOAD = "upload", "Dataset uploaded"
        SCHEMA_CONFIRMED = "schema_confirmed", "Schema confirmed"
        BUDGET_CHANGED = "budget_changed", "Budget changed"
        BUDGET_JOINED = "budget_joined", "Budget shared with another dataset (same people)"
        ACCESS_CHANGED = "access_changed", "Access changed"
        RELEASE_REQUESTED = "release_requested", "Release requested"
        RELEASE_STARTED = "release_started", "Release started"
        RELEASE_DONE = "release_done", "Release done"
        RELEASE_FAILED = "release_failed", "Release failed"
        RELEASE_CANCELLED = "release_cancelled", "Release cancelled"
        RELEASE_RETRIED = "release_retried", "Release retried after a lost worker"
        RELEASE_REFUNDED = "release_refunded", "Release budget refunded"
        DOWNLOAD = "download", "Download"
        DELETION = "deletion", "Dataset deleted"
        TOKEN_CREATED = "token_created", "API token created"
        TOKEN_REVOKED = "token_revoked", "API token revoked"
        TOKEN_REFUSED = "token_refused", "API token refused"
        INVITATION_SENT = "invitation_sent", "Invitation sent"
        INVITATION_REVOKED = "invitation_revoked", "Invitation revoked"
        RELEASE_PUBLISHED = "release_published", "Release public page switched on"
        RELEASE_WITHDRAWN = "release_withdrawn", "Release public page withdrawn"
        RECORD_PUBLISHED = "record_published", "Dataset's public record switched on"
        RECORD_WITHDRAWN = "record_withdrawn", "Dataset's public record switched off"
        ANALYST_INVITED = "analyst_invited", "Analyst invited, allotment reserved"
        ANALYST_REVOKED = "analyst_revoked", "Analyst revoked, allotment returned"
        APPROVER_CHANGED = "approver_changed", "Second approver changed"
        REQUEST_SUBMITTED = "request_submitted", "Release requested by an analyst"
        REQUEST_APPROVED = "request_approved", "Analyst's request approved"
        REQUEST_DECLINED = "request_declined", "Analyst's request declined"
        REQUEST_WITHDRAWN = "request_withdrawn", "Analyst's request withdrawn"

    created_at = models.DateTimeField(default=timezone.now, editable=False)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=30, choices=Action.choices)
    dataset = models.ForeignKey(Dataset, null=True, blank=True, on_delete=models.PROTECT)
    release = models.ForeignKey(Release, null=True, blank=True, on_delete=models.PROTECT)
    details = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    remote_addr = models.GenericIPAddressField(null=True, blank=True)
    previous_hash = models.CharField(max_length=64, unique=True)  # a chain never forks
    hash = models.CharField(max_length=64, unique=True)
    salt = models.CharField(max_length=64, blank=True, default="", editable=False)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["pk"]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name or 'system'} {self.action}"

    def compute_hash(self) -> str:
        payload = {
            "previous": self.previous_hash,
            "created_at": self.created_at.isoformat(),
            "actor": self.actor_name,
            "action": self.action,
            "dataset": self.dataset_id,
            "release": self.release_id,
            "details": self.details,
            "remote_addr": self.remote_addr,
        }
        if self.salt:
            payload["salt"] = self.salt
        text = json.dumps(payload, sort_keys=True, cls=DjangoJSONEncoder)
        return hashlib.sha256(text.encode()).hexdigest()

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("Audit events are append-only: they cannot be updated.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("Audit events are append-only: they cannot be deleted.")


from dpportal.access.credentials import ApiToken, Invitation  # noqa: E402  (registered with the app here)
from dpportal.analysts.models import Analyst, ReleaseRequest, RequestDecision  # noqa: E402

__all__ = [
    "Analyst",
    "ApiToken",
    "AuditEvent",
    "BudgetLedgerEntry",
    "Dataset",
    "Invitation",
    "Neighbouring",
    "PrivacyBudget",
    "Release",
    "ReleaseRequest",
    "RequestDecision",
]
