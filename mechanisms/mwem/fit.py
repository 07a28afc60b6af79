"""MWEM's fit: multiplicative-weights updates of the model toward noisy measurements.

Post-processing only: it sees the noisy answers (as fractions of the public or DP-estimated n)
and the model, never the data, and draws nothing.
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.accuracy import discrete_laplace_std
from mechanisms.arrays import AnyArray
from mechanisms.mwem.distribution import INTERMEDIATE_CELLS, FactoredDistribution, box_slices
from mechanisms.workload import Query

# One noisy measurement: the query, its noisy answer (a fraction of n) and the target floor.
Measurement = tuple[Query, AnyArray, float]

FINAL_PASSES = 20  # refit: the last round's passes over every measurement, at FINAL_STEP
DAMPED_STEP = 0.5  # the damped update moves each cell by (target / current) ** step
FINAL_STEP = 0.25  # ... and half as far in the last round's passes (refit's docstring)
_SETTLED = 1e-3  # an update that would change no weight by more than this is skipped
FLOOR_SHARE = 0.3  # MWEM's update targets are floored at this share of the noise scale
CONSISTENT_SWEEPS = 3  # consistent_targets: shifts over a marginal's attributes, in turn
SMALLEST_TARGET = 1e-9  # a ratio update cannot aim at 0: the least target and floor


def target_floor(noise_scale: float, n: int, share: float = FLOOR_SHARE) -> float:
    """Smallest target (fraction of n) an update aims at: ``share`` of the noise scale.

    A count below its noise scale is weak evidence of an empty cell, but a floor at the whole
    scale puts mass into truly empty cells: on Adult (8 columns, ε = 10) 2-way TVD is .0078
    with share 1 and .0061 with 0.3 or less; 0.3 keeps the relative entropy of the
    contingency-table benchmark as low as share 1 did, where share 0 raised it up to 3×.
    """
    return max(share * noise_scale / n, SMALLEST_TARGET)


def independent_weights(one_way: list[AnyArray]) -> list[AnyArray]:
    """The independent release's weights: each noisy 1-way marginal clipped at half a row.

    What a plan without rounds releases (their product): the same release, draw for draw, as
    the independent baseline of benchmarks/mwem_peers.py, so no table can make it worse. Half
    a row, not 0, keeps every cell possible (a zero cell made the relative entropy of
    loglinear8 at ε = .5 49 instead of 1.5). The start of rounds raises counts to the noise
    scale instead (a multiplicative update cannot grow a cell from 0); without rounds that put
    up to 3% of n into each near-empty cell of randhie at ε = .03 and lost 8% of 2-way TVD.
    Not mixed with the uniform marginal: that bets on flat marginals and lost up to 26% of
    2-way TVD on skewed ones (docs/mwem.md). Post-processing only.
    """
    clipped = [np.maximum(np.asarray(counts, dtype=float), 0.5) for counts in one_way]
    return [weights / weights.sum() for weights in clipped]


def joint_weights(noisy: AnyArray, n: int) -> AnyArray:
    """The model of a measured full table: its noisy counts projected onto tables of n rows.

    The closest non-negative table of n rows (Euclidean projection onto the simplex: every
    count lowered by one amount τ, then clipped at 0). Clipping alone would keep the positive
    noise of every empty cell, a bias that sums up in the marginals of a sparse table; τ takes
    it back. One row spread evenly over the cells keeps every cell possible (a zero cell made
    the relative entropy of the contingency-table benchmark infinite), at a total-variation
    cost of at most 1/(2n). Post-processing only.
    """
    values = np.asarray(noisy, dtype=float)
    counts = np.sort(values.ravel())[::-1]
    kept = np.cumsum(counts) - n  # with the k largest kept: τ = kept[k-1] / k
    k = int(np.nonzero(counts * np.arange(1, counts.size + 1) > kept)[0][-1]) + 1
    tau = kept[k - 1] / k
    weights: AnyArray = np.maximum(values - tau, 0.0) + 1 / counts.size
    return weights


def mw_update(
    model: FactoredDistribution,
    query: Query,
    target: AnyArray,
    floor: float,
    update: str = "damped",
    step: float = DAMPED_STEP,
) -> None:
    """One multiplicative-weights step toward the noisy answer ``target`` (as a fraction of n).

    ``step``: the damped update's exponent (``_damped_factor``); the paper's has none.
    """
    current = model.marginal(query.attrs)
    if update == "paper":
        factor = _paper_factor(query, current, target)
        if np.any(factor != 1):
            model.reweight(query.attrs, factor)
        return
    factor = _damped_factor(query, current, target, floor, step)
    if np.abs(factor - 1).max() > _SETTLED:
        model.reweight(query.attrs, factor)


def _damped_factor(
    query: Query, current: AnyArray, target: AnyArray, floor: float, step: float
) -> AnyArray:
    """(target / current) ** step on each part of the domain the query splits it into.

    A marginal's cells and a box with its complement partition the domain; the target is
    floored at ``floor`` and the ratio clipped to [e^-2, e^2] so noisy or zero targets cannot
    blow up.
    """
    if query.box is None:
        ratio = np.maximum(target.reshape(current.shape), floor) / np.maximum(current, 1e-300)
    else:
        inside = float(current[box_slices(query)].sum())
        wanted = min(max(float(target[0]), floor), 1 - floor)
        ratio = np.full(current.shape, (1 - wanted) / max(1 - inside, 1e-300))
        ratio[box_slices(query)] = wanted / max(inside, 1e-300)
    # the square root first, as always, so a step of 1/2 is bit for bit what it was
    root: AnyArray = np.sqrt(np.clip(ratio, math.exp(-2), math.exp(2))) ** (2 * step)
    return root


def _paper_factor(query: Query, current: AnyArray, target: AnyArray) -> AnyArray:
    """The paper's exp(q(x)·(m − q(A))/(2n)), with answers as fractions of n.

    Each cell of a marginal is its own counting query q; a box is one query (1 inside, 0
    outside).
    """
    if query.box is None:
        return np.exp((target.reshape(current.shape) - current) / 2)
    factor = np.ones(current.shape)
    inside = float(current[box_slices(query)].sum())
    factor[box_slices(query)] = math.exp((float(target[0]) - inside) / 2)
    return factor


def refit(
    model: FactoredDistribution,
    measured: list[Measurement],
    mw_passes: int | None,
    update: str,
    *,
    last_round: bool,
    every_target: bool = False,
) -> None:
    """MW updates after a new measurement (the paper's practical improvement).

    Only measurements linked to the newest one through shared attributes are refitted: the
    others are independent of it (in the factored representation they form other groups, so
    factored and dense runs make the same updates). With ``every_target`` all of them are
    (``consistent_targets`` moved targets in every group). ``mw_passes`` given: that many passes
    over them. Default: 10 passes while every block they touch is small (cheap; a block kept
    as a junction tree counts as its whole table, so both make the same updates); once one is
    large, the newest measurement twice, then one pass over all. (A pass over all only every
    4th round: Adult, 8 columns, ε = 10, 2-/3-way TVD .0062/.0197 against .0054/.0187, seeds
    3-5.) The last round makes FINAL_PASSES passes over them (``mw_passes`` if given), each
    update going half as far as before (FINAL_STEP): where measurements disagree, smaller steps
    settle between them instead of following the last one updated. On the tune half of
    benchmarks/heldout.py (seeds 0 to 2) that lowered the model's 2-way TVD beyond two
    standard errors in 29 of the 42 cells with rounds and raised none (geometric means .987,
    .981 and .944 at ε .1, 1 and 10), for up to 2.5 times the CPU of a release; a tenth of a step
    in 30 passes was 1.33 times worse in one cell (docs/mwem.md, "Smaller steps in the last
    round").
    """
    inside = measured if every_target else _linked(measured)
    if last_round:
        for _ in range(FINAL_PASSES if mw_passes is None else mw_passes):
            for query, target, floor in inside:
                mw_update(model, query, target, floor, update, FINAL_STEP)
        return
    large = any(model.block_cells(query.attrs) > INTERMEDIATE_CELLS for query, *_ in inside)
    if mw_passes is None and large:
        for _ in range(2):
            query, target, floor = inside[-1]
            mw_update(model, query, target, floor, update)
        mw_passes = 1
    for _ in range(10 if mw_passes is None else mw_passes):
        for query, target, floor in inside:
            mw_update(model, query, target, floor, update)


def _linked(measured: list[Measurement]) -> list[Measurement]:
    """The measurements connected to the newest one by chains of shared attributes."""
    reach, grew = set(measured[-1][0].attrs), True
    while grew:
        grew = False
        for query, *_ in measured:
            if reach.intersection(query.attrs) and not reach.issuperset(query.attrs):
                reach.update(query.attrs)
                grew = True
    return [m for m in measured if reach.issuperset(m[0].attrs)]


def consistent_targets(
    measured: list[Measurement], scales: list[float], shape: tuple[int, ...]
) -> list[Measurement]:
    """The marginal targets shifted to agree on one 1-way marginal per attribute.

    Each attribute's 1-way marginal is estimated from every marginal measurement that holds
    it (the measurement summed over its other attributes), weighted by the inverse of that
    sum's noise variance: m cells of discrete Laplace noise at the measurement's scale (in
    ``scales``, one per measurement) have variance m·σ², σ = ``discrete_laplace_std``; then
    shifted evenly to sum to 1, as every marginal of the model does (targets are fractions of
    n). Each marginal target is then shifted by an amount spread evenly over its other
    attributes, CONSISTENT_SWEEPS times over its attributes in turn, so that its 1-way sums
    are those estimates (exactly after the first sweep when the target sums to 1 too). The
    noisy 1-way start and a noisy 2-way table then agree on the attribute they share, with the
    less noisy of the two weighing more. Box targets and floors are kept.
    On the tune half of benchmarks/heldout.py it cut 2-way TVD on every table at ε 1 and 10
    (docs/mwem.md, "Consistent targets"). Post-processing of the noisy answers only; nothing
    when a scale is 0 (ε infinite: the answers are exact).
    """
    if not all(scale > 0 for scale in scales):
        return measured
    marginals = [
        (i, query, np.asarray(target, dtype=float).reshape([shape[a] for a in query.attrs]))
        for i, (query, target, _) in enumerate(measured)
        if query.box is None
    ]
    one_way = _pooled_one_way(marginals, scales, shape)
    out = list(measured)
    for i, query, table in marginals:
        for _ in range(CONSISTENT_SWEEPS):
            for axis, a in enumerate(query.attrs):
                table = table + _shift(table, axis, one_way[a])
        out[i] = (query, table.ravel(), measured[i][2])
    return out


def final_targets(
    measured: list[Measurement], scales: list[float], shape: tuple[int, ...]
) -> list[Measurement]:
    """The last round's targets: ``consistent_targets``, each marginal's floor dropped.

    Every earlier round floors its targets at FLOOR_SHARE of the noise scale (``target_floor``):
    a count below its noise is weak evidence of an empty cell, and the floor keeps such cells
    possible while later measurements may still need them. In the last round's passes that
    floor only puts rows into cells the noisy counts show as empty (a count below 0 asked for
    0.3 of a noise scale of rows): here a marginal's cells aim at their consistent noisy value,
    down to SMALLEST_TARGET. On the tune half of benchmarks/heldout.py (seeds 0 to 2) that
    lowered the model's 2-way TVD beyond two standard errors in 33 of the 42 cells that have
    rounds and raised it in 2, by at most 2%; projecting each target onto the valid marginals
    as well (every cell lowered by one amount, then clipped at 0) was better at ε .1 but up to
    1.4 times worse at ε 1 and 10 (docs/mwem.md, "The last round's floor"). Boxes keep their
    floor. Post-processing of the noisy answers only; the measurements as they are when a
    scale is 0 (ε infinite: the answers are exact).
    """
    targets = consistent_targets(measured, scales, shape)
    if targets is measured:
        return measured
    return [
        measurement
        if measurement[0].box is not None
        else (measurement[0], measurement[1], SMALLEST_TARGET)
        for measurement in targets
    ]


def _pooled_one_way(
    marginals: list[tuple[int, Query, AnyArray]], scales: list[float], shape: tuple[int, ...]
) -> dict[int, AnyArray]:
    """Each measured attribute's 1-way marginal, pooled by inverse noise variance."""
    found: dict[int, list[tuple[AnyArray, float]]] = {}
    for i, query, table in marginals:
        for axis, a in enumerate(query.attrs):
            variance = table.size // shape[a] * discrete_laplace_std(scales[i]) ** 2
            found.setdefault(a, []).append((_one_way(table, axis), variance))
    pooled = {a: _inverse_variance_mean(estimates) for a, estimates in found.items()}
    # a marginal of the model sums to 1: the pooled one too, by one shift spread evenly
    return {a: p + (1 - p.sum()) / p.size for a, p in pooled.items()}


def _inverse_variance_mean(estimates: list[tuple[AnyArray, float]]) -> AnyArray:
    """The estimates' mean weighted by the inverse of each one's variance.

    An estimate of variance 0 (noise so small, ε in the thousands, that its standard deviation
    is 0 in floating point) is exact: those are averaged alone.
    """
    exact = [estimate for estimate, variance in estimates if variance == 0]
    if exact:
        mean: AnyArray = sum(exact[1:], exact[0]) / len(exact)
        return mean
    weighted: AnyArray | float = 0.0
    weights = 0.0
    for estimate, variance in estimates:
        weighted = weighted + estimate / variance
        weights = weights + 1 / variance
    return np.asarray(weighted) / weights


def _one_way(table: AnyArray, axis: int) -> AnyArray:
    """The table summed over every axis but ``axis``."""
    summed: AnyArray = table.sum(axis=tuple(i for i in range(table.ndim) if i != axis))
    return summed


def _shift(table: AnyArray, axis: int, wanted: AnyArray) -> AnyArray:
    """The additive change, spread evenly along the other axes, that gives ``wanted`` sums."""
    spread = table.size // table.shape[axis]
    change: AnyArray = (wanted - _one_way(table, axis)) / spread
    return change.reshape([-1 if i == axis else 1 for i in range(table.ndim)])
