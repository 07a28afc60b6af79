"""What the schema page proposes: a type per column from the profile, and bounds or categories
only from the custodian or a DP estimate (`services.dp_estimates`), never from the raw data.

Profiles stored before this rule may still hold the data's minimum, maximum or categories; they
are dropped here (`public_proposal`), so no page ever shows them.
"""

from dpportal import services
from dpportal.access.rules import row_count_is_public
from dpportal.datasets.dp_estimate_offer import page_person, spend_choices, too_little_checked
from dpportal.datasets.dp_estimate_views import estimate_text
from dpportal.datasets.public_lists import public_lists

RAW_KEYS = ("lower", "upper", "categories", "from_data")


def public_proposal(proposal: dict) -> dict:
    """A profile's proposal without any value read from the data (bins too, if they were)."""
    drop = set(RAW_KEYS) | ({"bins"} & set(proposal.get("from_data", [])))
    return {key: value for key, value in proposal.items() if key not in drop}


def with_estimate(entry: dict, estimate: dict | None) -> dict:
    """The entry with a DP estimate's bounds or categories filled in (when it found any)."""
    if not estimate:
        return entry
    if estimate["kind"] == "numeric" and None not in (estimate.get("lower"), estimate.get("upper")):
        return entry | {"type": "numeric", "lower": estimate["lower"], "upper": estimate["upper"]}
    if estimate["kind"] == "categorical" and estimate.get("categories"):
        return entry | {"type": "categorical", "categories": estimate["categories"]}
    return entry


def schema_entries(dataset) -> list[dict]:
    """The confirmed schema if there is one, else the type proposals with the latest DP
    estimates filled in."""
    if dataset.schema_confirmed:
        return dataset.schema["columns"]
    proposals = {p["name"]: p for p in (dataset.profile or {}).get("proposals", [])}
    estimates = services.latest_estimates(dataset)
    return [
        with_estimate(
            public_proposal(proposals.get(name, {"name": name, "type": "ignored"})),
            estimates.get(name),
        )
        for name in dataset.columns
    ]


def column_estimates(dataset) -> dict[str, dict]:
    """Column name -> its latest DP estimate, with the sentence the page shows for it."""
    estimates = services.latest_estimates(dataset)
    for estimate in estimates.values():
        estimate["text"] = estimate_text(estimate["kind"], estimate, estimate["epsilon"])
    return estimates


def dp_estimate_offer(dataset) -> dict:
    """The spends an estimate may choose, each with its cost and what it can do, shown before
    anything is spent (`dp_estimate_offer.spend_choices`), and the public lists for categories."""
    person = page_person(dataset)
    spends = spend_choices(dataset)
    return {
        "spends": spends,
        "too_little": too_little_checked(spends),
        "person": person,
        "rows_public": person is None and row_count_is_public(dataset),
        "has_delta": dataset.delta_total > 0,
        "public_lists": [{"id": x["id"], "label": x["label"]} for x in public_lists()],
        "list_values": {x["id"]: x["values"] for x in public_lists()},
    }
