"""The portal's one view of `mechanisms.CATALOGUE`: cards, form fields, titles, stage labels,
range-count method names and accuracy text.

Every mechanism name the portal's pages and forms use lives here. A catalogue row without
portal text below still gets a card (its title and summary), one form field per parameter of
its schema, and accuracy text from its public noise plan.
"""

import math
from dataclasses import dataclass

from django import forms

import mechanisms
from dpportal.releases.kinds.statistics import portal as statistics_portal
from mechanisms.range_count.api import MECHANISM_NAMES

DECIMAL_INPUT = forms.TextInput(attrs={"inputmode": "decimal"})
WHOLE_NUMBER_INPUT = forms.TextInput(attrs={"inputmode": "numeric"})


@dataclass(frozen=True)
class Card:
    """A mechanism as the new-release form offers it."""

    name: str
    title: str
    good_for: str
    outputs: str
    needs_delta: bool
    fields: tuple[str, ...]  # the form fields of its settings


# name -> (good for, you get, the ReleaseForm fields of its settings)
PORTAL_TEXT = {
    "perturbed_histogram": (
        "Counts of people per combination of a few columns (for example age group × sex), "
        "and a synthetic table with the same counts. Simple and predictable.",
        "noisy_counts.csv (one noisy count per cell) and synthetic.csv (made-up rows).",
        ("rows",),
    ),
    "smoothed_histogram": (
        "Made-up rows drawn from a blend of the real histogram and an even spread over all "
        "cells; the blend, not added noise, protects privacy. Best with few cells. Needs the "
        "number of rows to be public.",
        "synthetic.csv (made-up rows) and noisy_counts.csv (how many made-up rows per cell).",
        ("rows",),
    ),
    "mwem": (
        "A synthetic table over many columns that keeps the patterns between pairs (or "
        "triples) of columns. Best when you need realistic made-up rows.",
        "synthetic.csv (made-up rows, as many as the table has) and measurements.json (what "
        "was measured, with noise).",
        ("mwem_marginal_size", "mwem_rounds"),
    ),
    "range_count": (
        "Answers to 'how many rows fall in this range?' for numeric columns: intervals, "
        "boxes, or regions cut by a straight line, each with a 95% interval. New ranges can be "
        "answered later for free (except with the method “a noisy answer per range”).",
        "answers.csv (one row per range: estimate and 95% interval) and structure.json (to "
        "answer new ranges later).",
        ("range_workload", "range_grid", "range_queries", "range_method"),
    ),
    "statistics": (
        "The figures a statistics office publishes: counts, sums, means, variances, "
        "medians and other percentiles of numeric columns, for every group of one or two "
        "categorical columns, each with its 95% interval.",
        "statistics.csv (one row per statistic and group: estimate, 95% interval, noise "
        "scale and ε).",
        statistics_portal.FIELDS,
    ),
}
ROUNDS_PROGRESS = {"mwem"}  # progress steps are rounds
NEEDS_NUMERIC = {"range_count"}  # ranges need numeric columns
NEEDS_PUBLIC_ROW_COUNT = {"smoothed_histogram"}
ASKS_ROWS = {"perturbed_histogram", "smoothed_histogram"}
ANSWERS_NEW_RANGES = {"range_count"}
NO_CELL_DOMAIN = {"statistics"}  # works on the columns themselves, not on a grid of cells

# range-count method -> (form choice, words in pages and accuracy text)
RANGE_METHODS = {
    "auto": (
        "Automatic: the most accurate for these ranges, chosen without the data",
        "chosen automatically",
    ),
    "identity": ("A noisy count per grid point", "a noisy count per grid point"),
    "tree": (
        "A hierarchy of noisy counts (good for intervals and boxes)",
        "a hierarchy of noisy counts",
    ),
    "mn12": (
        "Halfspace decomposition (regions cut by lines; needs δ > 0)",
        "the halfspace decomposition",
    ),
    "mn12_laplace": (
        "Halfspace decomposition, the paper's Laplace version (for comparison: about twice "
        "the error; needs δ > 0)",
        "the halfspace decomposition with Laplace noise",
    ),
    "path_tree": (
        "A hierarchy of noisy counts along a path through the grid points (any region)",
        "a hierarchy of noisy counts along a path through the points",
    ),
    "per_query": (
        "A noisy answer per range (cannot answer new ranges later; never chosen automatically)",
        "a noisy answer per range",
    ),
}
assert set(RANGE_METHODS) == set(MECHANISM_NAMES), "one entry per range-count method"
NEEDS_DELTA_METHODS = {"mn12", "mn12_laplace"}
# Job limits of a range-count release (the form refuses more); the preview's own work limits
# are in mechanisms.plans (PREVIEW_*).
RANGE_MAX_GRID_POINTS = 65_536
RANGE_MAX_QUERIES = 4_096  # ranges answered, prefixes included (one per grid point)
NO_NEW_RANGES_METHODS = {"per_query"}  # its structure answers only the planned ranges


