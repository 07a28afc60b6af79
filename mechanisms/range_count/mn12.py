"""The Muthukrishnan-Nikolov decomposition mechanism (docs/range-count.md section 2.4).

Planning reads only public inputs (support size and the workload's incidence, never counts):
  per round t on the remaining points P_t:
    nested greedy packings S_1 c S_2 c ... c S_J of the distinct workload ranges with pairwise
    symmetric difference >= n_t 2^-i; parent of a range born at level i = its nearest range in
    S_{i-1}; pieces F = R minus parent, G = parent minus R (level-i sets T_i);
    every range is anchored at its nearest range in S_J;
    square-root allocation of per-level variances; X = points whose load is at most the
    q-quantile; all variances scaled so that max over X of the loss is exactly the budget.
  recurse on P_t minus X; the last few points get identity noise.
Release: noisy counts of every level piece (restricted to X) and of every point of X.
Answers: chain estimator (anchor's chain of pieces plus per-point correction) or GLS.

Two noise readings of the same plan:
  mn12          discrete Gaussian noise, accounted in zCDP (section 2.4);
  mn12_laplace  discrete Laplace noise, accounted by advanced composition per point (the seed's
                reading, section 2.2), for comparison.

Privacy: each point lies in exactly one round's X (or the leftover), and only that round's
releases contain it. mn12: its loss sum_i d_i(p)/sigma_i^2 + 1/sigma_0^2 is at most the budget,
so the release is rho-zCDP (halved per-point loss for replace-one). mn12_laplace: a release of
scale b is (1/b)-DP for the point, and the point's releases compose (Dwork-Rothblum-Vadhan) to
epsilon(p) = sqrt(2 ln(1/delta) sum_j eps_j^2) + sum_j eps_j (e^eps_j - 1); the release is
(max_p epsilon(p), delta)-DP (replace-one: the union of both points' releases).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg

from mechanisms.arrays import AnyArray
from mechanisms.range_count.core import (
    SAFETY,
    PrivacyTarget,
    bits_key,
    draw_noise,
    memo,
    noise_variance,
    popcount,
    restrict_columns,
    unique_rows,
    unpack,
)

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource
    from mechanisms.release import Progress


N_MIN = 16
QUANTILE = 0.9
_BLOCK = 2048
_CACHE_BYTES = 1 << 30


# ---------------------------------------------------------------- packing


@dataclass
class Packing:
    """Nested greedy packings of distinct ranges (rows of `bits`) up to level j_max."""

    rows: list[int]  # centre -> row of bits; centre 0 is the empty set (row -1)
    levels: list[int]
    parents: list[int]
    anchors: list[AnyArray] = field(default_factory=list)  # per level: nearest centre per row
    distances: list[AnyArray] = field(default_factory=list)  # per level: distance to it
    dense: AnyArray | None = None  # float32 copy of all rows when it fits in memory

    def rows_dense(self, bits: AnyArray, n: int, index: Any) -> AnyArray:
        return self.dense[index] if self.dense is not None else unpack(bits[index], n)


def nested_packing(bits: AnyArray, n: int, j_max: int) -> Packing:
    """Greedy maximal packings S_1..S_jmax, nested, with pairwise distance >= n 2^-i."""
    pack = start_packing(bits)
    for level in range(1, j_max + 1):
        add_level(pack, bits, n, level)
    return pack


def start_packing(bits: AnyArray) -> Packing:
    """S_0 = {empty set}: every range's nearest centre is the empty set, at distance |R|."""
    sizes = popcount(bits).astype(np.float64)
    dense = unpack(bits, bits.shape[1] * 8) if bits.size * 32 <= _CACHE_BYTES else None
    return Packing([-1], [0], [-1], [np.zeros(len(bits), dtype=np.int64)], [sizes], dense)


