"""DP estimates of one column's bounds or categories: the schema page's "estimate for me".

An estimate spends a stated share of the dataset's budget (a percent of its total ε, and of its
total δ for categories: one of SPEND_PERCENTS, chosen by the custodian on the schema page, or
DPPORTAL_ESTIMATE_PERCENT) and is recorded like any release: a `Release` row
(mechanism ESTIMATE_MECHANISM, the catalogue row `mechanisms.catalogue.SCHEMA_ESTIMATE`, run
by `run_release` with its guarantee) with its DEBIT ledger entry, written through the same admission
code as `releases.release_create` (`budget.check_budget` under the budget lock,
`budget.ledger_write`), and "release requested" and "release done" audit events.

It runs in the request, not on a worker: the estimate is computed first, then one transaction
locks the dataset and budget, checks what is left, and stores the release, its result, the debit
and the audit events together. A request that fails or is refused (not enough budget left) before
that transaction commits shows nothing of what was computed, so it spends nothing; once it
commits, the estimate is shown and its budget stays spent (its data was read: never refunded).

Unit of privacy: an estimate protects what the dataset's releases protect. With a person column
(the one chosen on the schema page, confirmed or not, with its k) it bounds the rows per person
and is recorded as "one person" with the person-level sensitivity, exactly like a release
(`mechanisms.public_bounds.run_estimate`). The person column an estimate used is stored in
its params; from then on this dataset's estimates and its confirmed schema must use the same
column (k may change: the guarantee is for all of one person's rows whatever k is). Changing the
column afterwards is refused, because the budget already spent protected people as identified by
the old column only (`check_same_person_column`); so is confirming a schema with another column
once an estimate, or a release that read the data, used the old one (`check_schema_person`).
"""

from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_UP, Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

import mechanisms
from dpportal.models import DELTA_FIELD, EPSILON_FIELD, AuditEvent, BudgetLedgerEntry, Release
from dpportal.releases import engine as release_engine
from dpportal.services import audit
from dpportal.services.budget import check_budget, ledger_write, locked_budget, locked_dataset
from dpportal.services.errors import ServiceError
from mechanisms.catalogue import SCHEMA_ESTIMATE
from mechanisms.persons import PersonLevel

ESTIMATE_MECHANISM = SCHEMA_ESTIMATE  # its catalogue row; the name existing releases carry
KINDS = ("numeric", "categorical")
CONFIRMED = object()  # "the page did not say": the confirmed schema's person level
SPEND_PERCENTS = (1, 2, 5, 10, 20, 50)  # the shares of the budget the schema page offers
NO_DELTA = (
    "Finding categories without a list needs δ > 0 (a value held by a single person must not "
    "be revealed), and this dataset's budget has δ = 0. Choose a public list or paste one; or "
    "set the total δ (for example 0.000001) under “Change the budget” on the dataset's page, "
    "which is possible until its first release or estimate."
)


def spend_percents() -> list[Decimal]:
    """The percents of the total budget an estimate may spend: SPEND_PERCENTS and the default."""
    default = Decimal(str(settings.DPPORTAL_ESTIMATE_PERCENT))
    return sorted({Decimal(p) for p in SPEND_PERCENTS} | {default})


def check_percent(percent) -> Decimal:
    """The chosen percent as a Decimal (None: DPPORTAL_ESTIMATE_PERCENT), if it is offered."""
    if percent in (None, ""):
        return Decimal(str(settings.DPPORTAL_ESTIMATE_PERCENT))
    try:
        chosen = Decimal(str(percent).strip())
        offered = chosen.is_finite() and chosen in spend_percents()
    except ArithmeticError:
        offered = False
    if not offered:
        choices = ", ".join(f"{percent_text(p / 100)}%" for p in spend_percents())
        raise ServiceError(f"Choose how much to spend from the list ({choices} of the budget).")
    return chosen


def estimate_share(percent=None) -> Decimal:
    """The share of the total budget one estimate spends (a fraction, e.g. 0.01): `percent` of
    it, or DPPORTAL_ESTIMATE_PERCENT."""
    return check_percent(percent) / 100


