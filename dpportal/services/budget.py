"""Admission and the privacy budget: the row locks, the budget check, ledger writes (debits
and refunds) and changes to a budget's totals. The only code that moves ε and δ.

Every path that locks both rows locks the dataset first, then the release; the budget row
(shared by every upload of the same content) is always locked last. An analyst's allotment row
is locked only by a path that holds its dataset's lock already, so those paths never cross.
Refund rule: a release cancelled (or failed) before its data was read gets its budget back
with a REFUND ledger entry; once the data was read, the budget stays spent. A refunded release
made from an analyst's allotment goes back to that allotment while the analyst is active.

Allotments (dpportal/analysts): a RESERVE entry takes an analyst's allotment from the budget
(it counts as spent until it is returned), a RETURN entry gives it back; an approved request
returns its ε, δ from the allotment and debits them for its release in the same transaction.
"""

from decimal import Decimal

from django.conf import settings
from django.db import transaction

from dpportal.core.formatting import plain_number
from dpportal.models import (
    Analyst,
    AuditEvent,
    BudgetLedgerEntry,
    Dataset,
    Neighbouring,
    PrivacyBudget,
    Release,
    ReleaseRequest,
)
from dpportal.services import audit
from dpportal.services.errors import ServiceError

MAX_EPSILON_TOTAL = Decimal("100")


def locked_dataset(dataset_pk):
    """The dataset row, locked. NO KEY: rows that merely reference the dataset (audit events,
    ledger entries) can still be inserted meanwhile; a plain FOR UPDATE blocks their foreign-key
    checks and, with the audit chain's unique previous hash, deadlocks concurrent writers on
    PostgreSQL."""
    return Dataset.objects.select_for_update(no_key=True).get(pk=dataset_pk)


def locked_budget(budget_pk):
    """The shared budget row, locked (NO KEY, as above): always the last lock a path takes."""
    return PrivacyBudget.objects.select_for_update(no_key=True).get(pk=budget_pk)


def locked_dataset_and_release(dataset_pk, release_pk):
    """Lock in the one order every budget path uses (dataset, then release): no deadlocks."""
    dataset = locked_dataset(dataset_pk)
    return dataset, Release.objects.select_for_update(no_key=True).get(pk=release_pk)


def locked_analyst(analyst_pk):
    """An analyst's allotment row, locked (NO KEY, as above). Only with its dataset's lock held."""
    return Analyst.objects.select_for_update(no_key=True).get(pk=analyst_pk)


def check_budget(budget, epsilon, delta, what="this release"):
    """Refuse a release (or an allotment) that does not fit in what is left of `budget` (read
    under its lock)."""
    if epsilon > budget.epsilon_remaining:
        raise ServiceError(
            f"Not enough privacy budget: {what} needs ε = {plain_number(epsilon)}, "
            f"but only ε = {plain_number(budget.epsilon_remaining)} is left of "
            f"{plain_number(budget.epsilon_total)}."
        )
    if delta > budget.delta_remaining:
        raise ServiceError(
            f"Not enough δ budget: {what} needs δ = {delta:g}, "
            f"but only δ = {budget.delta_remaining:g} is left."
        )


def check_allotment(analyst, epsilon, delta, *, promised=(Decimal("0"), Decimal("0"))):
    """Refuse a request that does not fit in what the analyst's allotment (read under its lock)
    still holds, less what its other waiting requests ask for (`promised`)."""
    epsilon_left, delta_left = analyst.epsilon_held - promised[0], analyst.delta_held - promised[1]
    waiting = " (your waiting requests ask for the rest)" if any(promised) else ""
    if epsilon > epsilon_left:
        raise ServiceError(
            f"Not enough of your allotment: this request needs ε = {plain_number(epsilon)}, "
            f"but only ε = {plain_number(max(epsilon_left, Decimal(0)))} of your allotment of "
            f"{plain_number(analyst.epsilon_allotted)} is left{waiting}. Ask for less, or ask "
            "the dataset's owner for a larger allotment."
        )
    if delta > delta_left:
        raise ServiceError(
            f"Not enough of your allotment: this request needs δ = {plain_number(delta)}, "
            f"but only δ = {plain_number(max(delta_left, Decimal(0)))} is left{waiting}."
        )


