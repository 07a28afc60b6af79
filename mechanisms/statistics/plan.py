"""The public plan of a summary-statistics release, before anything is spent.

Each statistic's epsilon, noise scale and expected 95% half-width.
"""

from __future__ import annotations

import math
from typing import Any

from mechanisms.accounting import noise_scale
from mechanisms.plans import NoisePlan
from mechanisms.release_request import PlanInputs
from mechanisms.schema import NumericColumn, Schema
from mechanisms.statistics.compute import epsilon_part, missing_columns, selected_request
from mechanisms.statistics.measures import (
    centre,
    count_scale,
    discrete_laplace_halfwidth,
    laplace_halfwidth,
    linear_halfwidth,
    sum_transformation,
)
from mechanisms.statistics.quantiles import (
    END_CANDIDATES,
    candidates,
    quantile_rank_margin,
    quantile_shares,
    rank_scale,
)
from mechanisms.statistics.request import Statistic


def statistics_plan(inputs: PlanInputs) -> NoisePlan:
    """Each statistic's epsilon, noise scale and expected 95% half-width, before spending.

    Public inputs only: the schema, the request, epsilon and `n` (public under replace-one; the
    custodian's own preview under add-remove). Groups are assumed to hold n / groups rows each;
    means and variances are previewed for values centred in their bounds.
    details["statistics"]: one dict per statistic (statistic, column, epsilon, noise_scale,
    halfwidth, unit); details["missing_left_out"]: `missing_columns`.
    """
    schema, neighbouring, n = inputs.schema, inputs.neighbouring, inputs.n
    request = selected_request(
        schema, inputs.params, inputs.columns, epsilon=inputs.epsilon, neighbouring=neighbouring
    )
    groups = len(request.groups)
    size = max((n or 0) / groups, 1.0)
    public_n = n if neighbouring == "replace-one" and not request.by else None
    previews = [
        _preview(stat, share, schema, neighbouring, public_n, size)
        for stat, share in zip(request.statistics, request.shares, strict=True)
    ]
    details = {
        "statistics": previews,
        "groups": groups,
        "group_rows": size,
        "missing_left_out": missing_columns(schema, request),
    }
    return NoisePlan(
        "Laplace, discrete Laplace and permute-and-flip selection",
        None,
        None,
        groups * len(request.statistics),
        groups,
        details,
    )


def _preview(
    stat: Statistic,
    epsilon: float,
    schema: Schema,
    neighbouring: str,
    public_n: int | None,
    size: float,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "statistic": stat.label,
        "column": stat.column or "",
        "epsilon": epsilon,
    }
    if stat.kind == "count":
        scale = 0.0 if public_n is not None else count_scale(epsilon, neighbouring)
        return {
            **record,
            "noise_scale": scale,
            "halfwidth": discrete_laplace_halfwidth(scale),
            "unit": "rows",
        }
    assert stat.column is not None
    spec = schema.column(stat.column)
    assert isinstance(spec, NumericColumn)
    c, r = centre(spec)
    missing = spec.missing == "cell"
    if stat.kind == "sum":
        _, sensitivity = sum_transformation(spec.lower, spec.upper, neighbouring, public_n, missing)
        scale = noise_scale(sensitivity, epsilon)
        return {
            **record,
            "noise_scale": scale,
            "halfwidth": laplace_halfwidth(scale),
            "unit": stat.column,
        }
    if stat.kind == "mean":
        if public_n is not None and not missing:
            scale = noise_scale(sum_transformation(-r, r, neighbouring, public_n)[1], epsilon)
            half = laplace_halfwidth(scale) / max(public_n, 1)
        else:
            part = epsilon_part(epsilon, 2)
            scale = noise_scale(sum_transformation(-r, r, neighbouring, public_n)[1], part)
            half = laplace_halfwidth(scale) / size
        return {**record, "noise_scale": scale, "halfwidth": half, "unit": stat.column}
    if stat.kind in ("variance", "std"):
        part = epsilon_part(epsilon, 3)
        scale = noise_scale(sum_transformation(0.0, r * r, neighbouring, public_n)[1], part)
        cs = count_scale(part, neighbouring, public_n)
        half = linear_halfwidth(
            [(1 / size, "laplace", scale), (r * r / 3 / size, "discrete_laplace", cs)]
        )
        if stat.kind == "std":  # the square root near a spread of r / sqrt(3)
            half = half / (2 * r / math.sqrt(3))
        return {**record, "noise_scale": scale, "halfwidth": half, "unit": stat.column}
    assert stat.alpha is not None
    point, part = quantile_shares(epsilon)
    return {
        **record,
        "noise_scale": rank_scale(stat.alpha, point, neighbouring),
        "halfwidth": quantile_rank_margin(
            stat.alpha, part, neighbouring, len(candidates(spec, END_CANDIDATES))
        ),
        "unit": "rows of rank",
    }