def estimate_cost(dataset, kind, percent=None) -> tuple[Decimal, Decimal]:
    """(ε, δ) an estimate of this kind spends at `percent` of the budget (None: the default),
    exactly as the ledger records them: ε the share of the total rounded down to the ledger's
    6 decimals; δ (categories only) the share of the total rounded UP to the ledger's 15
    decimals, so a δ > 0 is never recorded as 0. The mechanism then runs at (at most) these
    recorded values, so it never spends more than the ledger says."""
    share = estimate_share(percent)
    epsilon = _to_places(dataset.epsilon_total * share, EPSILON_FIELD, ROUND_DOWN)
    delta = Decimal(0)
    if kind == "categorical":
        delta = _to_places(dataset.delta_total * share, DELTA_FIELD, ROUND_UP)
    return epsilon, delta


def _to_places(value: Decimal, field, rounding) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-field["decimal_places"]), rounding=rounding)


def estimate_column(
    *, dataset, user, column, kind, person=CONFIRMED, percent=None, remote_addr=None
) -> Release:
    """Estimate `column`'s bounds ("numeric") or categories ("categorical") with DP, spend its
    cost and record it; returns the done release, its result in `manifest["result"]`.

    `person`: the person level the schema page shows (a `PersonLevel`, or None for "each row is
    a different person"); CONFIRMED (a page that did not say) takes the confirmed schema's.
    `percent`: the share of the budget to spend, one of `spend_percents()` (None: the default).
    """
    person = estimate_person(dataset, person)
    percent = check_percent(percent)
    _check_request(dataset, column, kind, person, percent)
    epsilon, delta = estimate_cost(dataset, kind, percent)
    check_budget(dataset.budget, epsilon, delta)  # a first check, so a refusal reads nothing
    try:
        found = release_engine.estimate_column(
            dataset, column, kind, epsilon=epsilon, delta=delta, person=person
        )
    except release_engine.ReleaseInputError as exc:
        raise ServiceError(str(exc)) from None
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        if locked.is_deleted:
            raise ServiceError("This dataset has been deleted; nothing was spent.")
        check_same_person_column(locked, person)  # no other column was confirmed meanwhile
        locked.budget = locked_budget(locked.budget_id)
        check_budget(locked.budget, epsilon, delta)
        spend = Spend(column, kind, epsilon, delta, person, percent)
        release = _record(locked, user, spend, found, remote_addr)
    return release


def estimate_result(release: Release) -> dict[str, Any]:
    """The DP estimate a done estimate release holds (what `estimate_column` recorded)."""
    if release.manifest is None or "result" not in release.manifest:
        raise ServiceError(f"Release {release.pk} holds no estimate.")
    return release.manifest["result"]


def estimate_person(dataset, person):
    """The person level an estimate protects: the page's (`person`), or with CONFIRMED the
    confirmed schema's (none before confirmation: each row a person)."""
    if person is not CONFIRMED:
        return person
    return confirmed_person(dataset)


def confirmed_person(dataset):
    """The confirmed schema's person level (column and k), or None."""
    if not dataset.schema_confirmed:
        return None
    return mechanisms.Schema.from_dict(dataset.schema).person


def check_same_person_column(dataset, person) -> None:
    """Refuse an estimate whose person column (or none) differs from the column this dataset's
    earlier estimates, or its confirmed schema, protect people by."""
    earlier = estimate_person_columns(dataset)
    if dataset.schema_confirmed:
        confirmed = confirmed_person(dataset)
        earlier.add(confirmed.column if confirmed else "")
    chosen = person.column if person else ""
    others = earlier - {chosen}
    if others:
        raise ServiceError(
            f"This dataset already protects {_people_by(others.pop())} (an earlier estimate "
            f"or its confirmed schema), and this estimate would protect {_people_by(chosen)}. "
            "Set the person question back, or confirm the schema with the new answer first "
            "(possible only while no estimate used the old one)."
        )


def check_schema_person(dataset, person) -> None:
    """Refuse a schema whose person column (or none) differs from the one this dataset's
    estimates, or its releases that read the data (under the confirmed schema), protected
    people by: the budget they spent protects people as identified by that column only, so
    later releases must protect the same people."""
    used = estimate_person_columns(dataset)
    released = dataset.releases.exclude(mechanism=ESTIMATE_MECHANISM).filter(data_was_read=True)
    if dataset.schema_confirmed and released.exists():
        confirmed = confirmed_person(dataset)
        used.add(confirmed.column if confirmed else "")
    used -= {person.column if person else ""}
    if used:
        raise ServiceError(
            f"A release or estimate of this dataset protected {_people_by(used.pop())}, and its "
            "budget is spent; the schema must identify people the same way (the number of rows "
            "per person may change). Choose that answer to the person question again."
        )


