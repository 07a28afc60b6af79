"""Quantiles of the summary statistics.

Public round-number candidates, the two ends of a quantile's 95% interval and its estimate (a
signed, tie-aware rank offset), each chosen by permute-and-flip. Both read a group's values only as
#(x < c) and #(x <= c) for the public candidates c (`ranks`), so they run on the values or on
their counts around the candidates (`RankCounts`, which an engine computes) alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from mechanisms.accounting import float_at_most, noise_scale
from mechanisms.arrays import FloatArray, IntArray
from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource, permute_and_flip
from mechanisms.schema import NumericColumn
from mechanisms.statistics.measures import LEVEL

CANDIDATES = 1025  # at most this many public candidates for a quantile's estimate
END_CANDIDATES = 257  # at most this many for each end of its interval (a coarser grid)
INNER_CANDIDATES = 129  # at least this many for the estimate inside its interval (`inner`)
POINT_SHARE = 0.75  # a quantile's share of its epsilon spent on the estimate (the rest: interval)
BOUND_ODDS = 1000.0  # the bound candidate of an interval end scores b ln(BOUND_ODDS) at worst
SKIP_MARGINS = 2.0  # skip the ends' pick where a group reaches at most this many margins M


def candidates(spec: NumericColumn, limit: int) -> tuple[float, ...]:
    """The public quantile candidates of a column: round numbers in [lower, upper], and the bounds.

    The multiples of one step, the smallest of 1, 2 or 5 times a power of ten that is at least
    the column's declared precision (1 for whole numbers, else 10^-decimals) and leaves at most
    `limit` candidates (bounds included). Public: from the schema alone. Every multiple of a
    power of ten at least as large as the step is a candidate, so values recorded at such a
    precision (ages, one-decimal readings, many tied zeros) are candidates themselves, and a
    quantile sitting on a tied value can be picked exactly, where an evenly spread grid would
    only reach the gap next to it. The estimate scores them by `rank_offsets`, which counts
    the tied values as covering every rank they occupy (at most 0 at a true quantile).
    """
    return _round_grid(spec.lower, spec.upper, 0 if spec.integer else spec.decimals, limit)


@lru_cache(maxsize=256)
def _round_grid(lower: float, upper: float, decimals: int, limit: int) -> tuple[float, ...]:
    low, high = Fraction(lower), Fraction(upper)
    unit = Fraction(1, 10**decimals) if decimals >= 0 else Fraction(10**-decimals)
    for power in range(64):
        for factor in (1, 2, 5):
            step = unit * factor * 10**power
            first, last = -((-low) // step), high // step
            if last - first + 1 > limit:  # too many multiples: a coarser step
                continue
            inner = {float(k * step) for k in range(int(first), int(last) + 1)}
            grid = sorted(inner | {float(low), float(high)})
            if len(grid) <= limit:
                return tuple(grid)
    raise MechanismError(f"bounds [{lower}, {upper}] leave no grid of {limit} candidates")


def quantile_grid(spec: NumericColumn) -> tuple[float, ...]:
    """Every candidate a quantile may score: the estimate's and the interval ends' (sorted).

    Public: from the schema alone. The ends are END_CANDIDATES candidates, so an estimate
    within them (`select`) scores candidates of this grid too.
    """
    return _union(candidates(spec, CANDIDATES), candidates(spec, END_CANDIDATES))


@lru_cache(maxsize=256)
def _union(first: tuple[float, ...], second: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(sorted(set(first) | set(second)))


@dataclass(frozen=True)
class RankCounts:
    """One group's clamped values as counts around the public candidates of `grid` (sorted).

    slots[2 i] counts the values strictly between candidates i - 1 and i (below the first for
    i = 0), slots[2 i + 1] those equal to candidate i, slots[2 m] those above the last. This is
    all the quantiles read of the values: #(x < c) and #(x <= c) for every candidate c, and the
    number of values, so an engine computes it (`aggregates.RankTally`) and no value leaves it.
    """

    grid: tuple[float, ...]
    slots: IntArray

    @staticmethod
    def slots_of(clamped: FloatArray, grid: tuple[float, ...]) -> IntArray:
        """The slot of each value: #(candidates < v) + #(candidates <= v).

        One search: with the candidates strictly increasing, at most one equals v, the one at
        #(candidates < v) (10^6 values, 1,001 candidates: 0.06 against 0.11 s of CPU).
        """
        edges = np.asarray(grid, dtype=np.float64)
        below: IntArray = np.searchsorted(edges, clamped, side="left")
        if edges.size == 0 or not np.all(edges[1:] > edges[:-1]):
            at_or_below: IntArray = np.searchsorted(edges, clamped, side="right")
            return below + at_or_below
        on_one: IntArray = (edges[np.minimum(below, edges.size - 1)] == clamped).astype(np.int64)
        return 2 * below + on_one

    @classmethod
    def of_values(cls, values: FloatArray, spec: NumericColumn) -> RankCounts:
        """The counts of `values` clamped to the bounds, over the column's `quantile_grid`."""
        grid = quantile_grid(spec)
        clamped = np.clip(np.asarray(values, dtype=np.float64), spec.lower, spec.upper)
        counts = np.bincount(cls.slots_of(clamped, grid), minlength=2 * len(grid) + 1)
        return cls(grid, counts.astype(np.int64))

    def around(self, candidates: FloatArray) -> tuple[IntArray, IntArray, int]:
        """(#(x < c), #(x <= c)) for each of `candidates` (all in the grid), and #x."""
        edges = np.asarray(self.grid)
        index = np.searchsorted(edges, candidates)
        if np.any(index >= edges.size) or not np.array_equal(edges[index], candidates):
            raise MechanismError("quantile candidates outside the counted grid")
        cumulative = np.concatenate([[0], np.cumsum(self.slots)])
        return cumulative[2 * index + 1], cumulative[2 * index + 2], int(cumulative[-1])