def ledger_write(locked_dataset, release, kind):
    """Debit or refund the release's ε and δ on the dataset's shared budget, locked here, with
    the ledger entry (which records what the budget has spent after it)."""
    _ledger_entry(locked_dataset, kind, release.epsilon, release.delta, release=release)


def allotment_write(locked_dataset, analyst, kind, epsilon, delta, *, release=None):
    """Reserve (RESERVE) or return (RETURN) ε and δ of an analyst's allotment (`analyst` locked
    by the caller): the allotment holds more or less, the budget counts it as spent or not, and
    the ledger entry names the allotment (and the release, when one is the reason)."""
    sign = -1 if kind == BudgetLedgerEntry.Kind.RETURN else 1
    analyst.epsilon_held += sign * epsilon
    analyst.delta_held += sign * delta
    if analyst.epsilon_held < 0 or analyst.delta_held < 0:
        raise ServiceError("An allotment cannot give back more than it holds.")
    analyst.save(update_fields=["epsilon_held", "delta_held"])
    _ledger_entry(locked_dataset, kind, epsilon, delta, release=release, analyst=analyst)


def _ledger_entry(locked_dataset, kind, epsilon, delta, *, release=None, analyst=None):
    budget = locked_budget(locked_dataset.budget_id)
    sign = -1 if kind in BudgetLedgerEntry.SUBTRACTING else 1
    budget.epsilon_spent += sign * epsilon
    budget.delta_spent += sign * delta
    budget.save(update_fields=["epsilon_spent", "delta_spent"])
    locked_dataset.budget = budget
    BudgetLedgerEntry.objects.create(
        dataset=locked_dataset,
        release=release,
        analyst=analyst,
        kind=kind,
        epsilon=epsilon,
        delta=delta,
        epsilon_spent_after=budget.epsilon_spent,
        delta_spent_after=budget.delta_spent,
    )


def release_refund(*, dataset, release, actor=None, remote_addr=None):
    """Give a release's budget back to its dataset, once, if its data was never read.

    Call inside a transaction holding the locks on `dataset` and `release` (in that order).
    Returns True if a refund was made.
    """
    if release.data_was_read or release.output_dir:
        return False
    if release.ledger.filter(kind=BudgetLedgerEntry.Kind.REFUND).exists():
        return False
    ledger_write(dataset, release, BudgetLedgerEntry.Kind.REFUND)
    details = {"epsilon": str(release.epsilon), "delta": str(release.delta)}
    if analyst := _back_to_allotment(dataset, release):
        details["to_allotment_of"] = analyst.name
    audit.audit_record(
        action=AuditEvent.Action.RELEASE_REFUNDED,
        actor=actor,
        dataset=dataset,
        release=release,
        remote_addr=remote_addr,
        details=details,
    )
    return True


def _back_to_allotment(dataset, release):
    """The refunded release's ε, δ go back into the allotment it was made from, if any and
    while its analyst is active (a revoked analyst's refund stays with the budget). Returns
    the analyst whose allotment got it back, or None."""
    made_from = ReleaseRequest.objects.filter(release=release).values_list("analyst", flat=True)
    if not made_from:
        return None
    analyst = locked_analyst(made_from[0])
    if analyst.revoked_at is not None:
        return None
    kind = BudgetLedgerEntry.Kind.RESERVE
    allotment_write(dataset, analyst, kind, release.epsilon, release.delta, release=release)
    return analyst


# ---------------------------------------------------------------- a budget's totals


def budget_scope(owner) -> str:
    """Who shares budgets: one owner's uploads (default), or the whole portal (one organisation,
    DPPORTAL_SHARE_FINGERPRINTS_ACROSS_OWNERS). Across scopes nothing is ever compared."""
    return "portal" if settings.DPPORTAL_SHARE_FINGERPRINTS_ACROSS_OWNERS else f"owner:{owner.pk}"


def budget_for(owner, fingerprint, epsilon_total, delta_total, neighbouring):
    """The budget of this content (or source) in the owner's scope: the existing one, whose
    totals and relation stay as first set, or a new one with these. Returns (budget, created).
    Call inside the transaction that creates the dataset.

    A budget the owner joined into another (same people, `shared_budgets`) leads to that one:
    each is read under its lock, so an upload waits for a join in progress and then follows it.
    """
    budget, created = PrivacyBudget.objects.get_or_create(
        scope=budget_scope(owner),
        fingerprint=fingerprint,
        defaults={
            "epsilon_total": epsilon_total,
            "delta_total": delta_total,
            "neighbouring": neighbouring,
        },
    )
    budget = locked_budget(budget.pk)
    while budget.joined_into_id is not None:
        budget = locked_budget(budget.joined_into_id)
    return budget, created


