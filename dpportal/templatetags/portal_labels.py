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