Values = Sequence[float] | FloatArray | RankCounts


def ranks(values: Values, candidates: FloatArray) -> tuple[IntArray, IntArray, int]:
    """(#(x < c), #(x <= c)) for each candidate, and #x: from the values or their counts."""
    if isinstance(values, RankCounts):
        return values.around(candidates)
    x = np.sort(np.asarray(values, dtype=np.float64))
    return np.searchsorted(x, candidates, "left"), np.searchsorted(x, candidates, "right"), x.size


def clamped(values: Values, spec: NumericColumn) -> Values:
    """The values clamped to the column's bounds (counts are counted of clamped values)."""
    if isinstance(values, RankCounts):
        return values
    return np.clip(np.asarray(values, dtype=np.float64), spec.lower, spec.upper)


def inner(spec: NumericColumn, low: float, high: float) -> tuple[float, ...]:
    """The estimate's public candidates inside a released interval [low, high], ends included.

    The finer of two grids: `candidates`' own inside [low, high] (with low and high), and the
    round numbers of `candidates`' rule applied to [low, high] with at most INNER_CANDIDATES.
    The interval spans about 2M rows of rank around the quantile (M: `quantile_rank_margin`),
    and the estimate's selection resolves about one noise scale b of rank; with POINT_SHARE
    0.75, 2M / b is about 120 at any epsilon, so INNER_CANDIDATES = 129 candidates put about
    one noise scale of rows between neighbours where the interval is narrow (a price's median
    between 1,700 and 1,900 is picked to 2 dollars, not to the 20 of 1,025 candidates over 0
    to 20,000), and never a coarser grid than before where it is wide. A finer grid on a wide
    interval would only spread the picks over more candidates between tied values. Public:
    from the schema and the released ends. An engine counts the values around them in a
    second pass when the first (`quantile_grid`) did not (`aggregates.inner_tallies`).
    """
    grid = candidates(spec, CANDIDATES)
    coarse = sorted({c for c in grid if low <= c <= high} | {low, high})
    fine = _round_grid(low, high, 0 if spec.integer else spec.decimals, INNER_CANDIDATES)
    return tuple(coarse) if len(coarse) >= len(fine) else fine


def quantile_rank_margin(alpha: float, epsilon: float, neighbouring: str, size: int) -> float:
    """The rank offset M (in rows) the ends of a quantile's interval target, at their epsilon.

    The two ends are chosen together, by one permute-and-flip pick among the pairs (lo, hi), lo <=
    hi, of `size` public candidates, each end scored by how far the span of signed ranks it covers
    misses -M (lo) or +M (hi) (`end_scores`), and the bound candidates' scores (lower bound for lo,
    upper bound for hi) capped at the public value o (so the pair of bounds scores at most o,
    whatever the data). The pick exceeds the best score by more than m = b ln(P / beta) with
    probability at most beta = 5%, for P = size (size + 1) / 2 pairs and b = `rank_scale`; so M = m
    + o + 2 puts r_lo(lo) at -2 or below and r_hi(hi) at 2 or above (`end_ranks`), which places lo
    at or below the true quantile and hi at or above it: see `ends`.
    """
    b = rank_scale(alpha, epsilon, neighbouring)
    pairs = size * (size + 1) / 2
    return b * math.log(pairs / (1 - LEVEL)) + bound_score(b) + 2


