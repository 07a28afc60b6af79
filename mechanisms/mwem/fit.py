"""MWEM's fit: multiplicative-weights updates of the model toward noisy measurements.

Post-processing only: it sees the noisy answers (as fractions of the public or DP-estimated n)
and the model, never the data, and draws nothing.
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.arrays import AnyArray
from mechanisms.mwem.distribution import INTERMEDIATE_CELLS, FactoredDistribution, box_slices
from mechanisms.workload import Query

# One noisy measurement: the query, its noisy answer (a fraction of n) and the target floor.
Measurement = tuple[Query, AnyArray, float]

FINAL_PASSES = 5
_SETTLED = 1e-3  # an update that would change no weight by more than this is skipped
FLOOR_SHARE = 0.3  # MWEM's update targets are floored at this share of the noise scale


def target_floor(noise_scale: float, n: int, share: float = FLOOR_SHARE) -> float:
    """Smallest target (fraction of n) an update aims at: ``share`` of the noise scale.

    A count below its noise scale is weak evidence of an empty cell, but a floor at the whole
    scale puts mass into truly empty cells: on Adult (8 columns, ε = 10) 2-way TVD is .0078
    with share 1 and .0061 with 0.3 or less; 0.3 keeps the relative entropy of the
    contingency-table benchmark as low as share 1 did, where share 0 raised it up to 3×.
    """
    return max(share * noise_scale / n, 1e-9)


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
) -> None:
    """One multiplicative-weights step toward the noisy answer ``target`` (as a fraction of n)."""
    current = model.marginal(query.attrs)
    if update == "paper":
        factor = _paper_factor(query, current, target)
        if np.any(factor != 1):
            model.reweight(query.attrs, factor)
        return
    factor = _damped_factor(query, current, target, floor)
    if np.abs(factor - 1).max() > _SETTLED:
        model.reweight(query.attrs, factor)


def _damped_factor(query: Query, current: AnyArray, target: AnyArray, floor: float) -> AnyArray:
    """√(target / current) on each part of the domain the query splits it into.

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
    return np.sqrt(np.clip(ratio, math.exp(-2), math.exp(2)))


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
) -> None:
    """MW updates after a new measurement (the paper's practical improvement).

    Only measurements linked to the newest one through shared attributes are refitted: the
    others are independent of it (in the factored representation they form other groups, so
    factored and dense runs make the same updates). ``mw_passes`` given: that many passes over
    them. Default: 10 passes while the block's whole table is small (cheap; a block kept as a
    junction tree counts as its whole table, so both make the same updates); once it is
    large, the newest measurement twice, then one pass over all (FINAL_PASSES in the last
    round). (A pass over all only every 4th round: Adult, 8 columns, ε = 10, 2-/3-way TVD
    .0062/.0197 against .0054/.0187, seeds 3-5.)
    """
    inside = _linked(measured)
    if mw_passes is None and model.block_cells(measured[-1][0].attrs) > INTERMEDIATE_CELLS:
        for _ in range(2):
            query, target, floor = inside[-1]
            mw_update(model, query, target, floor, update)
        mw_passes = FINAL_PASSES if last_round else 1
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
