"""What a package says about itself beyond the manifest: its title, dataset, date and budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mechanisms.accounting import NEIGHBOURING
from mechanisms.catalogue import CATALOGUE
from mechanisms.risk import release_risk, total_risk, unit_of


@dataclass(frozen=True)
class Budget:
    """The dataset's privacy budget: spent so far (by every release) and total, as decimals."""

    epsilon_spent: str
    epsilon_total: str
    delta_spent: str = "0"
    delta_total: str = "0"
    releases: int = 0


@dataclass(frozen=True)
class PackageContext:
    """Public facts about a release that are not in its manifest.

    The portal knows them all; the command line gives a title and date only. Never anything
    computed from the data.
    """

    title: str = "Differentially private release"
    dataset: str = ""
    made_on: str = ""
    budget: Budget | None = None
    publisher: str = ""
    contact: str = ""
    note: str = ""
    reference: str = ""  # which release of the publisher's this is, such as "release 12"


def publisher_sentences(context: PackageContext) -> list[str]:
    """Who publishes the release and how to reach them, in words ([] if neither is given)."""
    sentences = []
    if context.publisher:
        sentences.append(f"Published by {context.publisher}.")
    if context.contact:
        sentences.append(f"Contact: {context.contact}.")
    return sentences


def mechanism_title(manifest: dict[str, Any]) -> str:
    """The catalogue's plain title of the manifest's mechanism (its id in words otherwise)."""
    name = str(manifest.get("mechanism", ""))
    return CATALOGUE[name].title if name in CATALOGUE else name.replace("_", " ")


def released_columns(manifest: dict[str, Any]) -> list[str]:
    """The released columns, as the manifest names them."""
    columns = manifest.get("parameters", {}).get("columns")
    if columns:
        return [str(c) for c in columns]
    return [str(c["name"]) for c in manifest.get("schema", {}).get("columns", [])]


def plain(value: Any) -> str:
    """A number in plain decimals (no exponent): 1e-06 as 0.000001, 1.0 as 1."""
    if value is None:
        return "0"
    if value == "inf":
        return "infinity"
    text = f"{float(value):.12f}".rstrip("0").rstrip(".")
    return text or "0"


def guarantee_sentences(manifest: dict[str, Any]) -> list[str]:
    """The privacy guarantee in plain words: unit, epsilon, delta, neighbours, definition."""
    g = manifest.get("guarantee", {})
    change = "replaced by another" if g.get("neighbouring") == "replace-one" else "added or removed"
    delta = float(g.get("delta") or 0)
    k = g.get("max_rows_per_person")  # person level (mechanisms.persons)
    unit_note = (
        f" Rows beyond {k} per person were left out at random before the release; the column "
        "that identifies persons is not released."
        if k is not None
        else " Each row is one person or record of the private table."
    )
    who = "all the rows of any one person" if k is not None else "any one row"
    sentences = [
        f"Protected unit: {g.get('unit', 'one row of the input table')}.{unit_note}",
        f"Privacy loss: epsilon = {plain(g.get('epsilon'))}"
        + (
            f" and delta = {plain(delta)} (a chance of at most {plain(delta)} that the "
            "guarantee below does not hold)."
            if delta > 0
            else " and delta = 0 (the guarantee always holds)."
        ),
        "Neighbours: anything these files show would have been almost as likely if "
        f"{who} had been {change}. So they reveal very little about any one person, whatever "
        "else is known and whatever is done with them.",
        "The smaller epsilon is, the stronger the protection and the noisier the numbers.",
        f"Formally: {g.get('definition', 'differential privacy')}"
        + (f" with rho = {plain(g['rho'])}" if g.get("rho") is not None else "")
        + f", under the '{g.get('neighbouring', '')}' relation.",
    ]
    if manifest.get("row_count_public"):
        sentences.append("The number of rows in the private table is treated as public.")
    return sentences


def budget_sentence(budget: Budget) -> str:
    """The dataset's cumulative privacy cost in words."""
    delta = (
        f" and delta = {budget.delta_spent} of {budget.delta_total}"
        if budget.delta_total not in ("0", "")
        else ""
    )
    who = (
        "The one release of this dataset has"
        if budget.releases == 1
        else f"All {budget.releases} releases of this dataset together have"
    )
    return (
        f"{who} spent epsilon = {budget.epsilon_spent} of its total budget of "
        f"{budget.epsilon_total}{delta}. Privacy losses add up: a reader who combines every "
        "release learns at most that much."
    )


def risk_of_release(manifest: dict[str, Any]) -> list[str]:
    """The release's risk in words (mechanisms.risk); none if its manifest names no relation."""
    guarantee = manifest.get("guarantee", {})
    return release_risk(guarantee) if guarantee.get("neighbouring") in NEIGHBOURING else []


def risk_of_budget(manifest: dict[str, Any], budget: Budget) -> list[str]:
    """The risk of all the dataset's releases together, for the release's unit and relation."""
    guarantee = manifest.get("guarantee", {})
    if guarantee.get("neighbouring") not in NEIGHBOURING:
        return []
    return total_risk(
        budget.epsilon_spent, budget.delta_spent, unit_of(guarantee), guarantee["neighbouring"]
    )
