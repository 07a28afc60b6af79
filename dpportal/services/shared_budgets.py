"""One budget for two datasets that hold the same people, declared by their owner.

Budgets are shared automatically only by identical content (a fingerprint), so a copy with a
column added or renamed, or a row dropped, gets a budget of its own, and releases of the two
would each spend a full budget on the same people. The owner of both can declare that they hold
the same people (`budgets_join`); from then on they draw on one budget.

Privacy accounting: releases of the same people compose sequentially, so everything already
spent on either budget counts against the joined one: its spent ε and δ are the sums of both.
Its total is the smaller of the two (the stricter promise made to these people); a join whose
sums would exceed that total is refused. The relation must be the same for both. The other
budget is retired: it records `joined_into`, its datasets move to the joined budget, and new
uploads of its content follow it there (`budget.budget_for`). A join is never undone.

Locks: every dataset on either budget (in pk order), then both budgets (in pk order), as every
budget path locks datasets before budgets; the sums are taken under those locks, so no release
admitted meanwhile is lost.
"""

from django.db import transaction

from dpportal.core.formatting import plain_number
from dpportal.models import AuditEvent, Dataset
from dpportal.services import audit
from dpportal.services.budget import locked_budget
from dpportal.services.errors import ServiceError

HOW = (
    "Declare it only when both datasets hold the same people (for example a copy with a column "
    "added, renamed or dropped, or a few rows removed): their spending then adds up against one "
    "total, the smaller of the two, and this cannot be undone."
)


def budgets_join(*, dataset, other, user, remote_addr=None) -> Dataset:
    """Make `dataset` and `other` (both owned by `user`) share one budget; see the module
    docstring for the accounting. Returns `dataset` with its new budget."""
    with transaction.atomic():
        budget_ids = {dataset.budget_id, other.budget_id}
        datasets = _locked_datasets(budget_ids)
        if dataset.pk not in datasets or other.pk not in datasets:
            raise ServiceError("One of these budgets changed just now; try again.")
        first, second = datasets[dataset.pk], datasets[other.pk]
        _check_pair(first, second, user)
        budgets = sorted((locked_budget(pk) for pk in sorted(budget_ids)), key=lambda b: b.pk)
        if set(_locked_datasets(budget_ids)) != set(datasets):
            raise ServiceError("A dataset was added to one of these budgets just now; try again.")
        kept, retired = budgets
        before = [_state(b) for b in budgets]
        _check_budgets(kept, retired, datasets.values(), user)
        kept.epsilon_total = min(kept.epsilon_total, retired.epsilon_total)
        kept.delta_total = min(kept.delta_total, retired.delta_total)
        kept.epsilon_spent += retired.epsilon_spent
        kept.delta_spent += retired.delta_spent
        kept.save(update_fields=["epsilon_total", "delta_total", "epsilon_spent", "delta_spent"])
        retired.joined_into = kept
        retired.save(update_fields=["joined_into"])
        Dataset.objects.filter(budget_id=retired.pk).update(budget=kept)
        for this, that in ((first, second), (second, first)):
            audit.audit_record(
                action=AuditEvent.Action.BUDGET_JOINED,
                actor=user,
                dataset=this,
                remote_addr=remote_addr,
                details={"same_people_as": that.pk, "before": before, "after": _state(kept)},
            )
    dataset.refresh_from_db()
    return dataset


def _locked_datasets(budget_ids) -> dict[int, Dataset]:
    locked = Dataset.objects.select_for_update(no_key=True).filter(budget_id__in=budget_ids)
    return {d.pk: d for d in locked.order_by("pk")}


def _check_pair(first, second, user) -> None:
    if first.owner_id != user.pk or second.owner_id != user.pk:
        raise ServiceError("Choose another dataset of your own: you must own both.")
    if first.is_deleted or second.is_deleted:
        raise ServiceError("A deleted dataset's budget can no longer change.")
    if first.pk == second.pk or first.budget_id == second.budget_id:
        raise ServiceError("These datasets already share one budget.")


def _check_budgets(kept, retired, datasets, user) -> None:
    if any(d.owner_id != user.pk for d in datasets):
        raise ServiceError(
            "One of these budgets is shared with another custodian's upload of the same "
            "content, so only the portal's administrators can join it."
        )
    if kept.neighbouring != retired.neighbouring:
        raise ServiceError(
            "The two datasets protect different things (one replaces a row, the other adds or "
            "removes one); give both the same neighbouring relation first."
        )
    epsilon_total = min(kept.epsilon_total, retired.epsilon_total)
    delta_total = min(kept.delta_total, retired.delta_total)
    epsilon_spent = kept.epsilon_spent + retired.epsilon_spent
    delta_spent = kept.delta_spent + retired.delta_spent
    if epsilon_spent > epsilon_total or delta_spent > delta_total:
        raise ServiceError(
            f"Together these datasets have already spent ε = {plain_number(epsilon_spent)}, "
            f"δ = {plain_number(delta_spent)} on the same people, more than the smaller total "
            f"(ε = {plain_number(epsilon_total)}, δ = {plain_number(delta_total)}) one budget "
            "may spend: they cannot share a budget. Nothing was changed."
        )


def _state(budget) -> dict:
    """A budget's totals and spend, as the audit log records them."""
    return {
        "budget": budget.pk,
        "epsilon_total": str(budget.epsilon_total),
        "epsilon_spent": str(budget.epsilon_spent),
        "delta_total": str(budget.delta_total),
        "delta_spent": str(budget.delta_spent),
    }