def add_level(pack: Packing, bits: AnyArray, n: int, level: int) -> None:
    """Extend S_{level-1} greedily to a maximal packing with pairwise distance >= n 2^-level."""
    sizes = pack.distances[0]
    nearest_dist, nearest = pack.distances[-1].copy(), pack.anchors[-1].copy()
    threshold = n / 2.0**level
    previous = pack.anchors[-1]
    while True:
        eligible = np.flatnonzero(nearest_dist >= threshold)
        if eligible.size == 0:
            break
        block = eligible[:_BLOCK]
        dense = pack.rows_dense(bits, n, block)[:, :n]
        gram = dense @ dense.T
        dist = sizes[block][:, None] + sizes[block][None, :] - 2.0 * gram
        chosen = _greedy(dist, threshold)
        first = len(pack.rows)
        for j in chosen:
            pack.rows.append(int(block[j]))
            pack.levels.append(level)
            pack.parents.append(int(previous[block[j]]))
        _update_nearest(
            pack, bits, n, dense[chosen], sizes[block[chosen]], first, nearest_dist, nearest
        )
    pack.anchors.append(nearest)
    pack.distances.append(nearest_dist)


def _greedy(dist: AnyArray, threshold: float) -> list[int]:
    ok = np.ones(len(dist), dtype=bool)
    chosen = []
    for j in range(len(dist)):
        if ok[j]:
            chosen.append(j)
            ok &= dist[j] >= threshold
    return chosen


def _update_nearest(
    pack: Packing,
    bits: AnyArray,
    n: int,
    centres: AnyArray,
    centre_sizes: AnyArray,
    first: int,
    nearest_dist: AnyArray,
    nearest: AnyArray,
    block: int = 8192,
) -> None:
    sizes = pack.distances[0]
    for s in range(0, len(bits), block):
        dense = pack.rows_dense(bits, n, slice(s, s + block))[:, :n]
        dist = sizes[s : s + block, None] + centre_sizes[None, :] - 2.0 * (dense @ centres.T)
        best = dist.argmin(axis=1)
        best_dist = dist[np.arange(len(dist)), best]
        closer = best_dist < nearest_dist[s : s + block]
        idx = np.flatnonzero(closer) + s
        nearest_dist[idx] = best_dist[closer]
        nearest[idx] = first + best[closer]


# ---------------------------------------------------------------- one round


@dataclass
class Round:
    """Public plan of one recursion round (indices are support indices)."""

    active: AnyArray  # P_t
    x_points: AnyArray  # X_t, subset of P_t
    levels: int  # J
    centre_queries: AnyArray  # workload query index representing each centre (-1: empty set)
    centre_levels: AnyArray
    centre_parents: AnyArray
    centre_pieces: AnyArray  # (centres, 2): piece id of F and G, -1 when empty on X
    pieces: list[AnyArray]  # support indices of each piece (inside X)
    piece_levels: AnyArray
    rel_var: AnyArray  # relative variance per level, index 0 = per-point release
    kappa: float  # level l: Gaussian sigma^2 or Laplace 2 b^2 = kappa * rel_var[l]

    def scales(self, noise: str) -> AnyArray:
        """Noise scale per level: Gaussian sigma, or Laplace b with 2 b^2 = kappa * rel_var."""
        share = 1.0 if noise == "gaussian" else 0.5
        return np.sqrt(self.kappa * self.rel_var * share)

    def variances(self, noise: str) -> AnyArray:
        """Exact variance of one integer noise draw at each level (public)."""
        return np.array([noise_variance(noise, b) for b in self.scales(noise)])

    def loads(self) -> AnyArray:
        """Releases of each level containing each point of X_t (column 0: its own count)."""
        loads = np.zeros((len(self.x_points), len(self.rel_var)))
        loads[:, 0] = 1
        for level in np.unique(self.piece_levels):
            members = [
                p for p, lv in zip(self.pieces, self.piece_levels, strict=True) if lv == level
            ]
            index = np.searchsorted(self.x_points, np.concatenate(members))
            loads[:, level] = np.bincount(index, minlength=len(self.x_points))
        return loads


