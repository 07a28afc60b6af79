"""Template filters and tags for plain-language labels: {% load portal_labels %}."""

import json
import re

from django import template

from dpportal.core.formatting import plain_number, rounded_number
from dpportal.releases import catalogue
from dpportal.releases.kinds.range_count import method_words

register = template.Library()

PATTERN_WORDS = {
    1: "each column on its own",
    2: "all pairs of columns",
    3: "all triples of columns",
}
PARAMETER_NAMES = {
    "rows": "synthetic rows",
    "cells": "combinations of values",
    "rounds": "rounds",
    "mix": "share spread evenly",
    "grid": "grid points per column",
    "mechanism": "method",
    "chosen_mechanism": "method used",
    "random_boxes": "random boxes",
    "random_halfspaces": "random regions cut by a line",
}
DECIMAL_NUMBER = re.compile(r"-?\d+\.\d{3,}(e[-+]?\d+)?")
BUDGET_KEYS = frozenset({"epsilon", "delta", "epsilon_total", "delta_total"})


register.filter("mechanism_title", catalogue.mechanism_title)  # → "Synthetic data (MWEM)"

register.filter("plain_number", plain_number)  # {{ release.epsilon|plain_number }}


@register.filter
def detail_value(value, key):
    """An audit event's detail for display: budgets (ε, δ) as plain decimals, the rest as is."""
    return plain_number(value) if key in BUDGET_KEYS else value


@register.filter
def short_number(cell):
    """A preview cell: long decimals rounded to 2 places for display (files are unchanged)."""
    text = str(cell)
    return f"{float(text):.2f}" if DECIMAL_NUMBER.fullmatch(text) else text


@register.simple_tag
def parameter_text(key, value):
    """One recorded mechanism setting as a readable 'name: value'."""
    if isinstance(value, str) and value[:1] in "[{":
        value = json.loads(value)
    if key == "workload" and isinstance(value, dict):
        return f"patterns: {_workload_words(value)}"
    if key == "structural_cells" and isinstance(value, dict):
        return _structural_words(value.get("zeroed") or [])
    if key == "model_blocks" and isinstance(value, dict):
        return _model_blocks_words(value)
    if key == "speed_cap" and isinstance(value, dict):
        return _speed_cap_words(value)
    if key in STATISTICS_WORDS:
        return STATISTICS_WORDS[key](value)
    if key in ("mechanism", "chosen_mechanism"):
        value = method_words(value)
    elif key == "prefixes":
        return "ranges: intervals from the lower bound up to every grid point"
    elif key == "mix" and isinstance(value, float):
        value = f"{value:.0%}"
    else:
        value = _words(value)
    return f"{PARAMETER_NAMES.get(key, key.replace('_', ' '))}: {value}"


def _words(value) -> str:
    """A recorded setting in words: numbers rounded, lists joined with ×, mappings as
    'name: value' pairs (never JSON or Python's own notation)."""
    if isinstance(value, float):
        return str(rounded_number(value))
    if isinstance(value, list):
        return " × ".join(_words(item) for item in value)
    if isinstance(value, dict):
        pairs = "; ".join(f"{str(k).replace('_', ' ')}: {_words(v)}" for k, v in value.items())
        return f"({pairs})"
    return str(value)


def _structural_words(zeroed: list) -> str:
    """The structural-cell rule of a synthetic release (`mechanisms.mwem.structural`), in words."""
    given = (
        f"given none here: {', '.join(str(cell) for cell in zeroed)}"
        if zeroed
        else "every one of them was given some here"
    )
    return (
        '"(missing)" and "(other)" cells: synthetic rows only where their noisy count is clearly '
        f"above what noise alone gives an empty cell ({given})"
    )


