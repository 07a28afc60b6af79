"""Public noise plans: what each mechanism will add, predicted from public quantities only.

A plan reads one PlanInputs (mechanisms.release_request): the schema, the chosen columns, the
parameters, epsilon, delta, the neighbouring relation and `n`, the row count (public under replace-
one; under add-remove only the custodian's own preview may pass it). It never reads the data, so it
can size a job or preview accuracy before any budget is spent. It raises MechanismError for settings
the mechanism would refuse (such as an epsilon whose noise 64-bit counts cannot carry).

Every plan uses the mechanism's own functions (MWEM's budget split, the range-count planner),
so the preview is the split the release will use, not a copy of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mechanisms.accounting import noise_scale
from mechanisms.accuracy import discrete_laplace_std
from mechanisms.histogram import count_sensitivity, min_admissible_mix
from mechanisms.mwem import (
    QUICK_CELLS,
    SELECT_FRACTION,
    parse_quick_cells,
    plan_budget,
    selection_candidates,
    workload_spec,
)
from mechanisms.noise import RandomSource, check_count_noise, secure_source
from mechanisms.release_request import PlanInputs
from mechanisms.schema import NumericColumn, Schema
from mechanisms.workload import expand_workload

if TYPE_CHECKING:
    from mechanisms.range_count.core import PrivacyTarget
    from mechanisms.range_count.inputs import Support


@dataclass(frozen=True)
class NoisePlan:
    """What a release will add, from public quantities only.

    `noise`: the distribution on each output; `scale`: its scale (0 when no noise is added);
    `expected_error`: the typical error (standard deviation) of one output, in rows;
    `outputs`: how many noisy outputs; `support`: cells or points the mechanism works over.
    """

    noise: str
    scale: float | None
    expected_error: float | None
    outputs: int
    support: int
    details: dict[str, Any] = field(default_factory=dict)


def _cells(schema: Schema, columns: Sequence[str] | None) -> int:
    return math.prod(schema.domain_shape(columns))


def perturbed_plan(inputs: PlanInputs) -> NoisePlan:
    """Discrete Laplace of scale sensitivity/epsilon on every cell count."""
    sensitivity, epsilon = count_sensitivity(inputs.neighbouring), inputs.epsilon
    scale = check_count_noise(noise_scale(sensitivity, epsilon), epsilon)
    cells = _cells(inputs.schema, inputs.columns)
    return NoisePlan("discrete Laplace", scale, discrete_laplace_std(scale), cells, cells)


def smoothed_default_rows(n: int, cells: int, epsilon: float) -> int:
    """Rows for the smoothed histogram that balance its two errors (public inputs only).

    More rows need more uniform mixing (bias about mix/2 in total variation); fewer rows
    mean more sampling error (about 0.4·sqrt(cells/rows)). Pick the best on a grid of sizes.
    """
    sizes = sorted({max(1, round(n * 10 ** (-k / 8))) for k in range(33)})
    return min(
        sizes,
        key=lambda rows: (
            0.5 * min_admissible_mix(epsilon, n, cells, rows) + 0.4 * math.sqrt(cells / rows)
        ),
    )


def smoothed_plan(inputs: PlanInputs) -> NoisePlan:
    """No added noise: `rows` draws from (1 - mix)·histogram + mix·uniform (Thm 4.1)."""
    n, cells = max(inputs.n or 0, 1), _cells(inputs.schema, inputs.columns)
    rows = inputs.params.get("rows") or smoothed_default_rows(n, cells, inputs.epsilon)
    mix = inputs.params.get("mix")
    if mix is None:
        mix = min_admissible_mix(inputs.epsilon, n, cells, rows)
    per_cell = rows / cells
    return NoisePlan(
        "sampling", 0.0, math.sqrt(per_cell), rows, cells, {"rows": rows, "mix": float(mix)}
    )


def mwem_plan(inputs: PlanInputs) -> NoisePlan:
    """MWEM's own budget split (`mechanisms.mwem.plan_budget`, what `mwem` itself spends).

    init_fraction·ε measures the 1-way marginals, then T rounds select and measure.
    """
    schema, columns, params = inputs.schema, list(inputs.columns), inputs.params
    epsilon = inputs.epsilon
    shape = schema.domain_shape(columns)
    ordered = {c for c in columns if isinstance(schema.column(c), NumericColumn)}
    workload = expand_workload(workload_spec(params, len(columns)), columns, shape, ordered)
    plan = plan_budget(
        max(inputs.n or 0, 1),
        epsilon,
        shape,
        workload,
        inputs.neighbouring,
        rounds=params.get("rounds"),
        init_fraction=params.get("init_fraction"),
        select_fraction=params.get("select_fraction", SELECT_FRACTION),
    )
    scale = check_count_noise(plan.marginal_scale, epsilon)
    cells = sorted(q.cells(shape) for q in workload)[len(workload) // 2]
    details = {
        "workload": len(workload),
        # pairs inside its larger marginals that rounds may also measure (public)
        "pairs_inside": len(selection_candidates(workload)) - len(workload),
        **plan.budget,
        # the default plan anneals: at most plan.rounds rounds (mwem.plan.RoundSchedule)
        "anneals": plan.rounds > 1
        and not plan.joint
        and not math.isinf(epsilon)
        and params.get("rounds") is None
        and params.get("init_fraction") is None,
        "median_cells": cells,
        "init_scale": plan.init_scale,
        "columns": len(columns),
        # refused before any budget is spent when it is not a number of cells or "none"
        "quick_cells": parse_quick_cells(params.get("quick_cells", QUICK_CELLS)),
    }
    return NoisePlan(
        "discrete Laplace",
        scale,
        discrete_laplace_std(scale),
        plan.rounds,
        math.prod(shape),
        details,
    )


PREVIEW_WORK = 2**21  # point x range pairs a range-count preview may evaluate (~0.3 s)
PREVIEW_SAMPLE = 64  # beyond: at most this many ranges, drawn at random, are averaged


def range_count_plan(inputs: PlanInputs) -> NoisePlan:
    """The range-count planner on public inputs: bounds, grid, a workload drawn like the real one.

    The expected error is the chosen plan's predicted standard deviation per answer. While the
    support times the workload is at most PREVIEW_WORK, that is the planner's exact
    figure; beyond, it is an estimate with bounded work (`_range_estimate`), and
    details["estimate"] says so (None as the error: too large to preview).
    """
    from mechanisms.range_count import api
    from mechanisms.range_count.core import half_width, privacy_target
    from mechanisms.range_count.intervals import answer_kurtosis, answered_sets

    support = api.support_from_schema(inputs.schema, inputs.columns, inputs.params)
    rng = secure_source()
    queries = api.workload_from_params(support, inputs.params, rng)
    target = privacy_target(
        epsilon=inputs.epsilon, delta=inputs.delta, neighbouring=inputs.neighbouring
    )
    method = inputs.params.get("mechanism", "auto")
    variance: float | None
    kurtosis = 0.0 if target.kind == "zcdp" else 3.0  # a bound: one continuous Laplace draw
    if support.n * len(queries) <= PREVIEW_WORK:
        bits = answered_sets(support, queries)
        plan, predicted = api.choose_plan(method, support, queries, bits, target)
        name, variance, estimate = plan.name, predicted[plan.name], False
        kurtosis = float(np.mean(answer_kurtosis(plan, bits)))
    else:
        name, variance = _range_estimate(method, support, queries, target, rng)
        estimate = True
    noise = "discrete Gaussian" if target.kind == "zcdp" else "discrete Laplace"
    if name == "mn12_laplace":
        noise = "discrete Laplace"
    std = None if variance is None else math.sqrt(variance)
    details = {
        "method": name,
        "grid": list(support.grid_shape) if support.grid_shape else None,
        "estimate": estimate,
        "upper_bound": estimate and method == "auto",
        "sample": _sample_size(support),
        "noise_95": None if std is None else float(half_width(np.array(std), np.array(kurtosis))),
        **range_rounding(support, queries, inputs.n),
    }
    return NoisePlan(noise, std, std, len(queries), support.n, details)


def range_rounding(support: Support, queries: list[dict[str, Any]], n: int) -> dict[str, float]:
    """The rounding part of range answers, from public inputs and the row count n.

    `rounding_share`: share of the ranges (at most PREVIEW_SAMPLE × 4 looked at) that cut
    grid cells; `rounding_rows`: over those, half the mean number of rows in the cut cells if
    the n rows were spread evenly over the grid (the interval's extra half-width).
    """
    from mechanisms.range_count.core import popcount
    from mechanisms.range_count.inputs import rounding_bounds

    sample = queries[: PREVIEW_SAMPLE * 4]
    bounds = rounding_bounds(support, sample)
    if bounds is None or not sample:
        return {"rounding_share": 0.0, "rounding_rows": 0.0}
    cut = (popcount(bounds[1]) - popcount(bounds[0])).astype(float)
    share = float(np.mean(cut > 0))
    rows = float(np.mean(cut[cut > 0])) * n / support.n / 2 if share else 0.0
    return {"rounding_share": share, "rounding_rows": rows}


def _sample_size(support: Support) -> int:
    """Ranges the estimate averages: PREVIEW_SAMPLE, fewer if the support is huge."""
    return max(1, min(PREVIEW_SAMPLE, PREVIEW_WORK // support.n))


def _range_estimate(
    method: str,
    support: Support,
    queries: list[dict[str, Any]],
    target: PrivacyTarget,
    rng: RandomSource,
) -> tuple[str, float | None]:
    """(method, mean variance) of a large range-count release, from bounded work.

    Averaged over `_sample_size` random ranges of the plan `promise.estimated_plan` builds from
    them (an upper bound for `auto`; see there). A method that cannot be estimated this way
    gets None.
    """
    from mechanisms.range_count.inputs import incidence
    from mechanisms.range_count.promise import estimated_plan

    sample = [queries[i] for i in rng.integers(len(queries), _sample_size(support))]
    bits = incidence(support, sample)
    plan = estimated_plan(method, support, queries, bits, target)
    if plan is None:
        return method, None
    return plan.name, float(np.mean(plan.predicted_variance(bits)))
