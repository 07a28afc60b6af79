"""A release's risk in words for the portal's pages and API: thin calls to mechanisms.risk.

Built only from public facts (a release's epsilon, delta and neighbouring relation, the dataset's
spent budget, whether its confirmed schema names a person column): nothing from the data.
"""

from decimal import Decimal
from typing import Any

from dpportal.core.formatting import plain_number
from mechanisms.persons import PERSON_ROLE
from mechanisms.risk import percent, risk_sentences, risk_table, unit_of

TOTAL_EVENT = "all releases of this dataset together"


def dataset_unit(dataset) -> str:
    """The unit: "person" when the dataset's schema names a person column, else "row"."""
    columns = (dataset.schema or {}).get("columns") or []
    return "person" if any(c.get("role") == PERSON_ROLE for c in columns) else "row"


def release_unit(release) -> str:
    """The unit its manifest states once done; the dataset's before."""
    guarantee = (release.manifest or {}).get("guarantee")
    return unit_of(guarantee) if guarantee else dataset_unit(release.dataset)


def risk(
    epsilon: Decimal, delta: Decimal, unit: str, neighbouring: str, *, event: str = "this release"
) -> dict[str, Any]:
    """The risk as data: the inputs, each prior with its bound, and the sentences."""
    return {
        "epsilon": plain_number(epsilon),
        "delta": plain_number(delta),
        "unit": unit,
        "neighbouring": neighbouring,
        "table": [
            {
                "prior": row.prior,
                "posterior_at_most": row.posterior,
                "shown": [percent(row.prior), percent(row.posterior)],
            }
            for row in risk_table(float(epsilon))
        ],
        "sentences": risk_sentences(epsilon, delta, unit, neighbouring, event=event),
    }


def release_risk(release) -> dict[str, Any]:
    """The release's own risk and that of the dataset's total spent so far."""
    dataset, unit = release.dataset, release_unit(release)
    return {
        "release": risk(release.epsilon, release.delta, unit, release.neighbouring),
        "dataset_total": risk(
            dataset.epsilon_spent,
            dataset.delta_spent,
            unit,
            dataset.neighbouring,
            event=TOTAL_EVENT,
        ),
    }


def preview_risk(dataset, epsilon: Decimal, delta: Decimal) -> dict[str, Any]:
    """Before spending: the risk of a release at (epsilon, delta) and the dataset's total after."""
    unit, relation = dataset_unit(dataset), dataset.neighbouring
    return {
        "release": risk(epsilon, delta, unit, relation),
        "dataset_total": risk(
            dataset.epsilon_spent + epsilon,
            dataset.delta_spent + delta,
            unit,
            relation,
            event=TOTAL_EVENT + " (this one included)",
        ),
    }