def budget_values(epsilon_total, delta_total):
    """The totals asked for, as Decimals, once they are in range."""
    try:
        epsilon, delta = Decimal(str(epsilon_total)), Decimal(str(delta_total))
    except ArithmeticError:
        raise ServiceError(
            f"The budget ({epsilon_total!r}, {delta_total!r}) must be numbers."
        ) from None
    if not (0 < epsilon <= MAX_EPSILON_TOTAL):
        raise ServiceError(
            f"Total ε ({epsilon}) must be greater than 0 and at most {MAX_EPSILON_TOTAL}."
        )
    if not (0 <= delta < 1):
        raise ServiceError(f"Total δ ({delta}) must be at least 0 and below 1.")
    return epsilon, delta


def check_neighbouring(neighbouring):
    if neighbouring not in Neighbouring.values:
        raise ServiceError(
            f"Neighbouring relation ({neighbouring!r}) must be one of "
            f"{', '.join(Neighbouring.values)}."
        )


def dataset_change_budget(
    *, dataset, user, epsilon_total, delta_total, neighbouring=None, remote_addr=None
):
    """Change the total budget: anything before the first release, only lower afterwards.

    The budget is shared by every upload of the same content, so the change applies to all of
    them, and "the first release" means the first release of any of them.
    """
    epsilon_total, delta_total = budget_values(epsilon_total, delta_total)
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        budget = locked.budget = locked_budget(locked.budget_id)
        neighbouring = neighbouring or budget.neighbouring
        check_neighbouring(neighbouring)
        before = {
            "epsilon_total": str(budget.epsilon_total),
            "delta_total": str(budget.delta_total),
            "neighbouring": budget.neighbouring,
        }
        _check_budget_change(locked, epsilon_total, delta_total, neighbouring)
        budget.epsilon_total, budget.delta_total = epsilon_total, delta_total
        budget.neighbouring = neighbouring
        after = {
            "epsilon_total": str(epsilon_total),
            "delta_total": str(delta_total),
            "neighbouring": neighbouring,
        }
        if after == before:
            return locked
        budget.save(update_fields=["epsilon_total", "delta_total", "neighbouring"])
        audit.audit_record(
            action=AuditEvent.Action.BUDGET_CHANGED,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
            details={"before": before, "after": after},
        )
    return locked


def _check_budget_change(locked, epsilon_total, delta_total, neighbouring):
    if locked.is_deleted:
        raise ServiceError("This dataset has been deleted; its budget can no longer change.")
    if neighbouring == "add-remove" != locked.neighbouring and _ever_had_auditors(locked):
        raise ServiceError(
            "Under replace-one the number of rows is public, and auditors have already been able "
            "to see it, so the relation can no longer become add-remove: upload the data as a new "
            "dataset if its row count must stay private."
        )
    if epsilon_total < locked.epsilon_spent or delta_total < locked.delta_spent:
        raise ServiceError(
            f"The total cannot go below what releases have already spent and analysts' "
            f"allotments hold: "
            f"ε = {plain_number(locked.epsilon_spent)}, δ = {plain_number(locked.delta_spent)}."
        )
    if not Release.objects.filter(dataset__budget_id=locked.budget_id).exists():
        return
    if epsilon_total > locked.epsilon_total or delta_total > locked.delta_total:
        raise ServiceError(
            f"Once a release exists the budget can be lowered but never raised: the total is "
            f"ε = {plain_number(locked.epsilon_total)}, δ = {plain_number(locked.delta_total)}. "
            "It is the promise made about all releases of these data together; raising it, δ "
            "included, would weaken that promise for what is already released."
        )
    if neighbouring != locked.neighbouring:
        raise ServiceError("The neighbouring relation cannot change once a release exists.")


def _ever_had_auditors(dataset) -> bool:
    """Whether anyone but the owner has had access to a dataset sharing this budget."""
    sharing = Dataset.objects.filter(budget_id=dataset.budget_id)
    granted = AuditEvent.objects.filter(
        action=AuditEvent.Action.ACCESS_CHANGED, dataset__in=sharing
    )
    return granted.exists() or sharing.filter(auditors__isnull=False).exists()
