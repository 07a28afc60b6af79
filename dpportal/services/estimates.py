"""DP estimates of one column's bounds or categories: the schema page's "estimate for me".

An estimate spends a stated share of the dataset's budget (DPPORTAL_ESTIMATE_PERCENT of its total
ε, and of its total δ for categories) and is recorded like any release: a `Release` row
(mechanism ESTIMATE_MECHANISM) with its DEBIT ledger entry, written through the same admission
code as `releases.release_create` (`budget.check_budget` under the budget lock,
`budget.ledger_write`), and "release requested" and "release done" audit events.

It runs in the request, not on a worker: the estimate is computed first, then one transaction
locks the dataset and budget, checks what is left, and stores the release, its result, the debit
and the audit events together. A request that fails or is refused (not enough budget left) before
that transaction commits shows nothing of what was computed, so it spends nothing; once it
commits, the estimate is shown and its budget stays spent (its data was read: never refunded).
"""

from decimal import ROUND_DOWN, Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .. import release_engine
from ..models import EPSILON_FIELD, AuditEvent, BudgetLedgerEntry, Release
from . import audit
from .budget import check_budget, ledger_write, locked_budget, locked_dataset
from .errors import ServiceError

ESTIMATE_MECHANISM = "dp_schema_estimate"
KINDS = ("numeric", "categorical")
NO_DELTA = (
    "Finding categories without a list needs δ > 0 (a value held by a single person must not "
    "be revealed), and this dataset's budget has δ = 0. Choose a public list or paste one; or "
    "give the dataset a δ on its page first."
)


def estimate_share() -> Decimal:
    """The share of the total budget one estimate spends (a fraction, e.g. 0.01)."""
    return Decimal(str(settings.DPPORTAL_ESTIMATE_PERCENT)) / 100


def estimate_cost(dataset, kind) -> tuple[Decimal, Decimal]:
    """(ε, δ) an estimate of this kind spends: the share of the totals, rounded down to what the
    ledger records (6 decimals of ε); δ only for categories."""
    places = Decimal(1).scaleb(-EPSILON_FIELD["decimal_places"])
    epsilon = (dataset.epsilon_total * estimate_share()).quantize(places, rounding=ROUND_DOWN)
    delta = dataset.delta_total * estimate_share() if kind == "categorical" else Decimal(0)
    return epsilon, delta


def estimate_column(*, dataset, user, column, kind, remote_addr=None) -> Release:
    """Estimate `column`'s bounds ("numeric") or categories ("categorical") with DP, spend its
    cost and record it; returns the done release, its result in `manifest["result"]`."""
    _check_request(dataset, column, kind)
    epsilon, delta = estimate_cost(dataset, kind)
    check_budget(dataset.budget, epsilon, delta)  # a first check, so a refusal reads nothing
    try:
        result = release_engine.estimate_column(dataset, column, kind, epsilon=epsilon, delta=delta)
    except release_engine.ReleaseInputError as exc:
        raise ServiceError(str(exc)) from None
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        if locked.is_deleted:
            raise ServiceError("This dataset has been deleted; nothing was spent.")
        locked.budget = locked_budget(locked.budget_id)
        check_budget(locked.budget, epsilon, delta)
        release = _record(locked, user, column, kind, epsilon, delta, result, remote_addr)
    return release


def _check_request(dataset, column, kind) -> None:
    if dataset.is_deleted:
        raise ServiceError("This dataset has been deleted; nothing can be estimated from it.")
    if column not in (dataset.columns or []):
        raise ServiceError(f"There is no column {column!r} in this dataset.")
    if kind not in KINDS:
        raise ServiceError(f"An estimate is of bounds or categories, not {kind!r}.")
    if kind == "categorical" and dataset.delta_total <= 0:
        raise ServiceError(NO_DELTA)
    if estimate_cost(dataset, kind)[0] <= 0:
        raise ServiceError(
            f"The dataset's total ε is too small for an estimate of "
            f"{percent_text(estimate_share())}% of it; type the bounds or categories instead."
        )


def _record(locked, user, column, kind, epsilon, delta, result, remote_addr) -> Release:
    now = timezone.now()
    share = estimate_share()
    release = Release.objects.create(
        dataset=locked,
        requested_by=user,
        mechanism=ESTIMATE_MECHANISM,
        columns=[column],
        params={"kind": kind, "percent_of_total": percent_text(share)},
        epsilon=epsilon,
        delta=delta,
        neighbouring=locked.neighbouring,
        status=Release.Status.DONE,
        data_was_read=True,
        started_at=now,
        finished_at=now,
        manifest={
            "mechanism": ESTIMATE_MECHANISM,
            "parameters": {"column": column, "kind": kind, "percent_of_total": percent_text(share)},
            "guarantee": {
                "unit": "one row of the input table",
                "neighbouring": locked.neighbouring,
                "definition": result["definition"],
                "epsilon": str(epsilon),
                "delta": str(delta),
            },
            "result": result,
        },
    )
    ledger_write(locked, release, BudgetLedgerEntry.Kind.DEBIT)
    details = {"mechanism": ESTIMATE_MECHANISM, "epsilon": str(epsilon), "delta": str(delta)}
    for action in (AuditEvent.Action.RELEASE_REQUESTED, AuditEvent.Action.RELEASE_DONE):
        audit.audit_record(
            action=action,
            actor=user,
            dataset=locked,
            release=release,
            details=details | {"column": column},
            remote_addr=remote_addr,
        )
    return release


def percent_text(share: Decimal) -> str:
    """A share as plain percent text (0.01 -> "1")."""
    return f"{(share * 100).normalize():f}"


def latest_estimates(dataset) -> dict[str, dict]:
    """Column name -> the latest estimate's result, kind, ε and release id (DP outputs only)."""
    latest: dict[str, dict] = {}
    done = dataset.releases.filter(mechanism=ESTIMATE_MECHANISM, status=Release.Status.DONE)
    for release in done.order_by("created_at", "pk"):
        manifest = release.manifest or {}
        latest[release.columns[0]] = {
            **manifest.get("result", {}),
            "kind": release.params.get("kind"),
            "epsilon": release.epsilon,
            "release": release.pk,
        }
    return latest
