"""What a request's page (and its API answer) shows: the expected accuracy, the budget impact
and the risk in words, to each reader as the access rules allow.

Public facts only: the confirmed schema, the request's settings, ε and δ, the budget's and the
allotment's figures. The expected accuracy reads the stored row count too, so it is shown only
to those who may know that count (`access.rules.sees_expected_accuracy`). The analyst sees the
budget through its allotment alone; the owner, the auditors and the second approver also see
the dataset's budget. Times and a release's state reach non-owners on the minute (T10).
"""

from decimal import Decimal
from typing import Any

import mechanisms
from dpportal.access.rules import is_owner, sees_expected_accuracy
from dpportal.access.timing import shown_status, shown_time_text
from dpportal.analysts.models import ReleaseRequest, held_on_budget
from dpportal.core.formatting import plain_number
from dpportal.models import Release
from dpportal.releases import catalogue, packaging
from dpportal.releases import engine as release_engine
from dpportal.releases.risk_words import dataset_unit, risk
from dpportal.services.requests import promised

ACCURACY_FOR_OWNER = (
    "The expected accuracy is shown to the dataset's owner only: it is predicted from the number "
    "of rows, which is private on this dataset (rows may be added or removed, or the rows of one "
    "person are protected together)."
)
DATASET_AFTER = "all releases of this dataset and the allotments reserved on its budget"


def allotment_figures(analyst) -> dict[str, str]:
    """The allotment as its analyst and its owner read it (exact decimals as text)."""
    waiting = promised(analyst)
    return {
        "epsilon_allotted": plain_number(analyst.epsilon_allotted),
        "delta_allotted": plain_number(analyst.delta_allotted),
        "epsilon_held": plain_number(analyst.epsilon_held),
        "delta_held": plain_number(analyst.delta_held),
        "epsilon_waiting": plain_number(waiting[0]),
        "delta_waiting": plain_number(waiting[1]),
        "epsilon_available": plain_number(max(analyst.epsilon_held - waiting[0], Decimal(0))),
        "delta_available": plain_number(max(analyst.delta_held - waiting[1], Decimal(0))),
    }


def request_review(user, request: ReleaseRequest) -> dict[str, Any]:
    """Accuracy, budget impact and risk of the request, as `user` may see them."""
    dataset, analyst_only = request.dataset, _analyst_only(user, request)
    review: dict[str, Any] = {
        "title": catalogue.mechanism_title(request.mechanism),
        "accuracy": _accuracy(user, request),
        "allotment": allotment_figures(request.analyst),
        "allotment_after": plain_number(request.analyst.epsilon_held - request.epsilon)
        if request.is_waiting
        else None,
        "risk": {
            "release": risk(
                request.epsilon, request.delta, dataset_unit(dataset), dataset.neighbouring
            )
        },
    }
    if not analyst_only:
        held = held_on_budget(dataset.budget_id)
        review["dataset_budget"] = {
            "epsilon_total": plain_number(dataset.epsilon_total),
            "epsilon_spent_or_reserved": plain_number(dataset.epsilon_spent),
            "epsilon_reserved": plain_number(held[0]),
            "epsilon_remaining": plain_number(dataset.epsilon_remaining),
            "delta_total": plain_number(dataset.delta_total),
            "delta_remaining": plain_number(dataset.delta_remaining),
        }
        review["risk"]["dataset_total"] = risk(
            dataset.epsilon_spent,
            dataset.delta_spent,
            dataset_unit(dataset),
            dataset.neighbouring,
            event=DATASET_AFTER,
        )
    return review


def _analyst_only(user, request) -> bool:
    """Whether the user reads the request as its analyst (not as owner, auditor or approver)."""
    dataset = request.dataset
    return not (
        is_owner(user, dataset)
        or request.second_approver_id == user.pk
        or dataset.auditors.filter(pk=user.pk).exists()
    )


def _accuracy(user, request) -> dict[str, Any]:
    """{"lines", "table"} of the expected accuracy, or {"withheld": why}."""
    dataset = request.dataset
    if not sees_expected_accuracy(user, dataset):
        return {"withheld": ACCURACY_FOR_OWNER}
    if dataset.is_deleted or not dataset.schema_confirmed:
        return {
            "withheld": "The dataset has no confirmed schema any more; nothing can be predicted."
        }
    try:
        return release_engine.expected_accuracy(
            dataset,
            mechanism=request.mechanism,
            columns=request.columns,
            params=request.params,
            epsilon=request.epsilon,
            delta=request.delta,
        )
    except mechanisms.MechanismError as exc:
        return {"withheld": f"These settings cannot work any more: {exc}"}


def release_state(user, request) -> dict[str, Any] | None:
    """The request's release as the user may see it: its status (on the minute for
    non-owners) and, once done, the names of its public package's files."""
    release = request.release
    if release is None:
        return None
    status = shown_status(release, exact=is_owner(user, request.dataset))
    done = status == Release.Status.DONE
    return {
        "release": release,
        "status": status,
        "status_label": Release.Status(status).label,
        "files": packaging.package_names(release) if done else [],
    }


def shown_when(user, request, moment) -> str:
    return shown_time_text(moment, exact=is_owner(user, request.dataset))


ALLOTMENT_TOGETHER = (
    "all releases from your allotment together, your waiting requests and this one included"
)


def analyst_preview_risk(analyst, epsilon, delta) -> dict[str, Any]:
    """Before requesting: the risk of a release at (epsilon, delta), and of everything the
    analyst's allotment has spent or its waiting requests ask for, with this one."""
    dataset, waiting = analyst.dataset, promised(analyst)
    unit, relation = dataset_unit(dataset), dataset.neighbouring
    used_epsilon = analyst.epsilon_allotted - analyst.epsilon_held + waiting[0] + epsilon
    used_delta = analyst.delta_allotted - analyst.delta_held + waiting[1] + delta
    return {
        "release": risk(epsilon, delta, unit, relation),
        "dataset_total": risk(used_epsilon, used_delta, unit, relation, event=ALLOTMENT_TOGETHER),
        "total_caption": f"The risk of {ALLOTMENT_TOGETHER}",
    }
