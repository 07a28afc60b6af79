"""The public plan of a summary-statistics release, before anything is spent.

Each statistic's epsilon, noise scale and expected 95% half-width, for the average group and
for groups of other sizes, and how likely a group of each size is to be published
(`support`).
"""

from __future__ import annotations

import math
from typing import Any

from mechanisms.plans import NoisePlan
from mechanisms.release_request import PlanInputs
from mechanisms.schema import NumericColumn, Schema
from mechanisms.statistics import support
from mechanisms.statistics.compute import missing_columns, selected_request
from mechanisms.statistics.measures import (
    centre,
    count_scale,
    discrete_laplace_halfwidth,
    linear_halfwidth,
    sum_grid,
)
from mechanisms.statistics.quantiles import (
    END_CANDIDATES,
    candidates,
    margin_reaches,
    quantile_rank_margin,
    quantile_shares,
    rank_scale,
)
from mechanisms.statistics.request import Request, Statistic
from mechanisms.statistics.support import split


def statistics_plan(inputs: PlanInputs) -> NoisePlan:
    """Each statistic's epsilon, noise scale and expected 95% half-width, before spending.

    Public inputs only: the schema, the request, epsilon and `n` (public under replace-one; the
    custodian's own preview under add-remove). The headline half-width is for a group of n /
    groups values; `by_size` gives it for groups of other sizes (`group_sizes`), with the share
    of releases in which a group of that size is published at all (`support`: a group whose
    noisy count is at most the `threshold` is withheld). Means and variances are previewed for
    values centred in their bounds.
    details["statistics"]: one dict per statistic (statistic, column, epsilon, noise_scale,
    halfwidth and unit at `size`, the average; threshold, source, by_size: per size, the same
    and `published`; a quantile's noise scale is its estimate's, at the whole epsilon where
    a group of that size skips the interval's pick: `quantiles.margin_reaches`, the size
    standing for the released bound on its rows); details["missing_left_out"]:
    `missing_columns`; details["sizes"]: the group sizes of `by_size`.
    """
    schema, neighbouring, n = inputs.schema, inputs.neighbouring, inputs.n
    request = selected_request(
        schema, inputs.params, inputs.columns, epsilon=inputs.epsilon, neighbouring=neighbouring
    )
    groups = len(request.groups)
    size = max((n or 0) / groups, 1.0)
    public_n = n if neighbouring == "replace-one" and not request.by else None
    sizes = group_sizes(size, n)
    previews = [
        _statistic_preview(schema, request, neighbouring, public_n, i, (size, sizes))
        for i in range(len(request.statistics))
    ]
    details = {
        "statistics": previews,
        "groups": groups,
        "group_rows": size,
        "sizes": sizes,
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


def _statistic_preview(
    schema: Schema,
    request: Request,
    neighbouring: str,
    public_n: int | None,
    index: int,
    sizes: tuple[float, list[int]],
) -> dict[str, Any]:
    """Statistic `index`'s preview: at the average group size, and `by_size` at the others."""
    stat, share = request.statistics[index], request.shares[index]
    source = support.sources(schema, request, neighbouring)[index]
    piece = support.own_shares(share)[1] if source.kind == "own" else share
    scale = support.source_scale(schema, request, neighbouring, index, public_n)
    average, others = sizes
    return {
        **_preview(stat, piece, schema, neighbouring, public_n, average),
        "size": average,
        "span": _span(stat, schema),
        "epsilon": share,
        "source": source.words(request),
        "threshold": support.threshold(scale),
        "by_size": [
            {
                **_preview(stat, piece, schema, neighbouring, public_n, size),
                "size": size,
                "published": published_share(size, scale),
            }
            for size in others
        ],
    }


def _span(stat: Statistic, schema: Schema) -> float | None:
    """How far the statistic can range (its interval is clipped to it).

    The declared range for a mean or quantile, r^2 for a variance, r for a standard deviation;
    None for counts and sums (unbounded by the schema).
    """
    if stat.column is None or stat.kind == "sum":
        return None
    spec = schema.column(stat.column)
    assert isinstance(spec, NumericColumn)
    r = centre(spec)[1]
    return {"variance": r * r, "std": r}.get(stat.kind, spec.upper - spec.lower)


SIZE_LADDER = tuple(k * 10**p for p in range(1, 10) for k in (1, 3))
MAX_SIZES = 6


def group_sizes(average: float, n: int) -> list[int]:
    """The group sizes the preview is given for: the average and round sizes around it.

    At most MAX_SIZES: the average group (n / groups, rounded) and the round sizes of
    SIZE_LADDER (10, 30, 100, ...) up to n closest to it on a log scale. Public: from n and the
    request.
    """
    average_rows = max(round(average), 1)
    ladder = [s for s in SIZE_LADDER if s <= max(n, 10) and s != average_rows]
    ladder.sort(key=lambda s: abs(math.log(s / average_rows)))
    return sorted([average_rows, *ladder[: MAX_SIZES - 1]])


def published_share(size: float, scale: float) -> float:
    """The chance that a group of `size` values is published (its noisy count clears the rule).

    P(size + Z > threshold) for Z discrete Laplace of `scale`, P(Z = k) ∝ a^|k|, a = exp(-1 /
    scale): P(Z >= j) = a^j / (1 + a) for j >= 1, and 1 - a^(1 - j) / (1 + a) for j <= 0.
    Public: a function of the size and the noise scale.
    """
    if scale <= 0:
        return 1.0 if size > 0 else 0.0
    a = math.exp(-1 / scale)
    j = math.floor(support.threshold(scale) - size) + 1  # the smallest Z that clears it
    return a**j / (1 + a) if j >= 1 else 1 - a ** (1 - j) / (1 + a)


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
        grid = sum_grid(spec.lower, spec.upper, neighbouring, public_n, missing)
        return {
            **record,
            "noise_scale": grid.scale(epsilon),
            "halfwidth": grid.halfwidth(epsilon),
            "unit": stat.column,
        }
    if stat.kind == "mean":
        if public_n is not None and not missing:
            grid, part = sum_grid(-r, r, neighbouring, public_n), epsilon
            half = grid.halfwidth(part) / max(public_n, 1)
        else:
            part = split(epsilon, 2)
            grid = sum_grid(-r, r, neighbouring, public_n, missing)
            half = grid.halfwidth(part) / size
        return {**record, "noise_scale": grid.scale(part), "halfwidth": half, "unit": stat.column}
    if stat.kind in ("variance", "std"):
        part = split(epsilon, 3)
        grid = sum_grid(0.0, r * r, neighbouring, public_n, missing)
        cs = count_scale(part, neighbouring, public_n)
        half = linear_halfwidth([grid.term(1 / size, part), (r * r / 3 / size, cs)])
        scale = grid.scale(part)
        if stat.kind == "std":  # the square root near a spread of r / sqrt(3)
            half = half / (2 * r / math.sqrt(3))
        return {**record, "noise_scale": scale, "halfwidth": half, "unit": stat.column}
    assert stat.alpha is not None
    point, part = quantile_shares(epsilon)
    ends = len(candidates(spec, END_CANDIDATES))
    margin = quantile_rank_margin(stat.alpha, part, neighbouring, ends)
    skipped = margin_reaches(stat.alpha, margin, size)  # as `quantiles.ends_skipped`, at `size`
    return {
        **record,
        "noise_scale": rank_scale(stat.alpha, epsilon if skipped else point, neighbouring),
        "halfwidth": margin,
        "unit": "rows of rank",
    }