def _pieces_for(
    bits: AnyArray, n: int, pack: Packing, j: int
) -> tuple[int, AnyArray, AnyArray, AnyArray]:
    """F/G bit rows of every centre of level <= j, deduplicated within each level."""
    count = sum(1 for lv in pack.levels if lv <= j)
    width = bits.shape[1]
    rows = np.zeros((count, width), dtype=np.uint8)
    rows[1:] = bits[pack.rows[1:count]]
    parents = np.array(pack.parents[:count])
    parent_rows = np.zeros_like(rows)
    parent_rows[1:] = rows[parents[1:]]
    f = rows & ~parent_rows
    g = parent_rows & ~rows
    levels = np.array(pack.levels[:count])
    piece_rows: list[AnyArray] = []
    piece_levels: list[int] = []
    ids = np.full((count, 2), -1, dtype=np.int64)
    for level in range(1, j + 1):
        members = np.flatnonzero(levels == level)
        if members.size == 0:
            continue
        both = np.concatenate([f[members], g[members]])
        uniq, _, inverse, _ = unique_rows(both)
        nonempty = popcount(uniq) > 0
        new_id = np.cumsum(nonempty) - 1 + len(piece_rows)
        local = np.where(nonempty[inverse], new_id[inverse], -1)
        ids[members, 0], ids[members, 1] = local[: members.size], local[members.size :]
        piece_rows.extend(uniq[nonempty])
        piece_levels.extend([level] * int(nonempty.sum()))
    return count, ids, np.array(piece_rows).reshape(-1, width), np.array(piece_levels, dtype=int)


def _chain_counts(
    parents: AnyArray, ids: AnyArray, piece_levels: AnyArray, piece_ok: AnyArray, j: int
) -> AnyArray:
    """Per centre: number of usable pieces at each level along its chain to the empty set."""
    counts = np.zeros((len(parents), j + 1))
    for c in range(1, len(parents)):
        counts[c] = counts[parents[c]]
        for pid in ids[c]:
            if pid >= 0 and piece_ok[pid]:
                counts[c, piece_levels[pid]] += 1
    return counts


def _plan_levels(
    bits: AnyArray, n: int, mult: AnyArray, pack: Packing, j: int, quantile: float
) -> dict[str, Any]:
    """Allocation, X and predicted error for one choice of J (all relative to kappa)."""
    count, ids, piece_bits, piece_levels = _pieces_for(bits, n, pack, j)
    parents = np.array(pack.parents[:count])
    anchors, dist = pack.anchors[j], pack.distances[j]
    weights = mult / mult.sum()
    chains = _chain_counts(parents, ids, piece_levels, np.ones(len(piece_levels), bool), j)
    use = weights @ chains[anchors]
    loads = np.zeros((j + 1, n))
    for level in range(1, j + 1):
        sel = piece_levels == level
        if sel.any():
            loads[level] = unpack(piece_bits[sel], n).sum(axis=0)
    mean_load = loads.mean(axis=1)
    use[0] = max(weights @ dist, 1.0 / n)
    mean_load[0] = 1.0
    use = np.maximum(use, 0.5 / mult.sum())
    rel_var = np.sqrt(mean_load / use)
    loss = (loads[1:] / rel_var[1:, None]).sum(axis=0) + 1.0 / rel_var[0]
    in_x = loss <= np.quantile(loss, quantile)
    kappa = float(loss[in_x].max())
    x_bits = np.packbits(in_x)
    piece_ok = popcount(piece_bits & x_bits) > 0 if len(piece_bits) else np.zeros(0, bool)
    chains = _chain_counts(parents, ids, piece_levels, piece_ok, j)
    anchor_rows = np.zeros_like(bits)
    has_anchor = anchors > 0
    anchor_rows[has_anchor] = bits[np.array(pack.rows)[anchors[has_anchor]]]
    outside = popcount((bits ^ anchor_rows) & x_bits)
    per_range = chains[anchors] @ rel_var + outside * rel_var[0]
    ids = np.where((ids >= 0) & piece_ok[np.maximum(ids, 0)], ids, -1) if len(piece_ok) else ids
    return dict(
        count=count,
        ids=ids,
        piece_bits=piece_bits,
        piece_levels=piece_levels,
        piece_ok=piece_ok,
        rel_var=rel_var,
        in_x=in_x,
        kappa=kappa,
        predicted=float(weights @ per_range) * kappa,
        use=use,
        mean_load=mean_load,
    )


def plan_round(
    bits: AnyArray, n: int, mult: AnyArray, shatter: int, quantile: float = QUANTILE
) -> tuple[Packing, int, dict[str, Any]]:
    """Choose J by the smallest predicted mean error (public) and return that round's plan.

    J runs upwards from max(1, floor(i0) - 3) and stops once the predicted error rises
    (it is unimodal in J in practice); levels above the chosen J are never packed.
    """
    i0 = math.log2(max(n, 2)) / shatter
    j_max = max(1, math.floor(i0))
    pack = start_packing(bits)
    best = None
    for j in range(1, j_max + 1):
        add_level(pack, bits, n, j)
        if j < max(1, j_max - 3):
            continue
        option = _plan_levels(bits, n, mult, pack, j, quantile)
        if best is not None and option["predicted"] >= best[2]["predicted"]:
            break
        best = (pack, j, option)
    assert best is not None  # j = j_max is never skipped, so one option is always planned
    return best


