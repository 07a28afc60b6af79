"""What the kinds that publish synthetic rows share (the two histograms and MWEM).

Their results page previews synthetic.csv first and draws its columns and pairs; the owner's
report compares the synthetic rows with the raw ones (`comparisons.synthetic_comparisons`) and
grades them (`synthetic_verdict`). The words about cells (how many combinations, how large the
noise is against an average cell) are shared by their accuracy previews.
"""

import math
from typing import Any

import numpy as np
from django import forms

import mechanisms
from dpportal.core.form_fields import WHOLE_NUMBER_INPUT
from dpportal.releases import charts, comparisons, packaging, promise_check
from dpportal.releases.kinds import synthetic_verdict
from dpportal.releases.kinds.base import Kind
from mechanisms import planner

SYNTHETIC = "synthetic.csv"


class SyntheticKind(Kind):
    """A kind whose package holds synthetic.csv (made-up rows) beside its noisy counts."""

    def preview_files(self) -> tuple[str, ...]:
        return (SYNTHETIC, *(name for name in super().preview_files() if name != SYNTHETIC))

    def preview_note(self, name: str) -> str:
        if name != SYNTHETIC:
            return ""
        return (
            "Each made-up numeric value is drawn evenly at random within its bin (for example "
            "anywhere from 20 to 30 in the bin 20–30), so the decimals carry no information."
        )

    def public_charts(self, release, schema) -> list[dict]:
        if SYNTHETIC not in packaging.stored_names(release):
            return []
        synthetic = packaging.read_csv(packaging.stored_file(release, SYNTHETIC), schema)
        return charts.synthetic_charts(schema, release.columns, synthetic)

    def custodian_report(self, schema, columns, frame, files) -> dict:
        if SYNTHETIC not in files:
            return {}
        synthetic = packaging.read_csv(files[SYNTHETIC], schema)
        return comparisons.synthetic_comparisons(schema, columns, frame, synthetic)

    def assess(
        self, schema, columns, frame, files, *, epsilon, neighbouring, **judged
    ) -> dict | None:
        """The promise checked on the noisy counts (or MWEM's measured counts) first, then the
        synthetic rows (`synthetic_verdict`)."""
        promise = _counts_check(
            schema, columns, frame, files, judged.get("promises"), judged.get("dropped", 0)
        )
        return synthetic_verdict.assess(
            schema, columns, frame, files, epsilon=epsilon, neighbouring=neighbouring,
            promise=promise,
        )  # fmt: skip


def _counts_check(schema, columns, frame, files, promises, dropped) -> dict | None:
    """The planner's promise checked on noisy_counts.csv's cells, or on each count of
    measurements.json at its own scale (None without a promise or those files)."""
    import json

    if not promises:
        return None
    promise, frame = promises[0], packaging.with_numbers(frame, schema)
    if "measurements.json" in files:
        measurements = json.loads(files["measurements.json"])["measurements"]
        errors, widths = _measured_errors(schema, frame, measurements, promise.confidence)
        return _measured_check(promise, errors, widths, dropped=dropped)
    cells = _cell_errors(schema, columns, frame, files)
    return None if cells is None else promise_check.check(promise, cells, dropped=dropped)


def _cell_errors(schema, columns, frame, files) -> np.ndarray | None:
    """|released - true| of every cell of noisy_counts.csv (a histogram's promised outputs):
    the noisy count (perturbed) or the real-count estimate (smoothed). None without the file."""
    if "noisy_counts.csv" not in files:
        return None
    table = packaging.read_csv(files["noisy_counts.csv"])
    column = "real_count_estimate" if "real_count_estimate" in table else "noisy_count"
    released = table[column].astype(float).to_numpy()
    truth = schema.cell_counts(frame, columns).ravel().astype(float)
    return np.abs(released - truth)


def _measured_errors(schema, frame, measurements, confidence) -> tuple[np.ndarray, np.ndarray]:
    """MWEM: (|noisy - true|, the promised half-width at each count's own noise scale).

    The half-width is the planner's, `accuracy.discrete_laplace_half_width` of the scale the
    measurement records: the rounds' counts at the rounds' scale (what the planner promises),
    the one-way counts measured first at theirs."""
    from mechanisms.accuracy import discrete_laplace_half_width

    errors, widths = [], []
    for measurement in measurements:
        query = measurement["query"]
        counts = schema.cell_counts(frame, query["columns"])
        if query["type"] == "box":
            counts = counts[tuple(slice(lo, hi + 1) for lo, hi in query["bins"])].sum()
        noisy = np.asarray(measurement["noisy_answer"], dtype=float)
        errors.append(np.abs(noisy - np.atleast_1d(counts).ravel()))
        width = discrete_laplace_half_width(measurement["noise_scale"], confidence)
        widths.append(np.full(noisy.size, float(width)))
    if not errors:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(errors), np.concatenate(widths)


