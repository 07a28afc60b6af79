"""The new-release form's view of the catalogue: one card per mechanism, its settings
fieldsets, titles and running-stage labels, all from the release kinds (`kinds.kind_of`)."""

from dataclasses import dataclass

import mechanisms
from dpportal.releases.kinds import all_kinds, kind_of

DEFAULT_LEGEND = "{title} settings"


@dataclass(frozen=True)
class Card:
    """A mechanism as the new-release form offers it."""

    name: str
    title: str
    good_for: str
    outputs: str
    needs_delta: bool
    fields: tuple[str, ...]  # the form fields of its settings
    legend: str


def mechanism_title(name: str) -> str:
    """The plain-language title of a mechanism (the id in words if it is not catalogued)."""
    spec = mechanisms.CATALOGUE.get(name)
    return spec.title if spec else name.replace("_", " ")


def needs_delta(name: str) -> bool:
    """Whether the mechanism's guarantee can use delta > 0 (only such releases ask for it)."""
    spec = mechanisms.CATALOGUE.get(name)
    return spec is not None and spec.guarantee(1.0, 1e-6, "replace-one", {}).delta > 0


def cards() -> list[Card]:
    """One card per kind the release form offers, in catalogue order."""
    return [
        Card(
            kind.name,
            kind.title,
            kind.good_for(),
            kind.outputs(),
            needs_delta(kind.name),
            kind.field_names(),
            kind.legend or DEFAULT_LEGEND.format(title=kind.title),
        )
        for kind in all_kinds()
    ]


def settings_groups() -> list[tuple[str, str, tuple[str, ...]]]:
    """(legend, space-separated mechanism names, field names): one fieldset per set of
    settings, shared by the mechanisms that use the same fields (the histograms' rows)."""
    groups: dict[tuple[str, ...], list[Card]] = {}
    for card in cards():
        if card.fields:
            groups.setdefault(card.fields, []).append(card)
    return [
        (users[0].legend, " ".join(card.name for card in users), fields)
        for fields, users in groups.items()
    ]


def stage_label(mechanism: str, stage: str, done: int, total: int) -> str:
    """The running job's stage in words: "Round 3 of 12" for MWEM, else "Running: step …"."""
    if stage == "running" and total > 1:
        return kind_of(mechanism).progress_label(done, total)
    return (stage or "starting").capitalize()