# ---------------------------------------------------------------- whole plan


@dataclass
class MN12Plan:
    """All rounds plus the final identity round on the leftover points."""

    n: int
    noise: str
    rounds: list[Round]
    leftover: AnyArray
    leftover_scale: float
    workload_bits: AnyArray
    delta: float = 0.0  # mn12_laplace: the delta its scales were calibrated for
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        """Mechanism name: mn12 (Gaussian, zCDP) or mn12_laplace (advanced composition)."""
        return "mn12_laplace" if self.noise == "laplace" else "mn12"

    @classmethod
    def build(
        cls,
        workload_bits: AnyArray,
        n: int,
        shatter: int,
        target: PrivacyTarget,
        *,
        quantile: float = QUANTILE,
        n_min: int = N_MIN,
        progress: Progress | None = None,
        laplace: bool = False,
    ) -> MN12Plan:
        """Plan every round from the support size and workload only; `laplace` for mn12_laplace."""
        active = np.arange(n)
        rounds = []
        budget = target.loss_budget
        while len(active) > n_min:
            local = restrict_columns(workload_bits, n, active)
            keep = popcount(local) > 0
            if not keep.any():
                break
            rows, first, _, mult = unique_rows(local[keep])
            query_ids = np.flatnonzero(keep)[first]
            pack, j, opt = plan_round(rows, len(active), mult.astype(float), shatter, quantile)
            rounds.append(_make_round(active, pack, j, opt, query_ids, budget))
            active = active[~opt["in_x"]]
            if progress:
                progress(len(rounds), len(rounds) + 1)
        scale = 0.0 if math.isinf(budget) else math.sqrt(SAFETY / budget)
        plan = cls(n, target.noise, rounds, active, scale, workload_bits)
        if laplace:
            calibrate_laplace(plan, target)
        return plan

    # -- accounting -------------------------------------------------------
    def point_loss(self) -> AnyArray:
        """Per-point loss recomputed from the released sets and their scales.

        mn12: sum of 1/sigma^2 over the point's releases; mn12_laplace: its composed epsilon
        (add/remove; `laplace_accounting` adds the partner for replace-one).
        """
        if self.noise == "laplace":
            return composed_epsilon(*laplace_terms(self), self.delta)
        loss = np.zeros(self.n)
        for r in self.rounds:
            sig2 = np.array([r.kappa * w for w in r.rel_var])
            for piece, level in zip(r.pieces, r.piece_levels, strict=True):
                loss[piece] += _inv(sig2[level])
            loss[r.x_points] += _inv(sig2[0])
        loss[self.leftover] += _inv(self.leftover_scale**2)
        return loss

    # -- release ----------------------------------------------------------
    def measure(self, counts: AnyArray, rng: RandomSource) -> dict[str, Any]:
        """The one private step: noisy piece counts and point counts of every round."""
        out: dict[str, Any] = {"rounds": []}
        for r in self.rounds:
            scale = r.scales(self.noise)
            exact = np.array([counts[p].sum() for p in r.pieces], dtype=np.int64)
            noise = np.zeros(len(exact), dtype=np.int64)
            for level in np.unique(r.piece_levels):
                sel = r.piece_levels == level
                noise[sel] = draw_noise(rng, self.noise, scale[level], int(sel.sum()))
            points = counts[r.x_points] + draw_noise(rng, self.noise, scale[0], len(r.x_points))
            out["rounds"].append({"pieces": exact + noise, "points": points})
        out["leftover"] = counts[self.leftover] + draw_noise(
            rng, self.noise, self.leftover_scale, len(self.leftover)
        )
        return out

    # -- answers ----------------------------------------------------------
    def answer(
        self, noisy: dict[str, Any], query_bits: AnyArray, estimator: str = "chain"
    ) -> tuple[AnyArray, AnyArray]:
        dense = np.unpackbits(query_bits, axis=1, count=self.n).astype(bool)
        key = bits_key(query_bits)
        total = np.zeros(len(dense))
        var = np.zeros(len(dense))
        for r, y in zip(self.rounds, noisy["rounds"], strict=True):
            fn = _round_chain if estimator == "chain" else _round_gls
            a, v = fn(self, r, y, dense, key)
            total += a
            var += v
        left = np.asarray(noisy["leftover"], dtype=float)
        total += dense[:, self.leftover].astype(float) @ left
        var += dense[:, self.leftover].sum(axis=1) * noise_variance(self.noise, self.leftover_scale)
        return total, var

    def centre_sets(self, r: Round) -> AnyArray:
        """Dense (centres x |P_t|) sets of a round's centres, rebuilt from the public workload."""
        sets: AnyArray = memo(self.cache, ("centres", id(r)), lambda: self._centre_sets(r))
        return sets

    def _centre_sets(self, r: Round) -> AnyArray:
        local = np.unpackbits(
            self.workload_bits[np.maximum(r.centre_queries, 0)], axis=1, count=self.n
        )[:, r.active].astype(np.float32)
        local[r.centre_queries < 0] = 0
        return local

    def predicted_variance(self, query_bits: AnyArray) -> AnyArray:
        zero = {
            "rounds": [
                {"pieces": np.zeros(len(r.pieces)), "points": np.zeros(len(r.x_points))}
                for r in self.rounds
            ],
            "leftover": np.zeros(len(self.leftover)),
        }
        return self.answer(zero, query_bits)[1]

    # -- serialisation ----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = {
            "n": self.n,
            "noise": self.noise,
            "leftover": self.leftover.tolist(),
            "leftover_scale": self.leftover_scale,
            "rounds": [_round_to_dict(r) for r in self.rounds],
        }
        return out | {"delta": self.delta} if self.noise == "laplace" else out

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, workload_bits: AnyArray, **_: Any) -> MN12Plan:
        return cls(
            int(d["n"]),
            d["noise"],
            [_round_from_dict(r) for r in d["rounds"]],
            np.array(d["leftover"], dtype=np.int64),
            float(d["leftover_scale"]),
            workload_bits,
            float(d.get("delta", 0.0)),
        )

    def round_stats(self) -> list[dict[str, Any]]:
        loss = self.point_loss()
        return [
            {
                "n_t": len(r.active),
                "x_size": len(r.x_points),
                "levels": r.levels,
                "centres_per_level": np.bincount(r.centre_levels, minlength=r.levels + 1)[
                    1:
                ].tolist(),
                "pieces_per_level": np.bincount(r.piece_levels, minlength=r.levels + 1)[
                    1:
                ].tolist(),
                "max_loss": float(loss[r.x_points].max()) if len(r.x_points) else 0.0,
            }
            for r in self.rounds
        ]