def ends_skipped(
    spec: NumericColumn, alpha: float, epsilon: float, neighbouring: str, rows: float | None
) -> bool:
    """Whether a quantile at `epsilon` skips its interval's pick (`ends`).

    If so, its interval is the declared range and the estimate gets the whole epsilon. `rows`
    must be public or already released (a 95% upper bound on the group's number of values, or
    None when there is none): the pick is skipped where `margin_reaches` says the group is
    within SKIP_MARGINS margins M (`quantile_rank_margin`, at the ends' share of epsilon) of
    the quantile on its wider side.

    Privacy: the choice is post-processing of public or released values, so the quantile that
    follows is epsilon-DP either way (adaptive sequential composition). Coverage: the declared
    range holds the quantile of the clamped values always. An upper bound that is too low (the
    count's 5% miss) only skips a pick more often, which keeps both.
    """
    if rows is None:
        return False
    _, part = quantile_shares(epsilon)
    size = len(candidates(spec, END_CANDIDATES))
    return margin_reaches(alpha, quantile_rank_margin(alpha, part, neighbouring, size), rows)


def margin_reaches(alpha: float, margin: float, rows: float) -> bool:
    """Whether an interval aimed at +-`margin` rows of rank is skipped on a group of `rows`.

    Skipped where max(alpha, 1 - alpha) rows <= SKIP_MARGINS * margin: the ends would aim at
    least half-way from the quantile to the group's far end, so the interval would hold about
    half the group or more. There the estimate's noise, not the candidates' spacing, sets its
    error, and 1 - POINT_SHARE of epsilon spent on the ends makes that noise 1 / POINT_SHARE
    times what the whole epsilon gives (OpenDP's median at the whole epsilon beat ours in most
    such groups); skipped, the estimate is at the whole epsilon on the declared range's
    candidates, as OpenDP's. SKIP_MARGINS = 2 was chosen on the tune half of the held-out
    protocol (benchmarks/quantile_intervals.py). It includes every group where no pair
    narrower than the declared range can outscore it at all: each r_lo(c) and r_hi(c) lies in
    [-alpha n, (1 - alpha) n] (`end_ranks`), so a pair other than the two bounds scores at least
    M - max(alpha, 1 - alpha) n (`end_scores`), while the pair of bounds scores at most o;
    where max(alpha, 1 - alpha) n <= M - o a narrower pick is noise only. Public: a function of
    public or released values (the preview's words use it too).
    """
    return max(alpha, 1 - alpha) * rows <= SKIP_MARGINS * margin


def bound_score(scale: float) -> float:
    """o, the public score cap of the bound candidate of an interval end: b ln(BOUND_ODDS)."""
    return scale * math.log(BOUND_ODDS)


def cap_bounds(low: FloatArray, high: FloatArray, cap: float) -> tuple[FloatArray, FloatArray]:
    """The ends' scores with the lower bound's (as lo) and the upper bound's (as hi) capped."""
    low[0], high[-1] = min(low[0], cap), min(high[-1], cap)
    return low, high


def end_ranks(
    values: Values, candidates: FloatArray, alpha: float
) -> tuple[FloatArray, FloatArray]:
    """(r_lo, r_hi): #(x < c) - alpha n and #(x <= c) - alpha n for each candidate (values clamped).

    The signed ranks an end is judged by: lo is at or below the quantile when few enough values
    lie strictly below it (r_lo(lo) <= -2), hi at or above it when enough lie at or below it
    (r_hi(hi) >= 2), so a candidate tied with the quantile itself can be either end. One row
    added or removed moves #(x < c) and #(x <= c) by 0 or 1 and alpha n by alpha, so each r by
    at most max(alpha, 1 - alpha); one row replaced (n fixed), by at most 1.
    """
    below, up_to, n = ranks(values, candidates)
    target = alpha * n
    return (below - target).astype(np.float64), (up_to - target).astype(np.float64)


def quantile_shares(epsilon: float) -> tuple[float, float]:
    """(point, ends): POINT_SHARE of epsilon on the estimate, the rest on the interval's ends.

    Rounded so that point + ends <= epsilon exactly.
    """
    ends = float_at_most(Fraction(epsilon) * (1 - Fraction(str(POINT_SHARE))))
    return float_at_most(Fraction(epsilon) - Fraction(ends)), ends


