"""Margins of error: 95% intervals for released counts, and the epsilon that reaches a target.

Everything here is a function of public quantities (noise scales, the public row count, the
mixing weight, the released values): post-processing, no privacy cost, no data.

- Noisy counts (perturbed histogram cells, MWEM measurements) carry discrete Laplace noise
  P(k) ∝ exp(-|k|/scale). Their interval is noisy ± k with k the smallest whole number such that
  P(|Z| <= k) >= confidence, from OpenDP's `discrete_laplacian_scale_to_accuracy` (floored, as
  its documentation allows). Being discrete, it is conservative: its exact coverage lies in
  [confidence, confidence + P(|Z| = k)], within 0.5 percentage points of 95% once the scale is
  10 or more (P(|Z| = k) is about 0.05 / scale).
- Smoothed-histogram counts are not noisy counts: they are how many of the `rows` synthetic rows
  fell in each cell, a Multinomial(rows, (1 - mix)·h + mix/m) draw, h the real cell shares.
  Their interval is about the *real* count n·h of the cell: a Wilson score interval for the
  cell's sampling probability, mapped through the public mixture back to n·h (n and mix are
  public for this mechanism). It covers the sampling variation of the synthetic rows only, and
  is approximate (Wilson), closest to 95% for cells with 10 or more synthetic rows.
- `binomial_tail_half_width`: the smoothed histogram's half-width for the hardest even spread
  of its rows, which the planner (`mechanisms.planner`) promises.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import opendp.prelude as dp
from scipy import special

from mechanisms.arrays import FloatArray, IntArray
from mechanisms.errors import MechanismError


class NoisePlan(Protocol):
    """What this module reads of a `mechanisms.plans.NoisePlan`.

    A protocol, not an import: plans imports the mechanisms, which import this module.
    """

    noise: str
    scale: float | None
    expected_error: float | None
    support: int
    details: dict[str, Any]


CONFIDENCE = 0.95
ZERO_LEVEL = 0.001  # a count whose true value is 0 is told from 0 in at most 0.1% of releases


def _check_confidence(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise MechanismError(f"confidence ({confidence}) must be between 0 and 1")
    return float(confidence)


def discrete_laplace_half_width(scale: float, confidence: float = CONFIDENCE) -> int:
    """Smallest k with P(|Z| <= k) >= confidence for Z discrete Laplace of `scale` (0: k = 0).

    OpenDP's accuracy a satisfies P(|Z| >= a) = 1 - confidence; P(|Z| >= a) = P(|Z| > floor(a)).
    At scales so small that P(Z = 0) rounds to 1 (about 0.001 and below, epsilon in the
    thousands) OpenDP gives a = -inf: k = 0 there, as for any a below 1.
    """
    confidence = _check_confidence(confidence)
    if scale <= 0:
        return 0
    accuracy = dp.discrete_laplacian_scale_to_accuracy(float(scale), 1.0 - confidence)
    if accuracy < 1:  # -inf included
        return 0
    return int(math.floor(accuracy))


def zero_threshold(scale: float, terms: int = 1, level: float = ZERO_LEVEL) -> float:
    """The one-sided (1 - level) quantile of the noise of a sum of `terms` noisy counts.

    Each count has discrete Laplace noise of `scale`. One count: the exact quantile (P(Z > k) <=
    level). A sum of several: the normal approximation of their sum (the noises are
    independent; m counts of variance 2p/(1-p)^2, p = exp(-1/scale)). No noise (epsilon = inf,
    scale 0): 0, so only a count of 0 is not told from zero.
    """
    if scale <= 0:
        return 0.0
    if terms == 1:
        return float(discrete_laplace_half_width(scale, 1 - 2 * level))
    p = math.exp(-1 / scale)
    spread = math.sqrt(terms * 2 * p) / (1 - p)
    return float(special.ndtri(1 - level)) * spread


def told_from_zero(noisy: Any, scale: float, terms: int = 1, level: float = ZERO_LEVEL) -> Any:
    """Whether a noisy count is told from 0: the rule for cells and groups data may not hold.

    True where the noisy count (a sum of `terms` noisy counts of discrete Laplace `scale`) is
    above `zero_threshold`: had the true count been 0, it would be so with probability at most
    `level` (per count). MWEM and the histograms keep a "(missing)" or "(other)" cell only
    where this holds (`mwem.structural`); the summary statistics publish a group's estimates
    only where it holds for the group's noisy count (`statistics.support`).

    Privacy: post-processing of released noisy counts and public scales only; spends nothing.
    """
    return np.asarray(noisy, dtype=float) > zero_threshold(scale, terms, level)


def count_intervals(
    noisy: IntArray, scale: float, confidence: float = CONFIDENCE
) -> tuple[IntArray, IntArray]:
    """(lower, upper) = noisy ∓ k, k = `discrete_laplace_half_width(scale, confidence)`.

    Covers the true count with probability at least `confidence` for each count on its own;
    not clipped at zero (a clipped interval would cover less when the count is 0).
    """
    values = np.asarray(noisy, dtype=np.int64)
    k = discrete_laplace_half_width(scale, confidence)
    return values - k, values + k


def _wilson(successes: FloatArray, trials: int, z: float) -> tuple[FloatArray, FloatArray]:
    """Wilson score interval for a binomial proportion, elementwise."""
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    spread = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    spread = spread / (1 + z * z / trials)
    return np.clip(centre - spread, 0.0, 1.0), np.clip(centre + spread, 0.0, 1.0)


def smoothed_intervals(
    synthetic_counts: IntArray,
    *,
    rows: int,
    mix: float,
    n: int,
    cells: int | None = None,
    confidence: float = CONFIDENCE,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(estimate, lower, upper) of each cell's real count, from the smoothed histogram's rows.

    The synthetic count of a cell is Binomial(rows, q), q = (1 - mix)·c/n + mix/m with c the
    real count and m the number of cells (`cells`, default: all the counts given).
    c = n·(q - mix/m)/(1 - mix) is estimated from q̂ = count/rows, and the Wilson interval
    for q is mapped the same way, then clipped to [0, n]. It accounts for the sampling of
    the synthetic rows only (the smoothed histogram adds no other noise). mix = 1 carries no
    information: the interval is [0, n].
    """
    confidence = _check_confidence(confidence)
    counts = np.asarray(synthetic_counts, dtype=np.float64)
    m = counts.size if cells is None else int(cells)
    if rows <= 0 or mix >= 1:
        full = np.full(counts.shape, float(n))
        return np.full(counts.shape, n / max(m, 1)), np.zeros(counts.shape), full
    z = float(special.ndtri(0.5 + confidence / 2))
    low_q, high_q = _wilson(counts, rows, z)

    def real(q: FloatArray) -> FloatArray:
        result: FloatArray = np.clip(n * (q - mix / m) / (1 - mix), 0.0, float(n))
        return result

    return real(counts / rows), real(low_q), real(high_q)