# ---------------------------------------------------------------- Laplace reading (section 2.2)


def composed_epsilon(square: AnyArray, linear: AnyArray, delta: float) -> AnyArray:
    """Heterogeneous advanced composition (Dwork-Rothblum-Vadhan) of pure-DP releases.

    `square` and `linear` hold, per point, sum_j eps_j^2 and sum_j eps_j (e^eps_j - 1) over the
    releases containing it; together those releases are (result, delta)-DP for that point.
    """
    return np.sqrt(2.0 * math.log(1.0 / delta) * square) + linear


def release_terms(scales: AnyArray) -> tuple[AnyArray, AnyArray]:
    """eps^2 and eps (e^eps - 1) of a discrete Laplace release of each scale (eps = 1/scale)."""
    with np.errstate(divide="ignore"):
        eps = 1.0 / np.asarray(scales, dtype=float)
    return eps**2, eps * np.expm1(eps)


def laplace_terms(plan: MN12Plan, stretch: float = 1.0) -> tuple[AnyArray, AnyArray]:
    """Per point: sum_j eps_j^2 and sum_j eps_j (e^eps_j - 1) over the releases containing it.

    `stretch` multiplies every noise variance (for calibration).
    """
    square, linear = np.zeros(plan.n), np.zeros(plan.n)
    for r in plan.rounds:
        sq, lin = release_terms(r.scales("laplace") * math.sqrt(stretch))
        loads = memo(plan.cache, ("loads", id(r)), r.loads)
        square[r.x_points] += _weighted(loads, sq)
        linear[r.x_points] += _weighted(loads, lin)
    sq, lin = release_terms(np.array([plan.leftover_scale * math.sqrt(stretch)]))
    square[plan.leftover] += sq[0]
    linear[plan.leftover] += lin[0]
    return square, linear