def rank_sensitivity(alpha: float, neighbouring: str) -> float:
    """max(alpha, 1 - alpha) rows of rank per row (twice under replace-one): OpenDP's map / den."""
    return max(alpha, 1 - alpha) * (1 if neighbouring == "add-remove" else 2)


def rank_scale(alpha: float, epsilon: float, neighbouring: str) -> float:
    """The noise scale of one quantile selection in rows of rank: 2 Delta / epsilon."""
    return noise_scale(2 * rank_sensitivity(alpha, neighbouring), epsilon)


def end_scores(
    r_lo: FloatArray, r_hi: FloatArray, margin: float, cap: float
) -> tuple[FloatArray, FloatArray]:
    """The scores (lower is better) of each candidate as the low end and as the high end.

    A candidate c as lo covers the signed ranks from r_lo(c) to r_lo(c+), c+ the next candidate
    up (`end_ranks`); it scores the distance from its target -M to that span: max(0, r_lo(c) +
    M, -M - r_lo(c+)) (0 when the target lies in the span; the top candidate has no c+). As hi,
    the distance from +M to [r_hi(c-), r_hi(c)], c- the next candidate down. So the valid end
    nearest the target scores 0, a value tied across the target included (a whole-number
    median's interval can be that one number), and an end past it scores its rank distance. The
    lower bound's score as lo and the upper bound's as hi are capped at `cap` (`cap_bounds`).
    Each score is a max of a constant and of signed ranks moved by constants, so it moves by
    at most as much as the r do.
    """
    above = np.append(r_lo[1:], np.inf)
    below = np.insert(r_hi[:-1], 0, -np.inf)
    low = np.maximum(0.0, np.maximum(r_lo + margin, -margin - above))
    high = np.maximum(0.0, np.maximum(margin - r_hi, below - margin))
    return cap_bounds(low, high, cap)


def ends(
    values: Values,
    spec: NumericColumn,
    alpha: float,
    epsilon: float,
    neighbouring: str,
    rng: RandomSource,
) -> tuple[float, float]:
    """The ends (lo, hi) of a quantile's 95% interval, epsilon-DP, in one selection.

    Permute-and-flip picks a pair lo <= hi of the END_CANDIDATES public candidates
    (`candidates`) with score max(u_lo(lo), u_hi(hi)) (lower is better; `end_scores`): u_lo is
    the distance from the target rank offset -M to the span of ranks r_lo = #(x < c) - alpha n
    that lo covers (up to the next candidate; `end_ranks`; M from `quantile_rank_margin`), u_hi
    alike about +M with r_hi = #(x <= c) - alpha n; the lower bound's score as lo and the upper
    bound's as hi are capped at o = `bound_score` (the bounds are always valid ends). Measuring
    to the span lets the valid end next to a block of tied values (whole ages, many zeros)
    score 0, and judging lo by the values strictly below it and hi by those at or below it lets
    a value tied across the quantile be both ends (a median of whole numbers on a block of
    thousands of rows at one value gets that value as its interval, where a rank counting the
    ties on neither side pushed each end to the next value out).

    Privacy: each r moves by at most max(alpha, 1 - alpha) rows per row added or removed, and
    by at most 1 per row replaced within the group (`end_ranks`; `rank_sensitivity` doubles the
    former under replace-one, which covers both and a row moving between groups); the scores and
    a max of two of them move no more (`end_scores`), so this is epsilon-DP.

    Coverage: the pair of bounds scores at most o, so with probability >= 95% the pick scores at
    most o + m (m = b ln(P / 5%), P pairs, b the noise scale: a pair scoring t above the best wins
    only if its exponential noise exceeds t, probability e^(-t / b)), so r_lo(lo) + M <= u_lo(lo)
    <= o + m, i.e. r_lo(lo) <= -2, or lo is the lower bound. Likewise r_hi(hi) >= 2 or hi is the
    upper bound. With B = #(x < lo) <= alpha n - 2 < alpha (n - 1), at most floor(alpha (n - 1))
    values lie below lo, so lo <= the sorted value of that index <= the (interpolated) true
    quantile. Likewise #(x <= hi) >= alpha n + 2 puts hi at or above the next sorted value, so at
    or above it. Both hold at once with probability >= 95%, on any table, ties included.
    """
    grid = np.asarray(candidates(spec, END_CANDIDATES))
    margin = quantile_rank_margin(alpha, epsilon, neighbouring, grid.size)
    cap = bound_score(rank_scale(alpha, epsilon, neighbouring))
    r_lo, r_hi = end_ranks(clamped(values, spec), grid, alpha)
    low, high = end_scores(r_lo, r_hi, margin, cap)
    first, second = np.triu_indices(grid.size)
    scores = np.maximum(low[first], high[second])
    sensitivity = rank_sensitivity(alpha, neighbouring)
    index = permute_and_flip(-scores, epsilon=epsilon, sensitivity=sensitivity, rng=rng)
    return grid[first[index]], grid[second[index]]


