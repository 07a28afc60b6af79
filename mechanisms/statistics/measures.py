"""The noise of the summary statistics' counts and sums, and its half-widths.

Counts: OpenDP's count maps; sums: the exact fixed-point sums' own grid and sensitivity
(`sum_grid`); both take OpenDP's discrete Laplace. Exact 95% half-widths.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import opendp.prelude as dp
from scipy import fft

from mechanisms.accounting import noise_scale
from mechanisms.accuracy import discrete_laplace_half_width
from mechanisms.arrays import FloatArray, IntArray
from mechanisms.noise import check_count_noise
from mechanisms.schema import NumericColumn

dp.enable_features("contrib")

LEVEL = 0.95
WORD_BITS = 61  # |floor(v 2^k)| <= 2^61 (`sum_exponent`): one wide sum, or two 31-bit limbs
MAX_GROUP_ROWS = 2**32  # rows a group may hold: its exact sums stay within 2^93 units
GRID_SHIFT = 32  # a sum takes its noise on S >> 32 (`sum_grid`)
LARGEST_SIZE = 2**31 - 1  # OpenDP's sized vector domains take a 32-bit size


@lru_cache(maxsize=1)
def _count() -> Any:
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    return dp.t.make_count(domain, dp.symmetric_distance())


def group_sensitivity(transformation: Any, neighbouring: str) -> float:
    """L1 (or per-group L-inf) change of a per-group vector of `transformation`'s outputs.

    add-remove: t.map(1) (the row lands in one group); replace-one: max(t.map(2), 2 t.map(1))
    (the row stays in its group, or leaves one and joins another).
    """
    one = float(transformation.map(1))
    return one if neighbouring == "add-remove" else max(float(transformation.map(2)), 2 * one)


@lru_cache(maxsize=64)
def _present_count(size: int) -> Any:
    """OpenDP: the sum of n 0/1 indicators (is the value present?) on vectors of n rows."""
    domain = dp.vector_domain(dp.atom_domain(T=int), size=size)
    return dp.t.make_clamp(domain, dp.symmetric_distance(), bounds=(0, 1)) >> dp.t.then_sum()  # type: ignore[no-untyped-call]


def count_scale(epsilon: float, neighbouring: str, public_n: int | None = None) -> float:
    """Discrete Laplace scale of the per-group counts: OpenDP's count map / epsilon.

    With `public_n` (replace-one without groups), of the count of present values in n rows:
    OpenDP's sized map(2) of the sum of their 0/1 indicators, 1 (replacing one row turns at
    most one value present or missing).
    """
    sensitivity = count_sensitivity(neighbouring, public_n)
    return check_count_noise(noise_scale(sensitivity, epsilon), epsilon)


@lru_cache(maxsize=256)
def count_sensitivity(neighbouring: str, public_n: int | None = None) -> float:
    """The per-group counts' sensitivity (`count_scale`): OpenDP's maps (cached: public).

    OpenDP's sized vectors hold at most 2^31 - 1 rows (a 32-bit size): a larger public n is
    asked at that size. The map is the same at every size (replacing one row turns at most one
    indicator), 1.0 from one row to 2^31 - 1 (tests/mechanisms/test_planner.py).
    """
    if public_n is not None:
        return float(_present_count(min(public_n, LARGEST_SIZE)).map(2))
    return group_sensitivity(_count(), neighbouring)


def sum_exponent(low: float, high: float) -> int:
    """k such that |v| 2^k <= 2^61 for every v in [low, high] (0 when both are 0).

    The fixed point of the exact sums (`mechanisms.statistics.aggregates`): each clamped value
    is read as floor(v 2^k) 2^-k, within 2^-k below v.
    """
    bound = max(abs(low), abs(high))
    if bound == 0:
        return 0
    return WORD_BITS - math.frexp(bound)[1]  # bound < 2^e


@dataclass(frozen=True)
class SumGrid:
    """Where a per-group exact sum takes its noise: whole multiples of `unit`, 2^(shift - k).

    A group's exact sum over [low, high] is the whole number S in units of 2^-k (`aggregates`,
    `sum_exponent`). Its grid sum S >> shift (floored) takes discrete Laplace noise K of scale
    `units` / epsilon (OpenDP's integer measurement), and the release is (S >> shift + K)
    `unit`, rounded once to a float: post-processing of an integer mechanism, so no float
    rounding of the sum or of the noise enters the privacy argument (Laplace noise added to a
    float sum needs an allowance for both).

    Privacy: epsilon-DP when `units` bounds the L1 change of the per-group grid sums between
    neighbours (`sum_grid` proves it). Accuracy: E|K unit| = unit / sinh(unit / b) < b for the
    scale b = `units` `unit` / epsilon, below a Laplace of scale b; the 95% half-width is exact
    (`halfwidth`).
    """

    exponent: int  # k
    shift: int
    units: int  # the sensitivity, in units of `unit`

    @property
    def unit(self) -> float:
        return math.ldexp(1.0, self.shift - self.exponent)

    @property
    def sensitivity(self) -> float:
        """The sensitivity in the column's unit: `units` `unit`."""
        return self.units * self.unit

    def grid_scale(self, epsilon: float) -> float:
        """The discrete Laplace scale, in units of `unit`: units / epsilon, rounded up."""
        return check_count_noise(noise_scale(self.units, epsilon), epsilon)

    def scale(self, epsilon: float) -> float:
        """The noise scale in the column's unit."""
        return self.grid_scale(epsilon) * self.unit

    def halfwidth(self, epsilon: float, level: float = LEVEL) -> float:
        """The exact half-width of the noise at `level` (discrete Laplace, in the column's unit)."""
        return discrete_laplace_halfwidth(self.grid_scale(epsilon), level) * self.unit

    def term(self, weight: float, epsilon: float) -> tuple[float, float]:
        """The noise times `weight`, as a term of `linear_halfwidth`."""
        return (weight * self.unit, self.grid_scale(epsilon))

    def on_grid(self, exact: Sequence[int]) -> IntArray:
        """Each exact sum S (units of 2^-k) floored to the grid: S >> shift."""
        return np.array([s >> self.shift for s in exact], dtype=np.int64)

    def values(self, grid_sums: IntArray) -> FloatArray:
        """Grid sums (noisy) in the column's unit.

        Each is rounded once to a float, then scaled by a power of two (exact).
        """
        exact: FloatArray = np.ldexp(
            np.asarray(grid_sums, dtype=np.float64), self.shift - self.exponent
        )
        return exact


def sum_grid(
    low: float, high: float, neighbouring: str, public_n: int | None, missing: bool = False
) -> SumGrid:
    """The grid and sensitivity of the per-group exact sums over [low, high] (`SumGrid`).

    Each row's term is floor(v 2^k) for v clamped to [low, high] (`aggregates`), a whole
    number in [a, b] = [floor(low 2^k), floor(high 2^k)] (scaling by 2^k is exact and floor
    monotone); a missing value adds 0. A change d of S moves S >> shift by at most
    ceil(|d| / 2^shift) (floor((S + d) / m) - floor(S / m) lies between floor(d / m) and
    ceil(d / m)). So the grid sums move, in L1 over the groups, by at most:

    - a row added or removed (add-remove): ceil(max(|a|, |b|) / 2^shift), in its one group;
    - a row replaced, with groups: twice that (it leaves one group and joins another, or its
      value moves by at most b - a <= 2 max(|a|, |b|) in one);
    - a row replaced without groups (`public_n`, the public row count): ceil((b - a) /
      2^shift), on [min(a, 0), max(b, 0)] where values may be missing (`missing`: a value
      turned missing adds 0).

    The shift, GRID_SHIFT = 32, keeps |S >> 32| <= 2^61 for the MAX_GROUP_ROWS rows a group
    may hold (each |term| <= 2^61), inside the integer noise's range, and the sensitivity at
    most 2^30 units, so the scale fits it for epsilon down to about 10^-8. The rounding to the
    grid costs at most one unit of sensitivity, 2^-28 of max(|low|, |high|) (OpenDP's map of
    its float sum allows 2^-26.7 for its rounding).
    """
    k = sum_exponent(low, high)
    a, b = math.floor(math.ldexp(low, k)), math.floor(math.ldexp(high, k))
    if public_n is not None:
        if missing:
            a, b = min(a, 0), max(b, 0)
        return SumGrid(k, GRID_SHIFT, -(-(b - a) >> GRID_SHIFT))
    moved = 1 if neighbouring == "add-remove" else 2
    return SumGrid(k, GRID_SHIFT, moved * -(-max(abs(a), abs(b)) >> GRID_SHIFT))


def discrete_laplace_halfwidth(scale: float, level: float = LEVEL) -> float:
    """Smallest k with P(|E| <= k) >= level for discrete Laplace E of `scale` (exact).

    The noisy counts' own rule (`mechanisms.accuracy.discrete_laplace_half_width`, OpenDP's
    accuracy helper), which keeps its digits at a sum grid's scales (10^9 and more).
    """
    return float(discrete_laplace_half_width(scale, level))


def linear_halfwidth(terms: Sequence[tuple[float, float]], level: float = LEVEL) -> float:
    """The half-width z with P(|sum a_i E_i| <= z) ~ level.

    The E_i are independent discrete Laplace variables with the given scales; terms are (a_i,
    scale_i).

    Computed by convolving the exact distributions on a grid of 2^12 points over +-30 total
    scales: the half-width is off by at most one grid step, 1.5% of the total scale.
    """
    terms = [(abs(a), s) for a, s in terms if a != 0 and s > 0]
    if not terms:
        return 0.0
    if len(terms) == 1:
        a, s = terms[0]
        return a * discrete_laplace_halfwidth(s, level)
    span = 30 * sum(a * s for a, s in terms)
    points = 2**12 + 1
    grid = np.linspace(-span, span, points)
    step = grid[1] - grid[0]
    density: FloatArray | None = None
    for a, s in terms:
        mass = _term_mass(grid, step, a, s)
        density = mass if density is None else _convolve_same(density, mass)
    assert density is not None
    density = np.clip(density, 0, None)
    density /= density.sum()
    centre = points // 2
    inside = density[centre] + np.cumsum(density[centre + 1 :] + density[centre - 1 :: -1])
    # grid[centre + j] holds the mass within (j - 1/2, j + 1/2] steps of 0
    index = int(np.searchsorted(inside, level))
    return float((index + 1.5) * step)


def _term_mass(grid: FloatArray, step: float, a: float, s: float) -> FloatArray:
    """The mass of a E on each grid point's bin (x - step / 2, x + step / 2].

    E is discrete Laplace of scale s. From E's distribution function at the bins' edges,
    P(E <= j) = 1 - e^(-(j + 1) / s) / (1 + e^(-1 / s)) for j >= 0, else e^(j / s) / (1 +
    e^(-1 / s)): a scale of any size, however many of E's values share a bin, costs one pass
    over the grid.
    """
    edges = np.concatenate([grid - step / 2, [grid[-1] + step / 2]])
    j = np.floor(edges / a)
    spread = 1 + math.exp(-1.0 / s)
    above = 1 - np.exp(-(np.maximum(j, 0) + 1) / s) / spread
    cdf = np.where(j >= 0, above, np.exp(np.minimum(j, 0) / s) / spread)
    mass: FloatArray = np.diff(cdf)
    return mass


def _convolve_same(x: FloatArray, y: FloatArray) -> FloatArray:
    """The centre len(x) points of the full convolution of two equal-length arrays.

    As scipy.signal.fftconvolve(x, y, mode="same") computes it (the same real FFTs on the
    same padded length), without its per-call checks.
    """
    full = 2 * len(x) - 1
    size = fft.next_fast_len(full, True)
    out: FloatArray = fft.irfft(fft.rfft(x, size) * fft.rfft(y, size), size)
    start = (full - len(x)) // 2
    return out[start : start + len(x)]


def centre(spec: NumericColumn) -> tuple[float, float]:
    """(c, r): the midpoint of the bounds and the half-width, so values lie in [c - r, c + r].

    Variances and means sum x - c over [-r, r]. For a mean over a noisy count that sum moves by
    at most r per row (`sum_grid`), the least of any centre c' (max(c' - lower, upper - c') >=
    r), and its error is about (E_S - (m - c) E_N) / n, m the true mean, whose spread at equal
    budgets goes as r^2 + (m - c)^2 <= 2 r^2. OpenDP's pipeline sums x itself: its sum's
    sensitivity S_0 (its map) is upper - lower = 2r for bounds around 0 and max(|lower|,
    |upper|) otherwise, its spread S_0^2 + m^2. Around 0 that is at least 4 r^2; with 0 < lower
    at least upper^2 + lower^2 >= (upper - lower)^2 / 2 = 2 r^2 (mirrored below 0). So the
    mean's spread is at most OpenDP's for every true mean in the bounds. Public: the schema's.
    """
    return (spec.lower + spec.upper) / 2, (spec.upper - spec.lower) / 2


def laplace_abs_error(mu: FloatArray, b: FloatArray | float) -> FloatArray:
    """E|mu + L| for L Laplace of scale b (elementwise): |mu| + b exp(-|mu| / b)."""
    distance = np.abs(mu)
    return np.asarray(distance + b * np.exp(-distance / b), dtype=np.float64)


def _excess(d: FloatArray, b: FloatArray) -> FloatArray:
    """E max(d + L, 0) for L Laplace of scale b: max(d, 0) + (b / 2) exp(-|d| / b)."""
    return np.asarray(np.maximum(d, 0) + b / 2 * np.exp(-np.abs(d) / b), dtype=np.float64)


def clipped_laplace_error(
    mu: FloatArray, b: FloatArray, target: float, low: float, high: float
) -> FloatArray:
    """E|clip(mu + L, low, high) - target| for L Laplace of scale b, target in [low, high].

    |clip(y) - t| = |y - t| - max(y - high, 0) - max(low - y, 0) for t in [low, high], and
    each term has a closed form (`laplace_abs_error`, `_excess`): exact, no quadrature.
    """
    spread = laplace_abs_error(mu - target, b)
    return np.asarray(spread - _excess(mu - high, b) - _excess(low - mu, b), dtype=np.float64)


def discrete_laplace_support(scale: float, tail: float = 40.0) -> tuple[IntArray, FloatArray]:
    """(k, P(K = k)) for discrete Laplace K of `scale`, |k| <= ceil(tail scale) + 1.

    P(K = k) = (1 - a) / (1 + a) a^|k|, a = exp(-1 / scale); the mass left out,
    2 a^(reach + 1) / (1 + a), is below 2 exp(-tail) (1e-17 at the default).
    """
    a = math.exp(-1.0 / scale)
    reach = math.ceil(tail * scale) + 1
    ks = np.arange(-reach, reach + 1)
    return ks, (1 - a) / (1 + a) * a ** np.abs(ks).astype(np.float64)


def mean_expected_error(
    centred_sum: float,
    n: int,
    target: float,
    bounds: tuple[float, float],
    sum_scale: float,
    count_scale: float,
    threshold: float,
) -> tuple[float, float]:
    """(E|estimate - mean| over the releases that publish it, P(published)) of `Computer.mean`.

    Exactly the estimator `Computer.mean` releases when the number of values is not public:
    clip((S + L) / N, low, high) around its centre c, S the group's exact sum of x - c
    (`centred_sum`) over `bounds` = [-r, r] (`centre`), L the sum's noise of `sum_scale`, N =
    n + K, K discrete Laplace of `count_scale`, published only where N is above `threshold`
    (`support.threshold` of that scale: `support.publishable`); `target` is the true mean
    minus c. Summed over K's pmf (`discrete_laplace_support`: the mass left out is below
    1e-17) with L's closed form (`clipped_laplace_error`), L taken as a Laplace: it is a
    discrete Laplace on a grid at least 2^28 / epsilon times finer than its scale (`SumGrid`),
    whose expected errors differ from the Laplace's by a share of about (unit / scale)^2 / 6,
    below 10^-16. An accuracy statement only: no data is released.
    """
    ks, chances = discrete_laplace_support(count_scale)
    counts = n + ks
    shown = counts > threshold
    counts, chances = counts[shown].astype(np.float64), chances[shown]
    published = float(chances.sum())
    if published == 0.0:
        return math.nan, 0.0
    low, high = bounds
    errors = clipped_laplace_error(centred_sum / counts, sum_scale / counts, target, low, high)
    return float(chances @ errors / published), published