def laplace_epsilon(plan: MN12Plan, neighbouring: str, stretch: float = 1.0) -> float:
    """Epsilon of an mn12_laplace release at plan.delta: the max over points of epsilon(p).

    Replace-one moves a record from p to q: the releases containing p or q compose, so each
    point's terms get the largest terms of any other point added (an upper bound).
    """
    square, linear = laplace_terms(plan, stretch)
    if neighbouring == "replace-one":
        square, linear = square + _largest_other(square), linear + _largest_other(linear)
    return float(composed_epsilon(square, linear, plan.delta).max(initial=0.0))


def calibrate_laplace(plan: MN12Plan, target: PrivacyTarget) -> None:
    """Scale every round's (and the leftover's) Laplace noise to spend exactly (epsilon, delta).

    Each round separately gets the smallest noise keeping its worst point within epsilon; for
    replace-one, one common stretch then covers pairs of points in different rounds.
    """
    plan.noise, plan.delta = "laplace", target.delta
    if math.isinf(target.epsilon):
        for r in plan.rounds:
            r.kappa = 0.0
        plan.leftover_scale = 0.0
        return
    goal = target.epsilon * (1 - 1e-12)
    copies = 2.0 if target.neighbouring == "replace-one" else 1.0

    def round_fits(r: Round, loads: AnyArray, kappa: float) -> bool:
        r.kappa = kappa
        sq, lin = release_terms(r.scales("laplace"))
        worst = composed_epsilon(_weighted(loads, sq), _weighted(loads, lin), plan.delta)
        fits: bool = worst.max(initial=0.0) <= goal
        return fits

    for r in plan.rounds:
        loads = copies * r.loads()

        def kappa_fits(k: float, r: Round = r, loads: AnyArray = loads) -> bool:
            return round_fits(r, loads, k)

        r.kappa = _smallest(kappa_fits)

    def leftover_fits(v: float) -> bool:
        sq, lin = release_terms(np.array([math.sqrt(v)]))
        fits: bool = composed_epsilon(copies * sq, copies * lin, plan.delta)[0] <= goal
        return fits

    leftover = _smallest(leftover_fits)
    plan.leftover_scale = math.sqrt(leftover)
    if laplace_epsilon(plan, target.neighbouring) > goal:
        stretch = _smallest(lambda s: laplace_epsilon(plan, target.neighbouring, s) <= goal)
        for r in plan.rounds:
            r.kappa *= stretch
        plan.leftover_scale *= math.sqrt(stretch)
    plan.cache.clear()


def laplace_accounting(plan: MN12Plan, target: PrivacyTarget) -> dict[str, Any]:
    """(epsilon, delta) of an mn12_laplace plan recomputed per point; refuses any overspend."""
    epsilon = laplace_epsilon(plan, target.neighbouring)
    if epsilon > target.epsilon * (1 + 1e-9) or plan.delta > target.delta:
        raise RuntimeError(
            f"internal error: ({epsilon}, {plan.delta}) above the budget "
            f"({target.epsilon}, {target.delta}); nothing was released"
        )
    return {
        "unit": "one record",
        "neighbouring": target.neighbouring,
        "privacy": "(epsilon, delta)-DP (discrete Laplace, advanced composition per point)",
        "epsilon": epsilon,
        "delta": plan.delta,
        "rounds": plan.round_stats(),
    }


def _weighted(loads: AnyArray, terms: AnyArray) -> AnyArray:
    """loads @ terms, where a level without releases costs nothing (0 * inf = 0)."""
    with np.errstate(invalid="ignore"):
        total: AnyArray = np.where(loads > 0, loads * terms, 0.0).sum(axis=-1)
        return total


def _largest_other(values: AnyArray) -> AnyArray:
    """For each entry, the largest of the other entries (0 when there is none)."""
    if len(values) < 2:
        return np.zeros_like(values)
    top = np.argsort(values)[-2:]
    out = np.full_like(values, values[top[1]])
    out[top[1]] = values[top[0]]
    return out


