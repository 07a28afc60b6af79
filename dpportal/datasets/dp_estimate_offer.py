"""The schema page's choice of how much one "estimate for me" spends, with what each spend can do.

Each choice says, before anything is spent, what an estimate at that spend achieves: for bounds,
how many values at most they set to the nearest bound on average; for categories, the fewest
rows a category needs to be found (with 95% chance). Both come from public inputs only
(`mechanisms.public_bounds.estimate_accuracy`: the spend, the neighbouring relation and the
person level the page shows); the row count turns them into shares only where it is public
(`access.rules.row_count_is_public`, and no person column on the page), else they are stated
in rows.
"""

import math

from dpportal import services
from dpportal.access.rules import row_count_is_public
from dpportal.core.formatting import plain_number
from mechanisms import public_bounds
from mechanisms.accounting import float_at_most
from mechanisms.persons import PersonLevel

KINDS = ("numeric", "categorical")


def spend_choices(dataset) -> dict[str, list[dict]]:
    """Kind -> the offered spends: {"value", "label", "checked"} each (none for categories
    when δ = 0). Spends whose ε rounds to 0 are left out; those above what is left say so."""
    person = page_person(dataset)
    rows = dataset.row_count if row_count_is_public(dataset) and person is None else None
    default = services.dp_estimates.check_percent(None)
    choices: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for kind in KINDS:
        if kind == "categorical" and dataset.delta_total <= 0:
            continue
        for percent in services.dp_estimates.spend_percents():
            epsilon, delta = services.estimate_cost(dataset, kind, percent)
            if epsilon <= 0:
                continue
            label, too_little = _label(dataset, kind, percent, (epsilon, delta), person, rows)
            choices[kind].append(
                {
                    "value": plain_number(percent),
                    "label": label,
                    "checked": percent == default,
                    "too_little": too_little,
                }
            )
    return choices


def too_little_checked(choices: dict[str, list[dict]]) -> dict[str, bool]:
    """Kind -> whether the spend checked when the page opens is too little to find anything
    (its "estimate for me" buttons are then disabled, with the reason beside them)."""
    return {
        kind: any(c["checked"] and c["too_little"] for c in offered)
        for kind, offered in choices.items()
    }


def page_person(dataset) -> PersonLevel | None:
    """The person level the schema page shows when it opens: the confirmed schema's, else the
    one the latest estimate used (None: each row is a different person)."""
    if dataset.schema_confirmed:
        return services.dp_estimates.confirmed_person(dataset)
    used = services.dp_estimates.estimated_person(dataset)
    if not used.get("person_column"):
        return None
    return PersonLevel(used["person_column"], used["max_rows_per_person"])


def _label(dataset, kind, percent, cost, person, rows) -> tuple[str, bool]:
    """The choice's words, and whether its spend is too little to find anything."""
    epsilon, delta = cost
    spent = f"ε = {plain_number(epsilon)}" + (
        f", δ = {plain_number(delta)}" if kind == "categorical" else ""
    )
    accuracy = public_bounds.estimate_accuracy(
        kind,
        person=person,
        epsilon=float_at_most(epsilon),
        delta=float_at_most(delta),
        neighbouring=dataset.neighbouring,
    )
    if kind == "numeric":
        what = clamp_words(accuracy["expected_clamp_rows"], rows)
        too_little = clamps_too_much(accuracy["expected_clamp_rows"], rows)
    else:
        what = found_words(int(accuracy["found_rows"]), rows)
        too_little = rows is not None and int(accuracy["found_rows"]) > rows
    left = epsilon > dataset.epsilon_remaining or delta > dataset.delta_remaining
    label = f"{plain_number(percent)}% of the budget ({spent}): {what}" + (
        " (more than is left)" if left else ""
    )
    return label, too_little


def clamps_too_much(expected_rows: float, rows: int | None) -> bool:
    """Bounds at this spend may cut off half the public rows or more: too little to help."""
    return rows is not None and math.ceil(expected_rows) >= rows / 2


def clamp_words(expected_rows: float, rows: int | None = None) -> str:
    """What bounds at this spend cut off, in words: a share of `rows` if given, else rows."""
    most = math.ceil(expected_rows)
    if rows is not None and clamps_too_much(expected_rows, rows):
        return (
            f"too little for {rows:,} rows: the bounds may cut off many of the values "
            f"(up to about {most:,} rows on average)"
        )
    share = f"about 1 in {rows / max(most, 1):,.0f} values, " if rows else "about "
    return (
        f"on average at most {share}{most:,} rows, set to the nearest bound "
        "(usually far fewer; this many only if a few values lie far from all others)"
    )


def found_words(found_rows: int, rows: int | None = None) -> str:
    """Which categories a search at this spend finds, in words (a share of `rows` if given)."""
    if rows is not None and found_rows > rows:
        return f"too little for {rows:,} rows: no category can be found"
    share = f" ({found_rows / rows:.1%} of the {rows:,} rows)" if rows else ""
    return f"finds every category held by at least {found_rows:,} rows{share}, with 95% chance each"