def range_method_choices() -> list[tuple[str, str]]:
    return [(name, choice) for name, (choice, _) in RANGE_METHODS.items()]


def range_method_words(name: str) -> str:
    return RANGE_METHODS.get(name, (None, name))[1]


def mechanism_title(name: str) -> str:
    """The plain-language title of a mechanism (the id in words if it is not catalogued)."""
    spec = mechanisms.CATALOGUE.get(name)
    if name == "dp_schema_estimate":  # the schema page's "estimate for me" (services.estimates)
        return "DP estimate of a column's bounds or categories"
    return spec.title if spec else name.replace("_", " ")


def needs_delta(name: str) -> bool:
    """Whether the mechanism's guarantee can use delta > 0 (only such releases ask for it)."""
    spec = mechanisms.CATALOGUE.get(name)
    return spec is not None and spec.guarantee(1.0, 1e-6, "replace-one", {}).delta > 0


def cards() -> list[Card]:
    """One card per catalogue row, in catalogue order."""
    result = []
    for name, spec in mechanisms.CATALOGUE.items():
        good_for, outputs, fields = PORTAL_TEXT.get(
            name, (spec.summary, ", ".join(spec.files), generic_field_names(spec))
        )
        result.append(Card(name, spec.title, good_for, outputs, needs_delta(name), fields))
    return result


LEGENDS = {"rows": "4. Synthetic table", "mwem_rounds": "MWEM settings"}
LEGENDS["range_method"] = "Range count settings"
LEGENDS["stats_kinds"] = "Summary statistics settings"


def settings_groups() -> list[tuple[str, str, tuple[str, ...]]]:
    """(legend, space-separated mechanism names, field names): one fieldset per set of
    settings, shared by the mechanisms that use the same fields (the histograms' rows)."""
    groups: dict[tuple[str, ...], list[Card]] = {}
    for card in cards():
        if card.fields:
            groups.setdefault(card.fields, []).append(card)
    return [
        (
            next((LEGENDS[f] for f in fields if f in LEGENDS), f"{users[0].title} settings"),
            " ".join(card.name for card in users),
            fields,
        )
        for fields, users in groups.items()
    ]


def generic_field_names(spec) -> tuple[str, ...]:
    return tuple(f"{spec.name}__{p.name}" for p in spec.parameters)


def generic_fields() -> dict[str, forms.Field]:
    """Form fields from the parameter schemas of catalogue rows without portal text."""
    fields = {}
    for name, spec in mechanisms.CATALOGUE.items():
        if name in PORTAL_TEXT:
            continue
        for parameter in spec.parameters:
            fields[f"{name}__{parameter.name}"] = _field(parameter)
    return fields


def _field(parameter) -> forms.Field:
    common = {"label": parameter.name.replace("_", " ").capitalize(), "required": False}
    common["help_text"] = parameter.help
    if parameter.choices:
        choices = [(c, c) for c in parameter.choices]
        return forms.ChoiceField(choices=choices, initial=parameter.default, **common)
    low, high = parameter.bounds
    if parameter.type is int:
        widget = WHOLE_NUMBER_INPUT
        return forms.IntegerField(min_value=low, max_value=high, widget=widget, **common)
    if parameter.type is float:
        return forms.FloatField(min_value=low, max_value=high, widget=DECIMAL_INPUT, **common)
    return forms.CharField(**common)


def generic_params(mechanism: str, cleaned: dict) -> dict:
    """The parameters typed into a generic mechanism's fields (empty ones left to defaults)."""
    prefix = f"{mechanism}__"
    return {
        key[len(prefix) :]: value
        for key, value in cleaned.items()
        if key.startswith(prefix) and value not in (None, "")
    }


def stage_label(mechanism: str, stage: str, done: int, total: int) -> str:
    """The running job's stage in words: "Round 3 of 12" for MWEM, else "Running: step …"."""
    text = (stage or "starting").capitalize()
    if stage == "running" and total > 1:
        if mechanism in ROUNDS_PROGRESS:
            return f"Round {done} of {total}"
        return f"{text}: step {done} of {total}"
    return text


# ---------------------------------------------------------------- accuracy text