def _smallest(fits: Callable[[float], bool], start: float = 1.0) -> float:
    """Smallest positive value, to ~1e-15 relative, passing a test monotone in it (larger fits)."""
    hi = start
    while not fits(hi):
        hi *= 4.0
    lo = hi / 4.0
    while lo > 1e-200 and fits(lo):
        lo, hi = lo / 4.0, lo
    for _ in range(64):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def _inv(v: float) -> float:
    return math.inf if v == 0 else 1.0 / v


def _make_round(
    active: AnyArray,
    pack: Packing,
    j: int,
    opt: dict[str, Any],
    query_ids: AnyArray,
    budget: float,
) -> Round:
    count = opt["count"]
    rows = np.array(pack.rows[:count])
    centre_queries = np.where(rows >= 0, query_ids[np.maximum(rows, 0)], -1)
    in_x = opt["in_x"]
    pieces = []
    for bits_row in opt["piece_bits"]:
        members = np.unpackbits(bits_row, count=len(active)).astype(bool) & in_x
        pieces.append(active[members])
    kept = np.flatnonzero(opt["piece_ok"]) if len(opt["piece_ok"]) else np.zeros(0, int)
    renumber = np.full(len(opt["piece_ok"]) + 1, -1)
    renumber[kept] = np.arange(len(kept))
    ids = np.where(opt["ids"] >= 0, renumber[opt["ids"]], -1)
    kappa = 0.0 if math.isinf(budget) else opt["kappa"] / budget * SAFETY
    return Round(
        active=active,
        x_points=active[in_x],
        levels=j,
        centre_queries=centre_queries,
        centre_levels=np.array(pack.levels[:count]),
        centre_parents=np.array(pack.parents[:count]),
        centre_pieces=ids,
        pieces=[pieces[k] for k in kept],
        piece_levels=opt["piece_levels"][kept],
        rel_var=opt["rel_var"],
        kappa=kappa,
    )


def _chain_values(r: Round, y_pieces: AnyArray, piece_var: AnyArray) -> tuple[AnyArray, AnyArray]:
    """Noisy count and variance of every centre by walking its chain of pieces."""
    value = np.zeros(len(r.centre_levels))
    var = np.zeros(len(r.centre_levels))
    for c in range(1, len(value)):
        p = r.centre_parents[c]
        f, g = r.centre_pieces[c]
        value[c] = value[p] + (y_pieces[f] if f >= 0 else 0.0) - (y_pieces[g] if g >= 0 else 0.0)
        var[c] = var[p] + (piece_var[f] if f >= 0 else 0.0) + (piece_var[g] if g >= 0 else 0.0)
    return value, var


def _round_chain(
    plan: MN12Plan, r: Round, y: dict[str, Any], dense: AnyArray, key: Any
) -> tuple[AnyArray, AnyArray]:
    """Anchor's chain of noisy pieces plus the noisy points of X_t in R minus those in a(R)."""
    sig2 = r.variances(plan.noise)
    piece_var = sig2[r.piece_levels] if len(r.piece_levels) else np.zeros(0)
    value, cvar = _chain_values(r, np.asarray(y["pieces"], dtype=float), piece_var)
    anchor, outside = memo(plan.cache, ("anchors", id(r), key), lambda: _anchors(plan, r, dense))
    y_points = np.asarray(y["points"], dtype=float)
    centre_points = _centres_on_x(plan, r).astype(float) @ y_points
    answers = np.zeros(len(dense))
    for s in range(0, len(dense), 4096):
        answers[s : s + 4096] = dense[s : s + 4096][:, r.x_points].astype(float) @ y_points
    answers += value[anchor] - centre_points[anchor]
    return answers, cvar[anchor] + outside * sig2[0]


def _centres_on_x(plan: MN12Plan, r: Round) -> AnyArray:
    """The round's centre sets restricted to X_t (centres x |X_t|, public; cached)."""
    sets: AnyArray = memo(
        plan.cache,
        ("centres on x", id(r)),
        lambda: plan.centre_sets(r)[:, np.isin(r.active, r.x_points)],
    )
    return sets