def _model_blocks_words(record: dict) -> str:
    """How MWEM held its model (`mechanisms.mwem.release.model_record`) in words: its note when
    the memory budget left patterns out, else the setting alone."""
    if record.get("note"):
        return str(record["note"])
    if record.get("whole_cells") is None:
        return "model: every block one whole table (every pattern could be chosen in every round)"
    return (
        f"model: blocks of up to {record['whole_cells']:,} cells as whole tables, larger ones as "
        "junction trees of smaller tables (every pattern could be chosen in every round)"
    )


def _speed_cap_words(record: dict) -> str:
    """The speed cap that MWEM releases made before junction trees record (its note when it
    left patterns out, else the setting alone): their pages keep saying it."""
    if record.get("note"):
        return str(record["note"])
    if record.get("cells") is None:
        return "speed cap: lifted (every pattern could be chosen in every round)"
    return f"speed cap: blocks of up to {record['cells']:,} cells (it left no pattern out)"


def _workload_words(spec: dict) -> str:
    words = []
    for query in spec.get("queries", []):
        if query.get("type") == "marginals" and query.get("k") in PATTERN_WORDS:
            words.append(PATTERN_WORDS[query["k"]])
        else:
            words.append(json.dumps(query))
    return "; ".join(words) or "none"


# ---------------------------------------------------------------- summary statistics' settings

STATISTIC_NAMES = {"std": "standard deviation", "count": "count of rows"}


def statistic_words(text: str) -> str:
    """A statistic as the manifest names it ("mean:age", "q25:age", "count") in words."""
    kind, _, column = str(text).partition(":")
    if kind.startswith("q") and kind[1:].isdigit():
        name = f"{int(kind[1:])}th percentile"
    else:
        name = STATISTIC_NAMES.get(kind, kind)
    return f"{name} of {column}" if column else name


def _per_statistic(mapping: dict, words) -> str:
    return "; ".join(f"{statistic_words(stat)}: {words(value)}" for stat, value in mapping.items())


def _sensitivity_words(records: list) -> str:
    """Per statistic, how much one row can move each noisy piece (its sensitivity)."""
    guarantee = records[0].get("guarantee", "") if records else ""
    pieces = {
        record["statistic"]: ", ".join(
            f"{piece} by {rounded_number(float(amount))}"
            for piece, amount in record["sensitivity"].items()
        )
        for record in records
    }
    return f"the most one row can move each noisy piece ({_words(guarantee)}): " + _per_statistic(
        pieces, str
    )


def _picks_words(picks: dict) -> str:
    """Per quantile, in how many groups its interval's ends were picked (else the declared
    range, the estimate then taking the whole ε)."""

    def counted(groups: list) -> str:
        picked = sum(1 for g in groups if g == "picked")
        if picked == len(groups):
            return f"ends picked in every group ({picked})"
        return (
            f"ends picked in {picked} of {len(groups)} groups; the declared range in the others "
            "(too few rows for a pick to narrow it)"
        )

    return "quantile intervals: " + _per_statistic(picks, counted)


def _epsilon_words(shares: list) -> str:
    if shares and all(share == shares[0] for share in shares):
        return f"ε per statistic (per row): {rounded_number(float(shares[0]))} each"
    return "ε per statistic (per row, in the order above): " + _words(shares)


STATISTICS_WORDS = {
    "stat": lambda stats: "statistics: " + ", ".join(map(statistic_words, stats)),
    "by": lambda by: f"grouped by: {', '.join(by)}" if by else "grouped by: nothing (one group)",
    "level": lambda level: f"confidence of each interval: {float(level):.0%}",
    "epsilon_per_statistic": _epsilon_words,
    "quantile_candidates": lambda c: (
        f"quantile candidates: {c['estimate']:,} for the estimate, "
        f"{c['interval_ends']:,} for the interval's ends"
    ),
    "sensitivities": _sensitivity_words,
    "quantile_interval_picks": _picks_words,
    "published_where": lambda where: (
        "a group's estimate is published where this noisy count shows rows: "
        + _per_statistic(where, str)
    ),
    "missing_values_left_out": lambda columns: (
        f"missing values left out of: {', '.join(columns)}" if columns else "missing values: none"
    ),
}
