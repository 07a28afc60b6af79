"""Range counts in the portal (`mechanisms.range_count`): answers to "how many rows fall in this
range?" over a public grid, each with its 95% interval; new ranges answered later for free
from the released structure (`results_sections`), charts of the answers, and the owner's
comparison and verdict (`verdict`)."""

import json
import math

import numpy as np
import pandas as pd
from django import forms

import mechanisms
from dpportal.access.rules import row_count_is_public
from dpportal.core.form_fields import WHOLE_NUMBER_INPUT
from dpportal.releases import accuracy_preview, charts, packaging
from dpportal.releases.comparisons import MAX_SCATTER_POINTS
from dpportal.releases.kinds.base import Kind
from dpportal.releases.kinds.range_count import figures as range_charts
from dpportal.releases.kinds.range_count import verdict as range_verdict
from dpportal.releases.kinds.range_count.query_form import RangeQueryForm
from mechanisms.range_count.api import MECHANISM_NAMES, load_structure, support_from_schema
from mechanisms.range_count.grid_choice import suggest_grid
from mechanisms.range_count.grid_tally import grid_tally

ANSWERS, STRUCTURE = "answers.csv", "structure.json"
MAX_ANSWERS_SHOWN = 100
WORKLOADS = (
    (
        "prefixes",
        "Intervals from the lower bound up to every grid point (with one column, any "
        "interval is the difference of two of these)",
    ),
    ("boxes", "Random boxes (random intervals with one column)"),
    ("halfspaces", "Random regions on one side of a straight line (two or more columns)"),
)
# method -> (form choice, words in pages and accuracy text)
METHODS = {
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
assert set(METHODS) == set(MECHANISM_NAMES), "one entry per range-count method"
NEEDS_DELTA_METHODS = {"mn12", "mn12_laplace"}
NO_NEW_RANGES_METHODS = {"per_query"}  # its structure answers only the planned ranges
# Job limits of a range-count release (the form refuses more); the preview's own work limits
# are in mechanisms.plans (PREVIEW_*).
MAX_GRID_POINTS = 65_536
MAX_QUERIES = 4_096  # ranges answered, prefixes included (one per grid point)


def method_words(name: str) -> str:
    return METHODS.get(name, (None, name))[1]


class RangeCount(Kind):
    legend = "Range count settings"

    def good_for(self) -> str:
        return (
            "Answers to 'how many rows fall in this range?' for numeric columns: intervals, "
            "boxes, or regions cut by a straight line, each with a 95% interval. New ranges "
            "can be answered later for free (except with the method “a noisy answer per "
            "range”)."
        )

    def outputs(self) -> str:
        return (
            "answers.csv (one row per range: estimate and 95% interval) and structure.json "
            "(to answer new ranges later)."
        )

    def form_fields(self) -> dict[str, forms.Field]:
        return {
            "range_workload": forms.ChoiceField(
                label="Ranges to answer", choices=WORKLOADS, initial="prefixes", required=False
            ),
            "range_grid": forms.IntegerField(
                label="Grid points per column",
                required=False,
                min_value=2,
                max_value=4096,
                help_text="Values are rounded to a regular grid between the schema's bounds. "
                "Leave empty for a grid fine enough that rounding is small against the noise "
                "at this ε (when the number of rows is public; otherwise the schema's bins).",
                widget=WHOLE_NUMBER_INPUT,
            ),
            "range_queries": forms.IntegerField(
                label="Number of random ranges",
                required=False,
                min_value=1,
                max_value=2000,
                initial=200,
                help_text="For random boxes and regions cut by a line. The ranges are "
                "drawn at random, without looking at the data.",
                widget=WHOLE_NUMBER_INPUT,
            ),
            "range_method": forms.ChoiceField(
                label="Method",
                choices=[(name, choice) for name, (choice, _) in METHODS.items()],
                initial="auto",
                required=False,
            ),
        }

    def engine_tallies(self, schema, columns, params, epsilon, neighbouring) -> list:
        """The rows per point of the grid (`range_count.grid_tally`)."""
        accepting = schema.accepting()
        return [grid_tally(support_from_schema(accepting, columns, params), accepting)]

    def check_columns(self, form, columns) -> None:
        data = form.cleaned_data
        workload, method = _workload(data), data.get("range_method") or "auto"
        non_numeric = [c for c in columns if c not in form.numeric_columns()]
        if non_numeric:
            form.add_error(
                "columns",
                f"Range counts need numeric columns; {', '.join(non_numeric)} is categorical.",
            )
            return
        if workload == "halfspaces" and len(columns) < 2:
            form.add_error("columns", "Regions cut by a line need at least two columns.")
        if method in NEEDS_DELTA_METHODS and not data.get("delta"):
            form.add_error("delta", "The halfspace decomposition needs δ > 0, such as 0.000001.")
        points = math.prod(_grid(form, columns))
        if points > MAX_GRID_POINTS:
            form.add_error(
                "range_grid",
                f"The grid has {points:,} points; use at most {MAX_GRID_POINTS:,} (fewer "
                "points per column).",
            )
        elif workload == "prefixes" and points > MAX_QUERIES:
            form.add_error(
                "range_grid",
                f"Intervals up to every grid point are {points:,} ranges here; at most "
                f"{MAX_QUERIES:,} can be answered: use fewer grid points per column, or "
                "random boxes.",
            )

    def params(self, form, cleaned):
        grid = _grid(form, cleaned["columns"])
        params = {"grid": grid, "mechanism": cleaned.get("range_method") or "auto"}
        count = cleaned.get("range_queries") or 200
        workload = _workload(cleaned)
        if workload == "prefixes":
            params["prefixes"] = True
        elif workload == "boxes":
            params["random_boxes"] = count
        else:
            params["random_halfspaces"] = count
        return params

    def accuracy_lines(self, plan, schema, columns, row_count) -> list[str]:
        """Exact for small jobs, an estimate from a sample for large ones
        (mechanisms.plans.range_count_plan), and says which."""
        method = method_words(plan.details["method"])
        lines = [
            f"{plan.outputs:,} ranges over {_grid_words(plan, columns)}. The method used "
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
                f"{plan.outputs:,} ranges over {_grid_words(plan, columns)}: an estimate, "
                f"from {plan.details['sample']} of the ranges drawn at random, with {method}."
            )
            if plan.details.get("upper_bound"):
                lines[0] += (
                    " The release plans every method exactly and keeps the most accurate, so "
                    "it will be at least this accurate."
                )
        lines.append(
            f"Noise: each answer will be within ±{plan.details['noise_95']:,.0f} rows of the "
            f"count over its grid cells with 95% probability (the noise's standard deviation: "
            f"{plan.expected_error:,.1f} rows, predicted from the method), out of "
            f"{row_count:,} rows in the table."
        )
        lines.append(_rounding_line(plan.details))
        if plan.details["method"] in NO_NEW_RANGES_METHODS:
            lines.append(
                "This method gives one noisy answer per planned range only: the release will "
                "not be able to answer new range questions later."
            )
        return lines

    def preview_table(self, plan, schema, columns, n):
        """The headline's own figures: the 95% half-width of the noise (the plan's), and with
        the rows of the cut cells added for the ranges that cut grid cells."""
        noise = plan.details.get("noise_95")
        if noise is None:
            return [], []
        rows = [
            accuracy_preview.interval_row(
                "Each answer, against the count over its grid cells",
                noise,
                f"{plan.noise} noise of standard deviation {plan.expected_error:,.1f} rows",
            )
        ]
        share, cut = plan.details["rounding_share"], plan.details["rounding_rows"]
        if share > 0:
            rows.append(
                accuracy_preview.interval_row(
                    f"A range that cuts grid cells ({share:.0%} of these), against its true count",
                    noise + cut,
                    "the noise plus the rows of the cut cells, if rows are spread evenly",
                )
            )
        return rows, []

    def public_charts(self, release, schema) -> list[dict]:
        names = packaging.stored_names(release)
        if ANSWERS not in names:
            return []
        answers = packaging.read_csv(packaging.stored_file(release, ANSWERS))
        shown = answers.head(MAX_ANSWERS_SHOWN)
        note = (
            f"Showing the first {len(shown)} of {len(answers)} answers."
            if len(shown) < len(answers)
            else ""
        )
        found = [charts.chart("Range answers", range_charts.answers_figure(shown), note)]
        structure = packaging.stored_file(release, STRUCTURE) if STRUCTURE in names else None
        regions = range_charts.regions_figure(answers, structure) if structure else None
        if regions:
            found.append(
                charts.chart(
                    "Range answers as regions",
                    regions,
                    f"The first {range_charts.MAX_REGIONS} boxes at most; hover a cross for "
                    "its answer and 95% interval.",
                )
            )
        return found

    def results_sections(self, request, release) -> dict:
        if STRUCTURE not in packaging.stored_names(release):
            return {}
        return new_range_answer(request, release, packaging.stored_file(release, STRUCTURE))

    def custodian_report(self, schema, columns, frame, files) -> dict:
        if STRUCTURE not in files or ANSWERS not in files:
            return {}
        return {"answers": _answer_errors(columns, frame, files)}

    def planning_params(self, form, params, cleaned):
        """A grid nobody typed is the one the form suggests at each ε (`_grid`): the planner
        suggests it by the same rule ("suggested"), under the same limit."""
        if cleaned.get("range_grid") or not row_count_is_public(form.dataset):
            return params
        limit = MAX_QUERIES if _workload(cleaned) == "prefixes" else MAX_GRID_POINTS
        return {**params, "grid": "suggested", "max_grid_points": limit}

    def assess(
        self, schema, columns, frame, files, *, epsilon, neighbouring, **judged
    ) -> dict | None:
        promises = judged.get("promises")
        promise = promises[0] if promises else None
        return range_verdict.assess(
            schema, columns, frame, files, epsilon=epsilon, neighbouring=neighbouring,
            promise=promise,
        )  # fmt: skip


def _workload(cleaned) -> str:
    return cleaned.get("range_workload") or "prefixes"


def _grid(form, columns) -> list[int]:
    """The typed size; else, when the row count is public (replace-one without a person
    column: `row_count_is_public`), the size that keeps rounding small against the noise at
    this ε (`grid_choice`); else the schema's bins. The grid is published in the manifest, so
    its default reads public facts only."""
    data, schema = form.cleaned_data, form.schema
    if data.get("range_grid"):
        return [data["range_grid"]] * len(columns)
    if not row_count_is_public(form.dataset) or not data.get("epsilon"):
        return [schema.column(c).n_bins for c in columns]  # no missing cell
    bounds = tuple((schema.column(c).lower, schema.column(c).upper) for c in columns)
    limit = MAX_QUERIES if _workload(data) == "prefixes" else MAX_GRID_POINTS
    size = suggest_grid(
        bounds,
        float(data["epsilon"]),
        float(data.get("delta") or 0),
        "replace-one",
        max(form.dataset.row_count, 1),
        limit,
    )
    return [size] * len(columns)


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


def new_range_answer(request, release, structure_json: bytes) -> dict:
    """Answer a new range from the released structure: post-processing, no budget, no data.

    The range is answered as typed, with its 95% interval (noise, plus the rows of the grid
    cells it cuts). A box that cuts cells gets, beside it, the nearest box on the grid's edges
    (`snap_box`), named and answered exactly.
    """
    from mechanisms.range_count import Support
    from mechanisms.range_count.inputs import snap_box

    structure = json.loads(structure_json)
    if structure.get("mechanism") in NO_NEW_RANGES_METHODS:
        return {"query_form": None, "query_unavailable": True}
    support = Support.from_dict(structure["support"])
    edges = None
    if support.grid_shape is not None:
        edges = list(zip(support.lower, support.upper, support.grid_shape, strict=True))
    asked = "ask" in request.GET
    bounds = list(zip(support.lower, support.upper, strict=True))
    form = RangeQueryForm(
        request.GET if asked else None, columns=release.columns, edges=edges, bounds=bounds
    )
    if not (asked and form.is_valid()):
        return {"query_form": form}
    query = form.query(list(support.lower), list(support.upper))
    try:
        answer = _answer(structure, support, query)
        grid = None
        if query["type"] == "box" and not answer["exact"] and edges is not None:
            grid = _answer(structure, support, snap_box(support, query["lo"], query["hi"]))
    except mechanisms.MechanismError as exc:
        form.add_error(None, str(exc))
        return {"query_form": form}
    return {
        "query_form": form,
        "range_answer": {**answer, "asked": form.words()},
        "grid_answer": grid,
    }


def _answer(structure, support, query) -> dict:
    """One range's answer from the released structure (post-processing), for the page."""
    from mechanisms.range_count import answer_intervals
    from mechanisms.range_count.intervals import describe

    answer = answer_intervals(structure, [query])
    return {
        "answer": float(answer.estimate[0]),
        "std": float(answer.noise_sd[0]),
        "ci_lower": math.floor(answer.ci_lower[0]),
        "ci_upper": math.ceil(answer.ci_upper[0]),
        "region": describe(query, support),
        "exact": bool(answer.exact_region[0]),
    }


def _answer_errors(columns, frame, files) -> dict:
    """CUSTODIAN-ONLY: each released range answer against the true count of raw rows in the
    range as asked (not the grid-rounded count), with the answer's noise variance and whether
    its 95% interval holds the truth."""
    structure = json.loads(files[STRUCTURE])
    support, _plan, _noisy = load_structure(structure)
    true = range_verdict.true_counts(
        support, range_verdict.raw_values(columns, frame), structure["workload"]
    )
    answers = packaging.read_csv(files[ANSWERS])
    released = pd.to_numeric(answers["estimate"]).to_numpy()
    variances = pd.to_numeric(answers["noise_sd"]).to_numpy() ** 2
    low = pd.to_numeric(answers["ci_lower"]).to_numpy()
    high = pd.to_numeric(answers["ci_upper"]).to_numpy()
    squared = (released - true) ** 2
    keep = slice(0, MAX_SCATTER_POINTS)
    return {
        "count": len(true),
        "squared_errors": squared[keep].tolist(),
        "variances": variances[keep].tolist(),
        "mean_abs_error": float(np.mean(np.sqrt(squared))),
        "rmse": float(np.sqrt(np.mean(squared))),
        "predicted_rmse": float(np.sqrt(np.mean(variances))),
        "coverage": float(np.mean((low <= true) & (true <= high))),
    }


KIND = RangeCount("range_count")


def _grid_words(plan, columns) -> str:
    """'an 8 × 8 grid (lat × lon: 64 points)': the grid the ranges are answered on."""
    shape = plan.details.get("grid")
    if not shape or len(shape) != len(columns):
        return f"a grid of {plan.support:,} points"
    sizes = " × ".join(str(k) for k in shape)
    article = "an" if str(shape[0]).startswith(("8", "11", "18")) else "a"
    return f"{article} {sizes} grid ({' × '.join(columns)}: {plan.support:,} points)"