def estimate_person_columns(dataset) -> set[str]:
    """The person columns ("" for none) this dataset's done estimates protected people by.
    Estimates recorded before this was stored carry no column and are not counted."""
    done = dataset.releases.filter(mechanism=ESTIMATE_MECHANISM, status=Release.Status.DONE)
    params = done.values_list("params", flat=True)
    return {p["person_column"] for p in params if "person_column" in (p or {})}


def estimated_person(dataset) -> dict:
    """The person question's answer the latest estimate used: {"person_column", and
    "max_rows_per_person" if there was one}, or {} if no estimate recorded one."""
    done = dataset.releases.filter(mechanism=ESTIMATE_MECHANISM, status=Release.Status.DONE)
    for params in done.order_by("-created_at", "-pk").values_list("params", flat=True):
        if "person_column" in (params or {}):
            keys = ("person_column", "max_rows_per_person")
            return {key: params[key] for key in keys if key in params}
    return {}


def _people_by(column: str) -> str:
    return f"people identified by the column {column!r}" if column else "each row as a person"


def _check_request(dataset, column, kind, person, percent) -> None:
    if dataset.is_deleted:
        raise ServiceError("This dataset has been deleted; nothing can be estimated from it.")
    if column not in (dataset.columns or []):
        raise ServiceError(f"There is no column {column!r} in this dataset.")
    if person is not None and column == person.column:
        raise ServiceError(
            f"{column!r} identifies a person: it is never read for an estimate or released."
        )
    if kind not in KINDS:
        raise ServiceError(f"An estimate is of bounds or categories, not {kind!r}.")
    if kind == "categorical" and dataset.delta_total <= 0:
        raise ServiceError(NO_DELTA)
    if estimate_cost(dataset, kind, percent)[0] <= 0:
        raise ServiceError(
            f"The dataset's total ε is too small for an estimate of "
            f"{percent_text(estimate_share(percent))}% of it; choose a larger share, or type "
            "the bounds or categories instead."
        )
    check_same_person_column(dataset, person)


@dataclass(frozen=True)
class Spend:
    """One estimate's request: the column, kind, recorded (ε, δ), person level and percent."""

    column: str
    kind: str
    epsilon: Decimal
    delta: Decimal
    person: PersonLevel | None
    percent: Decimal


def _record(locked, user, spend, found, remote_addr) -> Release:
    """The done release with its manifest (result and true unit), its debit and audit events."""
    now = timezone.now()
    share = percent_text(estimate_share(spend.percent))
    person = spend.person
    params = {
        "kind": spend.kind,
        "percent_of_total": share,
        "person_column": person.column if person else "",
        **({"max_rows_per_person": person.max_rows} if person else {}),
    }
    guarantee = found["guarantee"] | {"epsilon": str(spend.epsilon), "delta": str(spend.delta)}
    if person:  # the row-level run at person level (as estimates recorded it before)
        guarantee["per_row"] = found["accounting"]["per_row"] | {"neighbouring": "add-remove"}
    release = Release.objects.create(
        dataset=locked,
        requested_by=user,
        mechanism=ESTIMATE_MECHANISM,
        columns=[spend.column],
        params=params,
        epsilon=spend.epsilon,
        delta=spend.delta,
        neighbouring=locked.neighbouring,
        status=Release.Status.DONE,
        data_was_read=True,
        started_at=now,
        finished_at=now,
        manifest={
            "mechanism": ESTIMATE_MECHANISM,
            "parameters": {"column": spend.column, **params},
            "guarantee": guarantee,
            "result": found["result"],
        },
    )
    ledger_write(locked, release, BudgetLedgerEntry.Kind.DEBIT)
    details = {
        "mechanism": ESTIMATE_MECHANISM,
        "epsilon": str(spend.epsilon),
        "delta": str(spend.delta),
        "column": spend.column,
        "unit": guarantee["unit"],
        "sensitivity": guarantee["sensitivity"],
    }
    for action in (AuditEvent.Action.RELEASE_REQUESTED, AuditEvent.Action.RELEASE_DONE):
        audit.audit_record(
            action=action,
            actor=user,
            dataset=locked,
            release=release,
            details=details,
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
