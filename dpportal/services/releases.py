"""A release's life: submitted (queued, budget debited), then running, then done, failed or
cancelled. Running and finishing are in `execution`; retrying and giving up in `reaper`.

The budget is debited once, when the release is admitted; it is refunded (`budget.release_refund`)
only if the release ends before its data was ever read. The queued row is the outbox: the job is
sent to the broker after commit (`delivery`), and the reaper resends it if the broker was down
or lost its messages.
"""

from decimal import Decimal
from functools import partial

from django.db import IntegrityError, transaction
from django.utils import timezone

from dpportal.models import AuditEvent, BudgetLedgerEntry, Release
from dpportal.services import audit, delivery
from dpportal.services.budget import (
    allotment_write,
    check_allotment,
    check_budget,
    ledger_write,
    locked_analyst,
    locked_budget,
    locked_dataset,
    locked_dataset_and_release,
    release_refund,
)
from dpportal.services.errors import DuplicateSubmission, ServiceError
from dpportal.services.sources import release_engine_for


def release_create(
    *,
    dataset,
    user,
    mechanism,
    columns,
    params,
    epsilon,
    delta=Decimal("0"),
    remote_addr=None,
    submission_token="",
    engine="",
    allotment=None,
):
    """Check and debit the budget, write the queued release and its ledger entry, enqueue the job.

    All in one transaction with the budget row locked, so concurrent requests can never
    overspend, even through two uploads of the same content; the job is sent to the broker only
    after the transaction commits.

    `submission_token` (the form's one-time token) makes a request idempotent: it is looked up
    under the dataset lock and stored on the release (unique per dataset), so a second request
    with it, even a concurrent one, spends nothing and raises DuplicateSubmission naming the
    first release.

    `engine`: for a table that stays where it lives, the counting engine (empty: the dataset's);
    checked against the source and the mechanism before anything is spent.

    `allotment`: an active analyst's allotment of this dataset (an approved request,
    `services.requests`) to spend from instead of what is left of the budget: checked against
    what it holds, under its lock, and the reservation becomes the release's debit (a RETURN
    and a DEBIT entry of the same ε, δ), so the budget's spent total does not move.
    """
    epsilon, delta = Decimal(str(epsilon)), Decimal(str(delta))
    if epsilon <= 0:
        raise ServiceError(f"Privacy budget ε for a release ({epsilon}) must be greater than 0.")
    if delta < 0:
        raise ServiceError(f"δ ({delta}) must be 0 or more.")
    try:
        with transaction.atomic():
            locked = locked_dataset(dataset.pk)
            _check_not_submitted(locked.pk, submission_token)
            _check_releasable(locked)
            engine = release_engine_for(
                locked, mechanism, engine, columns=columns, params=params, epsilon=epsilon
            )
            analyst = _locked_allotment(locked, allotment)
            locked.budget = locked_budget(locked.budget_id)
            if analyst is None:
                check_budget(locked.budget, epsilon, delta)
            else:
                check_allotment(analyst, epsilon, delta)
            release = Release.objects.create(
                dataset=locked,
                requested_by=user,
                mechanism=mechanism,
                columns=list(columns),
                params=params,
                epsilon=epsilon,
                delta=delta,
                neighbouring=locked.neighbouring,
                submission_token=submission_token,
                engine=engine,
            )
            details = {"mechanism": mechanism, "epsilon": str(epsilon), "delta": str(delta)}
            if analyst is not None:
                kind = BudgetLedgerEntry.Kind.RETURN
                allotment_write(locked, analyst, kind, epsilon, delta, release=release)
                details["allotment_of"] = analyst.name
            ledger_write(locked, release, BudgetLedgerEntry.Kind.DEBIT)
            audit.audit_record(
                action=AuditEvent.Action.RELEASE_REQUESTED,
                actor=user,
                dataset=locked,
                release=release,
                details=details,
                remote_addr=remote_addr,
            )
            transaction.on_commit(partial(delivery.release_send, release.pk))
    except IntegrityError:  # the unique token, if a concurrent twin got past the lock
        _check_not_submitted(dataset.pk, submission_token)
        raise
    return release


def _locked_allotment(locked, allotment):
    """The allotment to spend from, locked and checked to be an active one of this dataset."""
    if allotment is None:
        return None
    analyst = locked_analyst(allotment.pk)
    if analyst.dataset_id != locked.pk or not analyst.is_active:
        raise ServiceError("This analyst's access was revoked; nothing was spent.")
    return analyst


def _check_not_submitted(dataset_pk, submission_token):
    """Raise DuplicateSubmission if a release was already made with this form token."""
    first = submission_token and (
        Release.objects.filter(dataset_id=dataset_pk, submission_token=submission_token).first()
    )
    if first:
        raise DuplicateSubmission(first)


def _check_releasable(dataset):
    if dataset.is_deleted:
        raise ServiceError("This dataset has been deleted; no new releases can be made from it.")
    if not dataset.schema_confirmed:
        raise ServiceError("Confirm the dataset's schema (its public metadata) before releasing.")


def finish(locked_release, status, error_message=""):
    """Record the release's end (call with its row locked); its lease ends with it."""
    locked_release.status = status
    locked_release.error_message = error_message
    locked_release.finished_at = timezone.now()
    locked_release.lease_token = ""
    locked_release.save(update_fields=["status", "error_message", "finished_at", "lease_token"])


def fail_and_refund(dataset, locked, reason):
    """End the release as failed, refunding it if its data was never read (rows locked)."""
    finish(locked, Release.Status.FAILED, reason)
    audit.audit_record(
        action=AuditEvent.Action.RELEASE_FAILED,
        dataset=dataset,
        release=locked,
        details={"reason": reason},
    )
    release_refund(dataset=dataset, release=locked)


def release_cancel(*, release, user, remote_addr=None):
    """Cancel a queued release; refund its budget only if its data was never read (a release
    queued again after its worker died may already have been read: its budget stays spent)."""
    with transaction.atomic():
        dataset, locked = locked_dataset_and_release(release.dataset_id, release.pk)
        if locked.status != Release.Status.QUEUED:
            raise ServiceError(
                f"Only a queued release can be cancelled; this one is "
                f"{locked.get_status_display().lower()}."
            )
        finish(locked, Release.Status.CANCELLED)
        audit.audit_record(
            action=AuditEvent.Action.RELEASE_CANCELLED,
            actor=user,
            dataset=dataset,
            release=locked,
            remote_addr=remote_addr,
        )
        release_refund(dataset=dataset, release=locked, actor=user, remote_addr=remote_addr)
    return locked