def binomial_half_width(trials: int, p: float, confidence: float = CONFIDENCE) -> float:
    """Smallest d with P(|X - trials·p| <= d) >= confidence for X ~ Binomial(trials, p), exact.

    The smoothed histogram's synthetic count of a cell is such an X; its estimate of the real
    count moves by n / (rows·(1 - mix)) per synthetic row (`smoothed_intervals`).
    """
    from scipy import stats  # here: importing scipy.stats takes half a second

    confidence = _check_confidence(confidence)
    values = np.arange(trials + 1)
    distance = np.abs(values - trials * p)
    order = np.argsort(distance, kind="stable")
    reached = np.cumsum(stats.binom.pmf(values[order], trials, p)) >= confidence
    return float(distance[order][int(np.argmax(reached))])


def binomial_tail_half_width(rows: int, mix: float, cells: int, confidence: float) -> float:
    """Smallest d with at most 1 - confidence of the cells' counts straying more than d, for all K.

    The smoothed histogram's synthetic count of a cell is Binomial(rows, q). For a table whose
    rows fill K of the `cells` cells equally, q = (1 - mix) / K + mix / cells in those and mix /
    cells in the others; the expected share of cells whose count strays more than d from
    rows·q is exact (binomial tails). d is the smallest (to 1e-3 rows) keeping that share at
    most 1 - confidence for every K from 1 to `cells` (all K up to 64, then 400 spread
    geometrically).
    """
    from scipy import stats  # here: importing scipy.stats takes half a second

    confidence = _check_confidence(confidence)
    spread = {round(k) for k in np.geomspace(1, cells, 400)} if cells > 64 else set()
    full = np.array(sorted(spread | set(range(1, min(cells, 64) + 1))), dtype=float)
    q_full, q_empty = (1 - mix) / full + mix / cells, mix / cells

    def strays(q: FloatArray, d: float) -> FloatArray:
        mean = rows * q
        below = stats.binom.cdf(np.ceil(mean - d - 1e-9) - 1, rows, q)
        above = stats.binom.sf(np.floor(mean + d + 1e-9), rows, q)
        share: FloatArray = np.asarray(below + above, dtype=np.float64)
        return share

    def worst(d: float) -> float:
        empty = strays(np.array([q_empty]), d)[0]
        return float(np.max((full * strays(q_full, d) + (cells - full) * empty) / cells))

    low, high = 0.0, float(rows)
    if worst(low) <= 1 - confidence:
        return 0.0
    while high - low > 1e-3:
        middle = (low + high) / 2
        low, high = (low, middle) if worst(middle) <= 1 - confidence else (middle, high)
    return high


def normal_half_width(std: float, confidence: float = CONFIDENCE) -> float:
    """z·std: the half-width of a normal approximation (sums of many noise terms)."""
    return float(special.ndtri(0.5 + _check_confidence(confidence) / 2)) * float(std)


def plan_half_width(plan: NoisePlan, n: int, confidence: float = CONFIDENCE) -> float | None:
    """Half-width, in rows, of the interval of one typical output of a public noise plan.

    Discrete Laplace on each output: its exact quantile. The smoothed histogram's sampling:
    how far its estimate of the real count of a cell holding an average share 1/m of the rows
    strays, at `confidence`, exactly (`binomial_half_width`; n public). Otherwise (sums of
    noise terms, Gaussian noise): z·(the plan's standard deviation). A plan that states its own
    95% half-width (details["noise_95"]: range counts, whose answers are sums of many noise
    terms with a known kurtosis) is taken at its word at that confidence. None without a
    figure.
    """
    stated = plan.details.get("noise_95")
    if stated is not None and confidence == CONFIDENCE:
        return float(stated)
    if plan.noise == "discrete Laplace" and plan.scale is not None:
        return float(discrete_laplace_half_width(plan.scale, confidence))
    if plan.noise == "sampling":
        rows, mix, m = int(plan.details["rows"]), float(plan.details["mix"]), plan.support
        if mix >= 1 or rows <= 0:
            return float(n)
        spread = binomial_half_width(rows, 1.0 / m, confidence)
        return n * spread / (rows * (1 - mix))
    if plan.expected_error is None:
        return None
    return normal_half_width(plan.expected_error, confidence)


def discrete_laplace_std(scale: float) -> float:
    """Standard deviation of the discrete Laplace noise P(k) ∝ exp(-|k|/scale)."""
    if scale <= 0:
        return 0.0
    alpha = math.exp(-1.0 / scale)
    return math.sqrt(2.0 * alpha) / -math.expm1(-1.0 / scale)  # 1 - alpha, also at huge scales