def _anchors(plan: MN12Plan, r: Round, dense: AnyArray) -> tuple[AnyArray, AnyArray]:
    """Best centre for every query and |(R diff a) in X_t|.

    Any centre gives an unbiased answer; the one with the smallest predicted variance (chain
    variance + |(R diff a) in X_t| point variances) is chosen. Public: plan and query only.
    """
    sig2 = r.variances(plan.noise)
    piece_var = sig2[r.piece_levels] if len(r.piece_levels) else np.zeros(0)
    _, cvar = _chain_values(r, np.zeros(len(r.pieces)), piece_var)
    centres_x = _centres_on_x(plan, r)
    sizes = centres_x.sum(axis=1)
    anchor = np.zeros(len(dense), dtype=np.int64)
    outside = np.zeros(len(dense))
    for s in range(0, len(dense), 4096):
        qx = dense[s : s + 4096][:, r.x_points].astype(np.float32)
        dist = qx.sum(axis=1)[:, None] + sizes[None, :] - 2.0 * (qx @ centres_x.T)
        a = (cvar[None, :] + dist * sig2[0]).argmin(axis=1)
        anchor[s : s + 4096] = a
        outside[s : s + 4096] = dist[np.arange(len(a)), a]
    return anchor, outside


def _round_gls(
    plan: MN12Plan, r: Round, y: dict[str, Any], dense: AnyArray, key: Any
) -> tuple[AnyArray, AnyArray]:
    """Generalised least squares over X_t: min-variance linear unbiased estimate."""
    var, noiseless = _gls_variances(plan, r)
    design, weight, chol = memo(plan.cache, ("gls", id(r)), lambda: _gls_factor(r, var))
    rhs = design.T @ (weight * np.asarray(y["pieces"], dtype=float))
    rhs += np.asarray(y["points"], dtype=float) / var[0]
    estimate = scipy.linalg.cho_solve(chol, rhs)
    w = dense[:, r.x_points].astype(float)
    variance = memo(
        plan.cache,
        ("gls-var", id(r), key),
        lambda: (scipy.linalg.solve_triangular(chol[0], w.T, lower=True) ** 2).sum(axis=0),
    )
    return w @ estimate, variance * (0.0 if noiseless else 1.0)


def _gls_variances(plan: MN12Plan, r: Round) -> tuple[AnyArray, bool]:
    """Exact per-level noise variances; without noise any weights are exact (relative ones)."""
    var = r.variances(plan.noise)
    return (r.rel_var, True) if (var <= 0).any() else (var, False)


def _gls_factor(r: Round, var: AnyArray) -> tuple[AnyArray, AnyArray, Any]:
    """Design matrix of the pieces over X_t, their weights, and the Cholesky factor of B'WB."""
    design = np.zeros((len(r.pieces), len(r.x_points)))
    for k, piece in enumerate(r.pieces):
        design[k, np.searchsorted(r.x_points, piece)] = 1.0
    weight = 1.0 / var[r.piece_levels] if len(r.pieces) else np.zeros(0)
    gram = (design.T * weight) @ design + np.eye(len(r.x_points)) / var[0]
    return design, weight, scipy.linalg.cho_factor(gram, lower=True)


def _round_to_dict(r: Round) -> dict[str, Any]:
    return {
        "active": r.active.tolist(),
        "x_points": r.x_points.tolist(),
        "levels": r.levels,
        "centre_queries": r.centre_queries.tolist(),
        "centre_levels": r.centre_levels.tolist(),
        "centre_parents": r.centre_parents.tolist(),
        "centre_pieces": r.centre_pieces.tolist(),
        "pieces": [p.tolist() for p in r.pieces],
        "piece_levels": r.piece_levels.tolist(),
        "relative_variance": r.rel_var.tolist(),
        "kappa": r.kappa,
    }


def _round_from_dict(d: dict[str, Any]) -> Round:
    arr = np.array
    return Round(
        arr(d["active"], dtype=np.int64),
        arr(d["x_points"], dtype=np.int64),
        int(d["levels"]),
        arr(d["centre_queries"], dtype=np.int64),
        arr(d["centre_levels"], dtype=np.int64),
        arr(d["centre_parents"], dtype=np.int64),
        arr(d["centre_pieces"], dtype=np.int64).reshape(-1, 2),
        [arr(p, dtype=np.int64) for p in d["pieces"]],
        arr(d["piece_levels"], dtype=np.int64),
        arr(d["relative_variance"]),
        float(d["kappa"]),
    )