def rank_offsets(values: Values, candidates: FloatArray, alpha: float) -> FloatArray:
    """s(c), the signed distance (in rows) from the target rank alpha n to [#(x < c), #(x <= c)].

    The ranks a candidate covers, ties at c included: s(c) = max(B - alpha n, alpha n - B - T)
    with B = #(x < c), T = #(x = c). Positive outside the span (how many rows of rank c misses
    the target by), negative inside it (minus the distance to the span's nearer end), so a
    quantile sitting on a block of tied values scores best, and the deeper the target lies in
    the block, the better: its neighbours trail it by their own distance plus that depth, where
    a distance floored at 0 (`rank_distances`) gave only the former. Without ties at c, s(c) =
    |#(x < c) - alpha n| up to the sign inside the span, OpenDP's score in rows; OpenDP counts
    the ties at c on neither side, i.e. the distance to the span's middle, so a heavy tie can
    score worse than its neighbour (the true median 3 of 10 values below it, 50 at it and 40
    above scores worse than 4 there, and -10 here).

    Sensitivity: a row added (n + 1) moves B - alpha n by 1 - alpha (if x < c) or -alpha, and
    alpha n - B - T by alpha - 1 (x <= c) or alpha; removed, the opposite. So each argument of
    the max, and s(c), moves by at most max(alpha, 1 - alpha): add/remove, the row lands in one
    group. Under replace-one (n fixed) B and B + T move by at most 1 each, within a group, or
    the row leaves one group and joins another (max(alpha, 1 - alpha) in each): at most 2
    max(alpha, 1 - alpha) per group either way, as `rank_sensitivity` states.
    """
    below, up_to, n = ranks(values, candidates)
    target = alpha * n
    offsets: FloatArray = np.maximum(below - target, target - up_to).astype(np.float64)
    return offsets


def rank_distances(values: Values, candidates: FloatArray, alpha: float) -> FloatArray:
    """d(c) = max(0, s(c)): how many rows of rank c misses alpha n by (0 inside its span).

    `rank_offsets` floored at 0, 0 when c is an alpha-quantile of the (clamped) values: the
    error measure of a released quantile (`promise`). It moves by at most what s(c) moves.
    """
    distances: FloatArray = np.maximum(0.0, rank_offsets(values, candidates, alpha))
    return distances


def select(
    values: Values,
    spec: NumericColumn,
    alpha: float,
    epsilon: float,
    neighbouring: str,
    rng: RandomSource,
    within: tuple[float, float] | None = None,
) -> float:
    """One epsilon-DP permute-and-flip quantile of one group's values.

    Among the CANDIDATES public candidates (`candidates`), or those of the released interval
    `within` = (lo, hi) when given (`inner`: a finer grid on it, lo and hi included), score -s(c)
    (`rank_offsets`, of the values clamped to the bounds). `within` must be public or already
    released (the interval's ends, picked first): the candidate set is then a function of
    released values (adaptive composition). Privacy: s moves by at most `rank_sensitivity` rows
    per neighbouring change, so the selection at that sensitivity is epsilon-DP
    (`permute_and_flip`). alpha is clipped to [0, 1]: 0 and 1 give the bounds (or the
    ends of `within`) without a draw, a choice made from public or already released values. The
    caller records the spend.
    """
    low, high = within if within is not None else (spec.lower, spec.upper)
    if alpha <= 0:
        return low
    if alpha >= 1:
        return high
    grid = np.asarray(candidates(spec, CANDIDATES) if within is None else inner(spec, low, high))
    scores = -rank_offsets(clamped(values, spec), grid, alpha)
    sensitivity = rank_sensitivity(alpha, neighbouring)
    index = permute_and_flip(scores, epsilon=epsilon, sensitivity=sensitivity, rng=rng)
    chosen: float = grid[index]
    return chosen