def accuracy_lines(mechanism, plan, schema, columns, row_count) -> list[str]:
    """Plain sentences from a mechanism's public noise plan (mechanisms.plans)."""
    if mechanism == "range_count":
        return _range_count_lines(plan, row_count)
    if mechanism == "statistics":
        return statistics_portal.accuracy_lines(plan)
    if mechanism == "mwem" and plan.details.get("full_table"):
        return [
            f"The workload asks for the full table ({plan.support:,} cells); MWEM will measure "
            "every cell of it once with the whole budget, and every pattern is a sum of them.",
            f"Each measured count gets random noise of typically ±{plan.expected_error:,.1f} rows.",
            _relative_error_line(plan.expected_error, row_count / plan.support),
        ]
    if mechanism == "mwem":
        return [
            f"The workload has {plan.details['workload']} patterns (tables of counts); MWEM "
            f"will measure {plan.details['rounds']} of them, the ones its model gets most "
            "wrong, one per round.",
            f"Each measured count gets random noise of typically ±{plan.expected_error:,.1f} rows.",
            _relative_error_line(plan.expected_error, row_count / plan.details["median_cells"]),
            "Patterns that are not measured are only as good as the model's guess from the others.",
        ]
    if mechanism == "smoothed_histogram":
        return _smoothed_lines(plan)
    if mechanism == "perturbed_histogram":
        return [
            f"The chosen columns make {combinations(schema, columns)}. Each combination's "
            f"count gets random noise of typically ±{plan.expected_error:,.1f} rows.",
            _relative_error_line(plan.expected_error, row_count / plan.support),
        ]
    return [
        f"Each of its {plan.outputs:,} outputs gets {plan.noise} noise of typically "
        f"±{plan.expected_error:,.1f} rows."
    ]


def _range_count_lines(plan, row_count) -> list[str]:
    """The range-count preview: exact for small jobs, an estimate from a sample for large ones
    (mechanisms.plans.range_count_plan), and says which."""
    method = range_method_words(plan.details["method"])
    lines = [
        f"{plan.outputs:,} ranges over a grid of {plan.support:,} points. The method used "
        f"will be {method}, chosen from public information only."
    ]
    if plan.expected_error is None:
        lines.append(
            f"These settings are too large to preview: the error of {method} is worked out "
            "when the release runs, and shown with its answers."
        )
        return lines
    if plan.details.get("estimate"):
        lines[0] = (
            f"{plan.outputs:,} ranges over a grid of {plan.support:,} points: an estimate, from "
            f"{plan.details['sample']} of the ranges drawn at random, with {method}."
        )
        if plan.details.get("upper_bound"):
            lines[0] += (
                " The release plans every method exactly and keeps the most accurate, so it "
                "will be at least this accurate."
            )
    lines.append(
        f"Noise: each answer will be within ±{plan.details['noise_95']:,.0f} rows of the count "
        f"over its grid cells with 95% probability (typical error ±{plan.expected_error:,.1f}, "
        f"predicted from the method's noise), out of {row_count:,} rows in the table."
    )
    lines.append(_rounding_line(plan.details))
    if plan.details["method"] in NO_NEW_RANGES_METHODS:
        lines.append(
            "This method gives one noisy answer per planned range only: the release will "
            "not be able to answer new range questions later."
        )
    return lines


def _rounding_line(details) -> str:
    """The rounding part of the range-count preview (mechanisms.plans.range_rounding)."""
    share, rows = details["rounding_share"], details["rounding_rows"]
    if share == 0:
        return (
            "Rounding: none. Every range follows the grid's edges, so the answer counts "
            "exactly the rows in it; the 95% interval covers the noise alone."
        )
    return (
        f"Rounding: {share:.0%} of these ranges cut grid cells; there the interval also "
        f"covers the rows in the cut cells, about ±{rows:,.0f} rows if rows are spread evenly. "
        "A finer grid makes this smaller (and the noise slightly larger)."
    )


def combinations(schema, columns) -> str:
    """'24 combinations (8 age bins × 3 sex values)': the cells, in words."""
    parts = []
    for name in columns:
        spec = schema.column(name)
        unit = "bins" if isinstance(spec, mechanisms.schema.NumericColumn) else "values"
        missing = " with (missing)" if spec.missing == "cell" else ""
        parts.append(f"{spec.n_cells} {name} {unit}{missing}")
    total = math.prod(schema.column(name).n_cells for name in columns)
    return f"{total:,} combinations ({' × '.join(parts)})"


def _share_text(share: float) -> str:
    return "under 1%" if share < 0.01 else f"about {share:.0%}"


def _relative_error_line(noise: float, rows_per_cell: float) -> str:
    if rows_per_cell <= 0:
        return "The table is empty, so every count will be pure noise."
    share = noise / rows_per_cell
    verdict = (
        "small"
        if share < 0.1
        else "noticeable"
        if share < 0.5
        else "large: consider fewer columns, fewer bins or a larger ε"
    )
    return (
        f"An average combination holds about {rows_per_cell:,.0f} rows, so the typical "
        f"error is {_share_text(share)} of that ({verdict}). Rare combinations are "
        "affected more."
    )


def _smoothed_lines(plan) -> list[str]:
    rows, mix, per_cell = plan.details["rows"], plan.details["mix"], plan.outputs / plan.support
    lines = [
        f"{rows:,} synthetic rows will be drawn over {plan.support:,} cells. To protect privacy, "
        f"{mix:.0%} of them are spread evenly over all cells, whatever the data.",
        f"The rest follow the real distribution, with a sampling error of about "
        f"±{plan.expected_error:,.1f} rows in an average cell of {per_cell:,.1f} rows.",
    ]
    if mix > 0.5:
        lines.append(
            "That is a lot of evenly spread rows: ask for fewer rows, fewer columns or a larger ε."
        )
    return lines
