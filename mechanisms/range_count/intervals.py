"""95% intervals for range answers that cover both the added noise and the grid rounding.

Records are snapped to grid cells, so a range whose edges fall between grid edges cannot be
answered exactly from any grid release. For each query the cells fully inside it (inner set
I) and the cells touching it (outer set O) bound the true count of raw records:
x(I) <= truth <= x(O) (`inputs.rounding_bounds`). Both bounding counts are answered from the
released noisy structure, never from the data, and the interval is

    [ x̂(I) - h_I ,  x̂(O) + h_O ]

with h the one-sided 97.5% quantile of that answer's noise (`core.half_width`). It misses
only if the noise on x̂(I) exceeds +h_I or the noise on x̂(O) falls below -h_O: probability
at most 2.5% + 2.5% = 5%, whatever the records do inside the boundary cells. When the edges
are grid edges, I = O and the interval is the usual estimate ± h. The point estimate is the
answer over the cells whose centres lie in the range (its rounding errors partly cancel);
the interval is widened to contain it if noise puts it outside. See docs/range-count.md §5.

Privacy: post-processing of the released structure and of public inputs only.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mechanisms.arrays import AnyArray
from mechanisms.range_count import inputs
from mechanisms.range_count.core import (
    IdentityPlan,
    PerQueryPlan,
    half_width,
    integer_sum_half_width,
    noise_kurtosis,
    popcount,
    unique_rows,
)
from mechanisms.range_count.inputs import Support, rounding_bounds
from mechanisms.range_count.mn12 import MN12Plan
from mechanisms.range_count.path_tree import PathTreePlan
from mechanisms.range_count.tree import TreePlan

Plan = IdentityPlan | PerQueryPlan | TreePlan | PathTreePlan | MN12Plan


@dataclass
class QueryAnswers:
    """Per query: estimate, its noise sd, the 95% interval, and whether rounding was bounded."""

    estimate: AnyArray
    noise_sd: AnyArray
    ci_lower: AnyArray
    ci_upper: AnyArray
    exact_region: AnyArray  # True where the cells answered are exactly the range (no rounding)

    @property
    def variance(self) -> AnyArray:
        return self.noise_sd**2


def answered_sets(support: Support, queries: list[dict[str, Any]]) -> AnyArray:
    """Every set of support points a release answers: centres, inner and outer cells.

    The distinct rows of these three incidences are the workload a plan is built for, so
    `per_query` (and mn12's anchors) cover the bounding sets the intervals need.
    """
    bits = inputs.incidence(support, queries)
    bounds = rounding_bounds(support, queries)
    if bounds is None:
        return bits
    unique, _, _, _ = unique_rows(np.concatenate([bits, *bounds]))
    return unique[popcount(unique) > 0]  # an empty set needs no noisy answer


def answer_kurtosis(plan: Plan, bits: AnyArray) -> AnyArray:
    """Excess kurtosis of each answer's noise (public).

    Exact for identity, per_query and the tree; for path_tree and mn12 the largest of one
    draw's over the plan's scales, an upper bound (a weighted sum of independent symmetric
    draws has kurtosis at most the largest term's).
    """
    if isinstance(plan, IdentityPlan):
        cells = np.maximum(popcount(bits), 1)
        return noise_kurtosis(plan.noise, plan.scale) / cells
    if isinstance(plan, PerQueryPlan | PathTreePlan):
        return np.full(len(bits), noise_kurtosis(plan.noise, plan.scale))
    if isinstance(plan, TreePlan):
        return plan.weight_ratio(bits) * noise_kurtosis(plan.noise, plan.scale)
    scales = [s for r in plan.rounds for s in r.scales(plan.noise) if s > 0]
    if len(plan.leftover) and plan.leftover_scale > 0:
        scales.append(plan.leftover_scale)
    worst = max((noise_kurtosis(plan.noise, s) for s in scales), default=0.0)
    return np.full(len(bits), worst)


def noise_half_widths(plan: Plan, bits: AnyArray, variance: AnyArray) -> AnyArray:
    """One-sided 97.5% quantile of each answer's noise.

    Exact for the integer sums of identity and per_query; otherwise Cornish-Fisher from the
    exact variance and kurtosis.
    """
    cells = popcount(bits)
    if isinstance(plan, IdentityPlan | PerQueryPlan):
        terms = cells if isinstance(plan, IdentityPlan) else np.minimum(cells, 1)
        return np.array(
            [integer_sum_half_width(plan.noise, plan.scale, int(t)) for t in terms], dtype=float
        )
    return half_width(np.sqrt(variance), answer_kurtosis(plan, bits))


def answer_sets(
    plan: Plan, noisy: Any, bits: AnyArray, estimator: str
) -> tuple[AnyArray, AnyArray]:
    """(answers, variances) of point sets; an empty set is 0 with no noise (nothing to ask)."""
    answers, variance = np.zeros(len(bits)), np.zeros(len(bits))
    full = np.nonzero(popcount(bits) > 0)[0]
    if len(full):
        answers[full], variance[full] = plan.answer(noisy, bits[full], estimator)
    return answers, variance


def answer_with_intervals(
    support: Support, plan: Plan, noisy: Any, queries: list[dict[str, Any]], estimator: str
) -> QueryAnswers:
    """Estimates and 95% intervals covering noise plus grid rounding (module docstring)."""
    bits = inputs.incidence(support, queries)
    estimate, variance = answer_sets(plan, noisy, bits, estimator)
    bounds = rounding_bounds(support, queries)
    inner, outer = bounds if bounds is not None else (bits, bits)
    low, low_var = answer_sets(plan, noisy, inner, estimator)
    high, high_var = answer_sets(plan, noisy, outer, estimator)
    # On a point support nothing bounds the snapping to the nearest point: not exact.
    exact = np.all(inner == outer, axis=1) & (bounds is not None)
    return QueryAnswers(
        estimate=estimate,
        noise_sd=np.sqrt(variance),
        ci_lower=np.minimum(estimate, low - noise_half_widths(plan, inner, low_var)),
        ci_upper=np.maximum(estimate, high + noise_half_widths(plan, outer, high_var)),
        exact_region=exact,
    )


# ---------------------------------------------------------------- answers.csv


def _number(value: float) -> str:
    """Shortest text that reads back as the same float (grid edges stay exact).

    Whole numbers without a point below 10^16, larger ones with an exponent (1e+308, not 309
    digits).
    """
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)


def describe(query: dict[str, Any], support: Support) -> str:
    """The range in words, in the columns' own units."""
    if query["type"] == "halfspace":
        terms = " + ".join(
            f"{_number(a)}·{c}" for a, c in zip(query["a"], support.columns, strict=True)
        )
        return f"{terms} ≤ {_number(query['b'])}"
    parts = []
    for j, column in enumerate(support.columns):
        lo, hi = query["lo"][j], query["hi"][j]
        lo_text = "the lower bound" if lo <= support.lower[j] else _number(lo)
        if hi >= support.upper[j]:
            parts.append(f"{column} from {lo_text} to the upper bound {_number(support.upper[j])}")
        else:
            parts.append(f"{column} from {lo_text} up to (not including) {_number(hi)}")
    return " and ".join(parts)


ANSWER_COLUMNS = {
    "query": "the range's number",
    "description": "the range in words, in the columns' own units",
    "type": "box (lower and upper edges per column) or halfspace (a·x ≤ b)",
    "lo_{column}": "the box's lower edge on {column} (included)",
    "hi_{column}": "the box's upper edge on {column} (not included, unless it is the upper bound)",
    "a_{column}": "the halfspace's weight of {column}",
    "b": "the halfspace's right-hand side",
    "estimate": "the number of rows in the range, from the released noisy structure (rows are "
    "counted by the grid cell they fall in)",
    "ci_lower": "lower end of a 95% interval for the true number of rows in the range as "
    "asked: it covers the noise and, where the range cuts grid cells, their rows",
    "ci_upper": "upper end of that 95% interval for the true number of rows in the range",
    "noise_sd": "the standard deviation of the estimate's noise, in rows",
    "exact_region": "yes where the range follows the grid's edges (the interval covers the "
    "noise alone), no where it cuts cells",
}


def answers_csv(queries: list[dict[str, Any]], answers: QueryAnswers, support: Support) -> str:
    """Tidy CSV: one row per query, with its 95% interval.

    Per row: the description in words and in columns, the estimate, the 95% interval (noise
    plus rounding, whole rows, rounded outwards), the noise sd and whether the region is exact.

    The `type`, `lo_<col>`, `hi_<col>`, `a_<col>` and `b` columns are the workload CSV format
    (`inputs.load_workload`), so the file can be read back as a workload.
    """
    columns = list(support.columns)
    kinds = {q["type"] for q in queries}
    header = ["query", "description", "type"]
    if "box" in kinds:
        header += [f"lo_{c}" for c in columns] + [f"hi_{c}" for c in columns]
    if "halfspace" in kinds:
        header += [f"a_{c}" for c in columns] + ["b"]
    header += ["estimate", "ci_lower", "ci_upper", "noise_sd", "exact_region"]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for k, q in enumerate(queries):
        row: dict[str, str] = {"query": str(k), "description": describe(q, support)}
        row["type"] = q["type"]
        if q["type"] == "box":
            for j, c in enumerate(columns):
                row[f"lo_{c}"], row[f"hi_{c}"] = _number(q["lo"][j]), _number(q["hi"][j])
        else:
            for j, c in enumerate(columns):
                row[f"a_{c}"] = _number(q["a"][j])
            row["b"] = _number(q["b"])
        row["estimate"] = f"{answers.estimate[k]:.1f}"
        row["ci_lower"] = str(math.floor(answers.ci_lower[k]))
        row["ci_upper"] = str(math.ceil(answers.ci_upper[k]))
        row["noise_sd"] = f"{answers.noise_sd[k]:.4g}"
        row["exact_region"] = "yes" if answers.exact_region[k] else "no"
        writer.writerow([row.get(h, "") for h in header])
    return out.getvalue()
