"""What a range-count release promises: the share of answers within ±T, noise plus rounding.

An answer (answers.csv `estimate`) is the noisy count over the grid cells whose centres lie in
the range. Against the true number of rows in the range as asked, it errs by its noise N and
by the grid rounding r: the rows of the cells the range cuts that the centre rule counts
wrongly. The planner's promise (`mechanisms.planner`) is that at least C of the answers lie
within ±T of the truth, the share taken over the ranges and the release's noise:

    mean over ranges k of P(|N_k + r_k| <= T) >= C.

- N_k: the plan's noise on answer k, of its exact (public) variance and excess kurtosis
  (`intervals.answer_kurtosis`), modelled as a normal plus a Laplace draw sharing that
  variance, the Laplace part w = sqrt(kurtosis / 3) of it (the sum's excess kurtosis is
  3 w^2, so the model matches both moments). One discrete Laplace draw (identity on one cell)
  is then a Laplace; a sum of many draws tends to the normal, as the noise itself does.
- r_k: not public (it depends on where the rows lie inside the cut cells). Planned with the
  bound crowding * B_k (`rounding_bound`): each cell the range cuts holding at most
  `crowding` times the rows of an even spread (n / cells), evenly within the cell, and the
  cells' errors adding up rather than cancelling. For symmetric noise P(|N + r| <= T) falls as
  |r| grows, so the bound is the worst r allowed. Point supports (nearest-point snapping) have
  no cells to bound with: r_k = 0 there, and the assumption says so.

Public inputs only (the support, the ranges, the plan, n and the stated crowding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import special

from mechanisms.arrays import AnyArray, FloatArray
from mechanisms.errors import MechanismError

# inputs.incidence is read at call time, so a work cap that counts it counts the promise too
from mechanisms.range_count import inputs
from mechanisms.range_count.core import PerQueryPlan, PrivacyTarget, popcount, scale_for
from mechanisms.range_count.inputs import Support, grid_edges, rounding_bounds, spread_points

if TYPE_CHECKING:
    from mechanisms.range_count.intervals import Plan

HALFSPACE_POINTS = 256  # fixed points per cut cell to measure a halfspace's volume in it
SEARCH_STEPS = 60  # bisection steps on T (to a relative 1e-6 of the search range)
PREVIEW_TREE_AXIS = 1024  # `estimated_plan`: the tree only on axes this short (matrices: cells^2)


def rounding_bound(support: Support, queries: list[dict[str, Any]], n: int) -> FloatArray:
    """B_k: the most grid rounding can move answer k if each cell it cuts holds n / cells rows.

    The answer counts the cells whose centres lie in the range; a cell the range cuts holds
    a share f of the range inside it, so counting it whole (or not at all) is off by
    |1[centre in] - f| of its rows, if they are spread evenly within it. Summed over the cut
    cells without letting errors cancel (real rows are not even across cells: a line through a
    gradient of rows does not cancel, `docs/accuracy.md`). f: exact for boxes (each axis's
    overlap); halfspaces: HALFSPACE_POINTS fixed points per cut cell. Zero on a point support.
    """
    bounds = rounding_bounds(support, queries)
    if bounds is None or support.grid_shape is None:
        return np.zeros(len(queries))
    centres = inputs.incidence(support, queries)
    per_cell = n / support.n
    out = np.zeros(len(queries))
    for k, query in enumerate(queries):
        inner, outer, centre = (
            np.unpackbits(b[k], count=support.n).astype(bool) for b in (*bounds, centres)
        )
        cut = np.nonzero(outer & ~inner)[0]
        if len(cut):
            inside = _inside_shares(support, query, cut)
            out[k] = per_cell * float(np.abs(centre[cut] - inside).sum())
    return out


def _inside_shares(support: Support, query: dict[str, Any], cut: AnyArray) -> FloatArray:
    """The share of each cell in `cut` (flat indices) that lies inside the range."""
    assert support.grid_shape is not None
    cells = np.array(np.unravel_index(cut, support.grid_shape)).T
    edges = [grid_edges(support, j) for j in range(support.dim)]
    low = np.column_stack([edges[j][cells[:, j]] for j in range(support.dim)])
    high = np.column_stack([edges[j][cells[:, j] + 1] for j in range(support.dim)])
    if query["type"] != "halfspace":
        lo = np.maximum(np.asarray(query["lo"], dtype=float), support.lower)
        hi = np.minimum(np.asarray(query["hi"], dtype=float), support.upper)
        overlap = np.clip(np.minimum(high, hi) - np.maximum(low, lo), 0.0, None)
        shares: FloatArray = np.prod(overlap / (high - low), axis=1)
        return shares
    points = low[:, None, :] + spread_points(HALFSPACE_POINTS, support.dim) * (high - low)[:, None]
    a, b = np.asarray(query["a"], dtype=float), float(query["b"])
    inside: FloatArray = np.mean(points @ a <= b, axis=1)
    return inside


def _upper_tail(x: FloatArray, s: FloatArray, b: FloatArray) -> FloatArray:
    """P(G + L > x) for G ~ Normal(0, s^2) and L ~ Laplace(b), elementwise (x any sign).

    Normal-Laplace tail (Reed and Jorgensen): Phi_c(x/s) + e^(s^2/2b^2) (e^(-x/b) Phi(x/s -
    s/b) - e^(x/b) Phi_c(x/s + s/b)) / 2, in log space; the pure cases s = 0 or b = 0 apart.
    """
    x, s, b = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (x, s, b)))
    out = np.where(x < 0, 1.0, 0.0)
    laplace = (s == 0) & (b > 0)
    out = np.where(laplace, _laplace_tail(x, np.where(laplace, b, 1.0)), out)
    normal = (s > 0) & (b == 0)
    out = np.where(normal, special.ndtr(-x / np.where(normal, s, 1.0)), out)
    both = (s > 0) & (b > 0)
    if both.any():
        xs, ss, bs = x[both], s[both], b[both]
        shift = ss * ss / (2 * bs * bs)
        low = np.exp(shift - xs / bs + special.log_ndtr(xs / ss - ss / bs))
        high = np.exp(shift + xs / bs + special.log_ndtr(-xs / ss - ss / bs))
        out[both] = special.ndtr(-xs / ss) + 0.5 * (low - high)
    tail: FloatArray = np.clip(out, 0.0, 1.0)
    return tail


def _laplace_tail(x: FloatArray, b: FloatArray) -> FloatArray:
    half = 0.5 * np.exp(-np.abs(x) / b)
    tail: FloatArray = np.where(x >= 0, half, 1.0 - half)
    return tail


def within_probability(
    sd: AnyArray, kurtosis: AnyArray, offset: AnyArray, target: float
) -> FloatArray:
    """P(|N + offset| <= target) per answer, N the normal-plus-Laplace noise model (module doc)."""
    sd, kurtosis, offset = (np.asarray(v, dtype=float) for v in (sd, kurtosis, offset))
    share = np.clip(np.sqrt(np.maximum(np.nan_to_num(kurtosis, posinf=3.0), 0.0) / 3.0), 0, 1)
    s = np.sqrt(1.0 - share) * sd
    b = np.sqrt(share / 2.0) * sd
    inside = 1.0 - _upper_tail(target - offset, s, b) - _upper_tail(target + offset, s, b)
    exact = np.abs(offset) <= target
    probability: FloatArray = np.where(sd > 0, np.clip(inside, 0.0, 1.0), exact.astype(float))
    return probability


def within_share(sd: AnyArray, kurtosis: AnyArray, offset: AnyArray, target: float) -> float:
    """The expected share of the answers within ±target (the mean of `within_probability`)."""
    if not np.size(offset):
        return 1.0
    return float(np.mean(within_probability(sd, kurtosis, offset, target)))


def share_half_width(
    sd: AnyArray, kurtosis: AnyArray, offset: AnyArray, confidence: float
) -> float:
    """The smallest T whose expected share of answers within ±T is at least `confidence`.

    Bisection on T (the share grows with T) over [0, max |offset| + 40 max sd].
    """
    sd, offset = np.asarray(sd, dtype=float), np.asarray(offset, dtype=float)
    if not offset.size:
        return 0.0
    low, high = 0.0, float(np.max(np.abs(offset)) + 40 * np.max(sd, initial=0.0)) + 1e-9
    if within_share(sd, kurtosis, offset, low) >= confidence:
        return 0.0
    for _ in range(SEARCH_STEPS):
        middle = (low + high) / 2
        if within_share(sd, kurtosis, offset, middle) >= confidence:
            high = middle
        else:
            low = middle
        if high - low <= 1e-6 * max(high, 1.0):
            break
    return high


def spread_sample(count: int, limit: int) -> list[int]:
    """Up to `limit` indices spread evenly over range(count) (first and last included)."""
    if count <= limit:
        return list(range(count))
    return sorted({int(round(i)) for i in np.linspace(0, count - 1, limit)})


def even_count(support: Support, queries: list[dict[str, Any]], n: int) -> float:
    """The average answer if the n rows were spread evenly: n * mean share of cells counted."""
    if not queries:
        return 0.0
    return float(n * np.mean(popcount(inputs.incidence(support, queries))) / max(support.n, 1))


def answer_noise(
    method: str,
    support: Support,
    queries: list[dict[str, Any]],
    sample_bits: AnyArray,
    target: PrivacyTarget,
    work_limit: int,
) -> tuple[FloatArray, FloatArray]:
    """(sd, excess kurtosis) of the noise on the answers `sample_bits` (public).

    The plan `method` (`auto`: the one the release would choose) is built as the release
    builds it while the support times the ranges is at most `work_limit`; beyond, from the
    sample alone (`estimated_plan`), an upper bound for `auto` (see there).
    """
    from mechanisms.range_count import api
    from mechanisms.range_count.intervals import answer_kurtosis, answered_sets

    if support.n * len(queries) <= work_limit:
        bits = answered_sets(support, queries)
        plan: Plan | None = api.choose_plan(method, support, queries, bits, target)[0]
    else:
        plan = estimated_plan(method, support, queries, sample_bits, target)
    if plan is None:
        raise MechanismError(
            f"the range-count method {method!r} cannot be planned for {len(queries):,} ranges "
            f"on {support.n:,} points before it runs; choose auto, identity, tree or path_tree"
        )
    variance = np.asarray(plan.predicted_variance(sample_bits), dtype=float)
    kurtosis = np.asarray(answer_kurtosis(plan, sample_bits), dtype=float)
    return np.sqrt(variance), kurtosis


def estimated_plan(
    method: str,
    support: Support,
    queries: list[dict[str, Any]],
    sample_bits: AnyArray,
    target: PrivacyTarget,
) -> Plan | None:
    """The plan of a large release, built on a sample of its answers: bounded work.

    The workload-free plans (identity, path_tree, the tree on axes up to PREVIEW_TREE_AXIS
    cells) are built as the release builds them; per_query's sensitivity is bounded by the
    number of ranges (an upper bound). The halfspace decomposition (mn12) is planned only when
    the release runs: `auto` picks it only if it beats these, so for `auto` the result is an
    upper bound. The one with the smallest mean variance on the sample; None when `method`
    cannot be planned this way.
    """
    from mechanisms.range_count import api

    names = api.candidate_mechanisms(support, queries, target) if method == "auto" else [method]
    workload_free = {"identity", "path_tree"}
    if support.grid_shape is not None and max(support.grid_shape) <= PREVIEW_TREE_AXIS:
        workload_free.add("tree")
    plans: list[Plan] = []
    if "per_query" in names:
        scale = scale_for(target.noise, float(len(queries)), target.loss_budget)
        plans.append(PerQueryPlan(sample_bits, support.n, target.noise, scale))
    plans += [
        api.build_plan(name, support, [], sample_bits, target)
        for name in names
        if name in workload_free
    ]
    if not plans:
        return None
    return min(plans, key=lambda plan: float(np.mean(plan.predicted_variance(sample_bits))))


def typical_ranges(support: Support, boxes: int, halfspaces: int) -> list[dict[str, Any]]:
    """Ranges spread like `random_boxes` and `random_halfspaces` draws, with no random source.

    The same low-discrepancy points every time (`inputs.spread_points`) stand in for the
    uniform draws: box corners uniform in the bounds (snapped to the grid, as the release
    snaps them); halfspaces with a normal direction (inverse normal CDF of uniforms) through a
    support point. So the planner and the verdict compute a promise about random ranges on
    the same ranges (a random draw of a few hundred moves the half-width by a few percent).
    """
    from mechanisms.range_count.inputs import snap_box

    d, span = support.dim, support.upper - support.lower
    out = []
    if boxes:
        corners = support.lower + spread_points(boxes, 2 * d).reshape(boxes, 2, d) * span
        out += [snap_box(support, c.min(axis=0), c.max(axis=0)) for c in corners]
    if halfspaces:
        uniform = spread_points(halfspaces, d + 1)
        normals = special.ndtri(np.clip(uniform[:, :d], 1e-12, 1 - 1e-12)) / span
        anchors = support.points[np.minimum((uniform[:, d] * support.n).astype(int), support.n - 1)]
        offsets = (normals * anchors).sum(axis=1)
        out += [
            {"type": "halfspace", "a": a.tolist(), "b": float(b)}
            for a, b in zip(normals, offsets, strict=True)
        ]
    return out