def _measured_check(promise: planner.Promise, errors, widths, *, dropped: int = 0) -> dict:
    """`promise_check.check` for MWEM's counts, each against the half-width at its own scale."""
    scaled = np.asarray(errors, dtype=float) - np.asarray(widths, dtype=float)
    result = promise_check.check(promise, scaled + promise.half_width, dropped=dropped)
    return result


def combinations(schema, columns) -> str:
    """'24 combinations (8 age bins × 2 declared sex values + (other))': the cells, in words,
    then what the "(other)" and "(missing)" cells are. They exist whatever the data holds (the
    cells come from the schema alone), but hold rows only if the data has values outside the
    list or empty values, so they are named apart from the declared values and bins."""
    parts: list[str] = []
    extras: set[str] = set()
    for name in columns:
        spec = schema.column(name)
        if isinstance(spec, mechanisms.schema.NumericColumn):
            part = f"{spec.n_bins} {name} bins"
        else:
            part = f"{len(spec.categories)} declared {name} values"
            if spec.unknown == "other":
                part, extras = part + " + (other)", extras | {"other"}
        if spec.missing == "cell":
            part, extras = part + " + (missing)", extras | {"missing"}
        parts.append(part)
    total = math.prod(schema.column(name).n_cells for name in columns)
    text = f"{total:,} combinations ({' × '.join(parts)})"
    other = 'the "(other)" cells hold rows only if the data has values outside the list'
    if extras == {"other", "missing"}:
        text += f'; {other}, the "(missing)" cells only if it has empty values'
    elif extras == {"other"}:
        text += f"; {other}"
    elif extras == {"missing"}:
        text += '; the "(missing)" cells hold rows only if the data has empty values'
    return text


def bins_advice(schema, columns, row_count: int) -> list[str]:
    """Before spending: the rate-optimal bins per numeric column (`recommended_bins`) for this
    many rows, when a chosen numeric column has more (finer bins only add noise there). From
    the schema and the stored row count, as the rest of the preview."""
    numeric = [c for c in columns if isinstance(schema.column(c), mechanisms.schema.NumericColumn)]
    if not numeric or row_count <= 0:
        return []
    best = mechanisms.recommended_bins(row_count, len(numeric))
    bins = {c: schema.column(c).n_bins for c in numeric}
    finer = [f"{c} has {n}" for c, n in bins.items() if n > best]
    if not finer:
        return []
    return [
        f"For {row_count:,} rows, about {best} bins per numeric column balance noise against "
        f"detail; {', '.join(finer)}. Fewer, wider bins (set on the schema page) put more rows in "
        "each combination, so the same noise weighs less."
    ]


def _share_text(share: float) -> str:
    return "under 1%" if share < 0.01 else f"about {share:.0%}"


LARGE_SHARE = 0.5  # a typical error of half an average cell's rows or more: "large"


def relative_error_line(noise: float, rows_per_cell: float) -> str:
    """The noise against an average cell's rows, in words."""
    if rows_per_cell <= 0:
        return "The table is empty, so every count will be pure noise."
    share = noise / rows_per_cell
    size = (
        "small"
        if share < 0.1
        else "noticeable"
        if share < LARGE_SHARE
        else "large: consider fewer columns, fewer bins or a larger ε"
    )
    return (
        f"An average combination holds about {rows_per_cell:,.0f} rows, so the typical "
        f"error is {_share_text(share)} of that ({size}). Rare combinations are "
        "affected more."
    )


def relative_error_warning(noise: float, rows_per_cell: float) -> list[str]:
    """The preview's warning when the typical error is large against an average cell's rows
    (`relative_error_line` says "large"); the form then asks for a confirmation."""
    if rows_per_cell > 0 and noise / rows_per_cell < LARGE_SHARE:
        return []
    return [
        f"The typical error (±{noise:,.1f} rows) is large against an average combination's "
        f"{max(rows_per_cell, 0):,.1f} rows: most counts will be mostly noise. Fewer columns, "
        "fewer bins or a larger ε would help."
    ]


class HistogramKind(SyntheticKind):
    """The two histograms: their one setting is how many synthetic rows to draw."""

    legend = "4. Synthetic table"

    def form_fields(self) -> dict[str, forms.Field]:
        return {
            "rows": forms.IntegerField(
                label="Rows to synthesise",
                required=False,
                min_value=1,
                max_value=mechanisms.DEFAULT_SYNTHETIC_ROWS,
                help_text="How many made-up rows synthetic.csv should have. Leave empty for as "
                "many as the table has (or, if the number of rows is private, its noisy "
                f"estimate), up to {mechanisms.DEFAULT_SYNTHETIC_ROWS:,}.",
                widget=WHOLE_NUMBER_INPUT,
            )
        }

    def params(self, form, cleaned: dict[str, Any]) -> dict[str, Any]:
        return {"rows": cleaned["rows"]} if cleaned.get("rows") else {}
