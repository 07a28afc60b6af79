"""Summary statistics: counts, sums, means, variances, standard deviations and quantiles by group.

A request names statistics as ``kind:column`` (``count``, ``sum:income``, ``mean:income``,
``variance:age``, ``std:age``, ``median:age``, ``q25:age`` for the 25th percentile), optionally
grouped by one or two categorical columns (``by``). The groups are every combination of the
declared categories (plus "(other)" where declared), never discovered from the data: an empty
group gets noisy outputs like any other. The budget is split across the statistics, evenly or
by `weights` (one positive number per statistic); each statistic's share is spent on every group
at once (the groups are disjoint, so one row touches at most two of them, see below).

Building blocks are OpenDP's (https://docs.opendp.org): its clamp + bounded-sum and count
transformations give the exact aggregate and, through their stability maps, the sensitivity
(including OpenDP's allowance for floating-point summation); its
`make_quantile_score_candidates` scores a public grid of candidates for the exponential
mechanism. All noise comes from `mechanisms.noise` (OpenDP's samplers on the secure source):
integer discrete Laplace for counts, Laplace for sums (added inside OpenDP's measurement), and
report-noisy-max with Gumbel noise for the exponential mechanism.

Sensitivity across groups. A transformation t on one group has stability t.map(d) for d rows
added or removed in that group. Under add/remove one row lands in one group: the per-group
vector moves by t.map(1) in L1. Under replace-one a row either stays in its group (d = 2 in the
symmetric distance) or moves between two groups (d = 1 in each): the vector moves by at most
max(t.map(2), 2 t.map(1)). Without grouping under replace-one the row count n is public, so
sums use OpenDP's sized-domain bound (t.map(2) on vectors of n values, about upper - lower) and
the count is released exactly without spending anything.

Values are clamped to the schema's [lower, upper]; the "true value" each interval is for is the
statistic of the clamped values. Sums, means and variances work on values centred at the
bounds' midpoint c (sums of x - c), which keeps the count's noise from inflating the mean's.

Intervals (95%, every released number has one; computed from released values and public noise
scales only, so they are post-processing):
- count, sum, and the mean when n is public: exact, from the noise distribution itself;
- mean and variance from noisy sums over a noisy count: the exact noise distribution of the
  first-order (linearised) error, with plug-in coefficients; approximate, close to 95% once a
  group holds many more rows than the count's noise scale. A group whose noisy count is not
  clearly positive gets the whole range [lower, upper] (or [0, max variance]);
- quantiles: at least 95% on every table: the estimate gets POINT_SHARE (95%) of the
  statistic's epsilon; the two ends of the interval are one further exponential-mechanism pick
  among pairs of candidates with the remaining 5%, each end scored by its distance to a rank
  offset M (rows, public: the mechanism's own 95% rank-error bound at that epsilon), not by a
  fraction of n, so no count is needed; the proof is in `Computer.ends`. The small share makes
  the ends wide (M is large) but keeps the estimate almost as accurate as one selection at the
  whole epsilon.

Quantile candidates are public round numbers (`candidates`): the multiples of the finest step
of 1, 2 or 5 times a power of ten, no finer than the column's declared precision, that leaves
at most CANDIDATES of them (END_CANDIDATES for the interval's ends), and the bounds. Values
recorded at a round precision are candidates themselves, so a quantile on tied values (many
zeros, whole ages) can be picked exactly.

Missing values: a column declared `"missing": "cell"` may hold them; they are left out of its
statistics, which are computed over the present values. How many values are present is then
not public under either relation, so means and variances divide by a noisy count of present
values (OpenDP's count over those rows), and under replace-one, where one row may turn from
present to missing, each sensitivity allows for that (`sum_transformation`, `noisy_counts`).
The manifest (`missing_values_left_out`) and the portal say which columns this concerns.
Grouping columns may have a "(missing)" cell: it is one more declared group.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
import opendp.prelude as dp
import pandas as pd
from scipy.signal import fftconvolve

from mechanisms.accounting import float_at_most, noise_scale
from mechanisms.arrays import FloatArray, IntArray
from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource, check_count_noise, exponential_mechanism
from mechanisms.plans import NoisePlan
from mechanisms.release import Progress, ReleaseOutput, csv_bytes
from mechanisms.schema import CategoricalColumn, NumericColumn, Schema

dp.enable_features("contrib")

KINDS = ("count", "sum", "mean", "variance", "std", "median", "quantile")
LEVEL = 0.95
CANDIDATES = 1025  # at most this many public candidates for a quantile's estimate
END_CANDIDATES = 129  # at most this many for each end of its interval (a coarser grid)
POINT_SHARE = 0.95  # a quantile's share of its epsilon spent on the estimate (the rest: interval)
BOUND_ODDS = 10.0  # the bound candidate of an interval end scores b ln(BOUND_ODDS) at worst
MAX_GROUPS = 10_000
MAX_STATISTICS = 50
FILES = {
    "statistics.csv": "one row per statistic and group: the estimate, its 95% interval "
    "(ci_lower, ci_upper), the main noise scale and the epsilon spent on it; missing values "
    "are left out of a column's statistics (the manifest lists the columns that may hold them)",
}
TABLE_COLUMNS = (
    "statistic",
    "column",
    "estimate",
    "ci_lower",
    "ci_upper",
    "noise_scale",
    "epsilon",
)
_PERCENTILE = re.compile(r"^q(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class Statistic:
    """One requested statistic: its kind, its numeric column (None for a row count), alpha."""

    kind: str
    column: str | None
    alpha: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "quantile":
            return "median" if self.alpha == 0.5 else f"q{100 * (self.alpha or 0):g}"
        return self.kind

    @property
    def text(self) -> str:
        return self.label if self.column is None else f"{self.label}:{self.column}"


def parse_statistic(text: str, schema: Schema) -> Statistic:
    """`kind:column` as a Statistic, checked against the schema (numeric columns only)."""
    kind, _, column = str(text).strip().partition(":")
    kind, column = kind.strip().lower(), column.strip()
    alpha = None
    if kind == "median":
        kind, alpha = "quantile", 0.5
    elif match := _PERCENTILE.match(kind):
        kind, alpha = "quantile", float(match.group(1)) / 100
        if not 0 < alpha < 1:
            raise MechanismError(f"statistic ({text!r}): the percentile must be between 0 and 100")
    if kind not in KINDS:
        raise MechanismError(
            f"statistic ({text!r}) is unknown; write kind:column with kind one of count, sum, "
            "mean, variance, std, median or qNN (the NN-th percentile, e.g. q25)"
        )
    if kind == "count":
        return Statistic("count", None)
    if not column:
        raise MechanismError(f"statistic ({text!r}) needs a column: write {kind}:column")
    spec = schema.column(column)
    if not isinstance(spec, NumericColumn):
        raise MechanismError(
            f"statistic ({text!r}): column {column!r} is categorical; {kind} needs a numeric one"
        )
    return Statistic(kind, column, alpha)


@dataclass(frozen=True)
class Request:
    """A checked request: statistics, grouping columns, each statistic's epsilon, the groups."""

    statistics: tuple[Statistic, ...]
    by: tuple[str, ...]
    shares: tuple[float, ...]
    groups: tuple[tuple[str, ...], ...]

    def needed_columns(self) -> list[str]:
        numeric = [s.column for s in self.statistics if s.column is not None]
        return list(dict.fromkeys([*numeric, *self.by]))


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in re.split(r"[,\n]", value) if v.strip()]
    return list(value)


def parse_request(
    schema: Schema, params: dict[str, Any], *, epsilon: float, neighbouring: str
) -> Request:
    """The request in `params` ("stat", "by", "weights"), checked, with the budget split.

    Each statistic's share is epsilon * weight / sum(weights), rounded down to a float (so the
    shares add up to at most epsilon, exactly). Under replace-one without grouping the count is
    public and gets no share.
    """
    texts = _as_list(params.get("stat"))
    if not texts:
        raise MechanismError("statistics: name at least one, e.g. --stat mean:income")
    if len(texts) > MAX_STATISTICS:
        raise MechanismError(f"statistics ({len(texts)}): ask for at most {MAX_STATISTICS}")
    stats = tuple(parse_statistic(t, schema) for t in texts)
    if len(set(stats)) != len(stats):
        raise MechanismError("statistics: each may be asked for only once")
    by = tuple(str(b).strip() for b in _as_list(params.get("by")))
    if len(by) > 2 or len(set(by)) != len(by):
        raise MechanismError(f"by ({list(by)!r}): group by at most two different columns")
    for name in by:
        if not isinstance(schema.column(name), CategoricalColumn):
            raise MechanismError(f"by: column {name!r} is numeric; group by categorical columns")
    groups = _group_labels(schema, by)
    free = [s.kind == "count" and not by and neighbouring == "replace-one" for s in stats]
    weights = _weights(params.get("weights"), len(stats))
    paid = sum((Fraction(w) for w, f in zip(weights, free, strict=True) if not f), Fraction(0))
    shares = tuple(
        0.0 if f else float_at_most(Fraction(epsilon) * Fraction(w) / paid)
        for w, f in zip(weights, free, strict=True)
    )
    return Request(stats, by, shares, groups)


def _weights(value: Any, count: int) -> list[float]:
    raw = _as_list(value)
    if not raw:
        return [1.0] * count
    try:
        weights = [float(w) for w in raw]
    except (TypeError, ValueError):
        raise MechanismError(f"weights ({raw!r}) must be numbers") from None
    if len(weights) != count or not all(math.isfinite(w) and w > 0 for w in weights):
        raise MechanismError(
            f"weights ({raw!r}) must be {count} positive numbers, one per statistic"
        )
    return weights


def _group_labels(schema: Schema, by: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    labels = [schema.axis_labels(name) for name in by]
    size = math.prod(len(x) for x in labels)
    if size > MAX_GROUPS:
        raise MechanismError(f"by {list(by)} makes {size} groups; use at most {MAX_GROUPS}")
    return tuple(tuple(str(v) for v in combo) for combo in _product(labels))


def _product(labels: list[list[str]]) -> list[tuple[str, ...]]:
    combos: list[tuple[str, ...]] = [()]
    for axis in labels:
        combos = [c + (v,) for c in combos for v in axis]
    return combos


# ---------------------------------------------------------------- OpenDP building blocks


def _domain(size: int | None = None) -> Any:
    atom = dp.atom_domain(T=float, nan=False)
    return dp.vector_domain(atom) if size is None else dp.vector_domain(atom, size=size)


@lru_cache(maxsize=256)
def _bounded_sum(low: float, high: float, size: int | None = None) -> Any:
    """OpenDP: clamp to [low, high], then sum (sized when `size` is the public row count)."""
    metric = dp.symmetric_distance()
    return dp.t.make_clamp(_domain(size), metric, bounds=(low, high)) >> dp.t.then_sum()  # type: ignore[no-untyped-call]


@lru_cache(maxsize=1)
def _count() -> Any:
    return dp.t.make_count(_domain(), dp.symmetric_distance())


@lru_cache(maxsize=256)
def _quantile_scores(grid: tuple[float, ...], alpha: float) -> Any:
    """OpenDP: clamp to the grid's ends (the bounds), score its candidates (lower: better)."""
    clamp = dp.t.make_clamp(_domain(), dp.symmetric_distance(), bounds=(grid[0], grid[-1]))
    return clamp >> dp.t.then_quantile_score_candidates(list(grid), alpha)


def candidates(spec: NumericColumn, limit: int) -> tuple[float, ...]:
    """The public quantile candidates of a column: round numbers in [lower, upper], and the bounds.

    The multiples of one step, the smallest of 1, 2 or 5 times a power of ten that is at least
    the column's declared precision (1 for whole numbers, else 10^-decimals) and leaves at most
    `limit` candidates (bounds included). Public: from the schema alone. Every multiple of a
    power of ten at least as large as the step is a candidate, so values recorded at such a
    precision (ages, one-decimal readings, many tied zeros) are candidates themselves, and a
    quantile sitting on a tied value can be picked exactly (OpenDP's score counts the tied
    values on neither side), where an evenly spread grid would only reach the gap next to it.
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
            inner = {float(k * step) for k in range(int(first), int(last) + 1)}
            grid = sorted(inner | {float(low), float(high)})
            if len(grid) <= limit:
                return tuple(grid)
    raise MechanismError(f"bounds [{lower}, {upper}] leave no grid of {limit} candidates")


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
    if public_n is not None:
        sensitivity = float(_present_count(public_n).map(2))
    else:
        sensitivity = group_sensitivity(_count(), neighbouring)
    return check_count_noise(noise_scale(sensitivity, epsilon), epsilon)


def sum_transformation(
    low: float, high: float, neighbouring: str, public_n: int | None, missing: bool = False
) -> Any:
    """The OpenDP bounded sum over [low, high] and its sensitivity.

    Sized on the public n when given (replace-one without groups: OpenDP's map(2) on vectors
    of n values), else `group_sensitivity`. A missing value adds nothing, so where values may
    be missing (`missing`) the sized sum runs over all n rows with 0 for each missing value,
    on bounds widened to hold 0: replacing a row then moves the sum by at most max(high, 0) -
    min(low, 0) (a value changed: high - low; a value turned missing: max(|low|, |high|)).
    Unsized, a missing row adds 0, within the map of one row added or removed.
    """
    if public_n is not None:
        if missing:
            low, high = min(low, 0.0), max(high, 0.0)
        t = _bounded_sum(low, high, public_n)
        return t, float(t.map(2))
    t = _bounded_sum(low, high)
    return t, group_sensitivity(t, neighbouring)


# ---------------------------------------------------------------- intervals


def discrete_laplace_halfwidth(scale: float, level: float = LEVEL) -> float:
    """Smallest k with P(|E| <= k) >= level for discrete Laplace E of `scale` (exact)."""
    if scale <= 0:
        return 0.0
    a = math.exp(-1.0 / scale)  # P(|E| > k) = 2 a^(k+1) / (1 + a)
    k = math.ceil(math.log((1 - level) * (1 + a) / 2) / math.log(a) - 1)
    while k > 0 and 2 * a**k / (1 + a) <= 1 - level:
        k -= 1
    return float(max(k, 0))


def laplace_halfwidth(scale: float, level: float = LEVEL) -> float:
    """b ln(1 / (1 - level)): P(|E| <= it) = level for Laplace E of scale b (exact)."""
    return scale * math.log(1 / (1 - level))


def linear_halfwidth(terms: Sequence[tuple[float, str, float]], level: float = LEVEL) -> float:
    """The half-width z with P(|sum a_i E_i| <= z) ~ level.

    The E_i are independent, of kind "laplace" or "discrete_laplace" with the given scales;
    terms are (a_i, kind, scale).

    Computed by convolving the exact distributions on a grid of 2^12 points over +-30 total
    scales: the half-width is off by at most one grid step, 1.5% of the total scale.
    """
    terms = [(abs(a), kind, s) for a, kind, s in terms if a != 0 and s > 0]
    if not terms:
        return 0.0
    if len(terms) == 1:
        a, kind, s = terms[0]
        if kind == "laplace":
            return a * laplace_halfwidth(s, level)
        return a * discrete_laplace_halfwidth(s, level)
    span = 30 * sum(a * s for a, _, s in terms)
    points = 2**12 + 1
    grid = np.linspace(-span, span, points)
    step = grid[1] - grid[0]
    density: FloatArray | None = None
    for a, kind, s in terms:
        mass = _term_mass(grid, step, a, kind, s)
        density = mass if density is None else fftconvolve(density, mass, mode="same")
    assert density is not None
    density = np.clip(density, 0, None)
    density /= density.sum()
    centre = points // 2
    inside = density[centre] + np.cumsum(density[centre + 1 :] + density[centre - 1 :: -1])
    # grid[centre + j] holds the mass within (j - 1/2, j + 1/2] steps of 0
    index = int(np.searchsorted(inside, level))
    return float((index + 1.5) * step)


def _term_mass(grid: FloatArray, step: float, a: float, kind: str, s: float) -> FloatArray:
    if kind == "laplace":
        b = a * s
        edges = np.concatenate([grid - step / 2, [grid[-1] + step / 2]])
        tail = 0.5 * np.exp(-np.abs(edges) / b)
        cdf = np.where(edges < 0, tail, 1 - tail)
        mass: FloatArray = np.diff(cdf)
        return mass
    alpha = math.exp(-1.0 / s)
    limit = int(min(abs(grid[-1]) / a, 60 * s + 60))
    ks = np.arange(-limit, limit + 1)
    pmf = (1 - alpha) / (1 + alpha) * alpha ** np.abs(ks)
    out = np.zeros_like(grid)
    idx = np.clip(np.rint((a * ks - grid[0]) / step).astype(np.int64), 0, len(grid) - 1)
    np.add.at(out, idx, pmf)
    return out


def quantile_rank_margin(alpha: float, epsilon: float, neighbouring: str, size: int) -> float:
    """The rank offset M (in rows) the ends of a quantile's interval target, at their epsilon.

    The two ends are chosen together, by one exponential-mechanism pick among the pairs (lo, hi),
    lo <= hi, of `size` public candidates, with score max(|s(lo) + M|, |s(hi) - M|), where s(c) =
    (1 - alpha) #below(c) - alpha #above(c) and the bound candidates' scores (lower bound for
    lo, upper bound for hi) are capped at the public value o (so the pair of bounds scores at
    most o, whatever the data). The pick exceeds the best score by more than m = b ln(P / beta)
    with probability at most beta = 5%, for P = size (size + 1) / 2 pairs and b = `rank_scale`;
    so M = m + o + 2 puts s(lo) at -2 or below and s(hi) at 2 or above, which places lo at or
    below the true quantile and hi at or above it: see `Computer.ends`.
    """
    b = rank_scale(alpha, epsilon, neighbouring)
    pairs = size * (size + 1) / 2
    return b * math.log(pairs / (1 - LEVEL)) + bound_score(b) + 2


def bound_score(scale: float) -> float:
    """o, the public score cap of the bound candidate of an interval end: b ln(BOUND_ODDS)."""
    return scale * math.log(BOUND_ODDS)


def cap_bounds(low: FloatArray, high: FloatArray, cap: float) -> tuple[FloatArray, FloatArray]:
    """The ends' scores with the lower bound's (as lo) and the upper bound's (as hi) capped."""
    low[0], high[-1] = min(low[0], cap), min(high[-1], cap)
    return low, high


def signed_rank_scores(
    values: Sequence[float] | FloatArray, candidates: FloatArray, alpha: float
) -> FloatArray:
    """s(c) = (1 - alpha) #(x < c) - alpha #(x > c) for each candidate (values clamped).

    Ties at c count on neither side, as in OpenDP's quantile score (|s| is that score in
    rows). One row added or removed moves every s(c) by at most max(alpha, 1 - alpha).
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    below = np.searchsorted(x, candidates, side="left")
    above = x.size - np.searchsorted(x, candidates, side="right")
    scores: FloatArray = (1 - alpha) * below - alpha * above
    return scores


def quantile_shares(epsilon: float) -> tuple[float, float]:
    """(point, ends): POINT_SHARE of epsilon on the estimate, the rest on the interval's ends.

    Rounded so that point + ends <= epsilon exactly.
    """
    ends = float_at_most(Fraction(epsilon) * (1 - Fraction(str(POINT_SHARE))))
    return float_at_most(Fraction(epsilon) - Fraction(ends)), ends


# ---------------------------------------------------------------- one row of output


@dataclass
class Row:
    """One statistic for one group: estimate, 95% interval, main noise scale, epsilon."""

    estimate: float
    lower: float
    upper: float
    scale: float


def _split(epsilon: float, parts: int) -> float:
    return float_at_most(Fraction(epsilon) / parts)


class Computer:
    """Runs each statistic over every group, recording every epsilon it spends."""

    def __init__(
        self,
        data: pd.DataFrame,
        schema: Schema,
        request: Request,
        neighbouring: str,
        rng: RandomSource,
    ) -> None:
        self.schema, self.request, self.neighbouring, self.rng = schema, request, neighbouring, rng
        self.n = len(data)
        self.data = data
        self.group_of = self._group_codes(data)
        self.spent: list[float] = []

    def _group_codes(self, data: pd.DataFrame) -> IntArray:
        by = list(self.request.by)
        if not by:
            return np.zeros(len(data), dtype=np.int64)
        shape = self.schema.domain_shape(by)
        codes = self.schema.encode(data, by)
        flat: IntArray = np.ravel_multi_index(tuple(codes.T), shape).astype(np.int64)
        return flat

    @property
    def grouped(self) -> bool:
        return bool(self.request.by)

    @property
    def public_n(self) -> int | None:
        """The row count when it is public (replace-one without groups), else None."""
        return self.n if self.neighbouring == "replace-one" and not self.grouped else None

    def known_count(self, column: str) -> int | None:
        """The number of values of `column` when it is public, else None.

        Public only when the row count is and the schema rules out missing values
        ("missing": "reject"); never from whether the data happen to hold any.
        """
        return self.public_n if not self.may_miss(column) else None

    def may_miss(self, column: str) -> bool:
        """Whether the schema lets `column` hold missing values (public)."""
        return self.numeric(column).missing == "cell"

    def present(self, column: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Which rows carry a value of `column` (missing or unreadable ones do not)."""
        return ~np.isnan(self.numeric(column).numbers(self.data[column]))

    def values(self, column: str) -> list[list[float]]:
        """Each group's present values of `column` (as floats), in group order.

        Missing values are left out of every statistic of the column.
        """
        x = self.numeric(column).numbers(self.data[column])
        keep = ~np.isnan(x)
        group_of = self.group_of[keep]
        order = np.argsort(group_of, kind="stable")
        cuts = np.searchsorted(group_of[order], np.arange(1, len(self.request.groups)))
        return [part.tolist() for part in np.split(x[keep][order], cuts)]

    def _spend(self, epsilon: float) -> None:
        self.spent.append(epsilon)

    # -- counts and sums --------------------------------------------------------------

    def noisy_counts(self, epsilon: float, column: str | None = None) -> tuple[IntArray, float]:
        """Per-group counts of rows (or of `column`'s present values) + discrete Laplace noise.

        The noise has scale Delta / epsilon.

        Privacy: epsilon-DP; Delta = 1 under add-remove (OpenDP's count map: a row, present or
        missing, lands in one group) and 2 under replace-one with groups (a row may leave one
        group and join another); under replace-one without groups the count of present values
        moves by at most 1 (`count_scale` with the public n).
        """
        rows = self.group_of if column is None else self.group_of[self.present(column)]
        true = np.bincount(rows, minlength=len(self.request.groups)).astype(np.int64)
        sized = self.public_n if column is not None else None
        scale = count_scale(epsilon, self.neighbouring, sized)
        self._spend(epsilon)
        return self.rng.add_discrete_laplace(true, scale), scale

    def noisy_sums(
        self,
        groups: list[list[float]],
        low: float,
        high: float,
        epsilon: float,
        missing: bool = False,
    ) -> tuple[FloatArray, float]:
        """Per-group OpenDP bounded sums over [low, high] + Laplace of scale Delta / epsilon.

        Privacy: epsilon-DP; Delta from OpenDP's stability map (`group_sensitivity`), or, under
        replace-one without grouping, OpenDP's sized-domain map for the public n (`missing`:
        the group's values may be fewer than n; each missing one counts as 0, see
        `sum_transformation`).
        """
        n = self.public_n
        t, sensitivity = sum_transformation(low, high, self.neighbouring, n, missing)
        if n is not None and missing:
            groups = [[*np.clip(g, low, high).tolist(), *[0.0] * (n - len(g))] for g in groups]
        scale = noise_scale(sensitivity, epsilon)
        true = np.asarray([float(t(g)) for g in groups])
        self._spend(epsilon)
        return self.rng.add_laplace(true, scale), scale

    # -- the statistics ---------------------------------------------------------------

    def count(self, epsilon: float) -> list[Row]:
        """Row count per group. Exact (and free) under replace-one without groups: n is public.

        Interval: exact 95% for the discrete Laplace noise.
        """
        if self.public_n is not None:
            return [Row(float(self.n), float(self.n), float(self.n), 0.0)]
        counts, scale = self.noisy_counts(epsilon)
        half = discrete_laplace_halfwidth(scale)
        return [Row(max(c, 0.0), max(c - half, 0.0), c + half, scale) for c in counts.astype(float)]

    def sum(self, column: str, epsilon: float) -> list[Row]:
        """Per-group sum of the present values of the column clamped to [lower, upper], + Laplace.

        Privacy: epsilon-DP; sensitivity: OpenDP's map of the bounded sum, max(|lower|,
        |upper|) or upper - lower with mixed signs (per row added or removed, doubled under
        replace-one with groups; a missing value adds 0), or its sized-domain map when n is
        public: about upper - lower, or max(upper, 0) - min(lower, 0) if values may be missing
        (`sum_transformation`). Interval: exact 95% for the Laplace noise.
        """
        spec = self.numeric(column)
        values, missing = self.values(column), self.may_miss(column)
        sums, scale = self.noisy_sums(values, spec.lower, spec.upper, epsilon, missing)
        half = laplace_halfwidth(scale)
        return [Row(s, s - half, s + half, scale) for s in sums]

    def mean(self, column: str, epsilon: float) -> list[Row]:
        """Per-group mean of the present values of the clamped column.

        c + (noisy centred sum) / (noisy count of present values).

        Privacy: epsilon-DP; epsilon/2 on the sum (OpenDP bounded-sum map over [-r, r]: r per
        row added or removed, 2r under replace-one; a missing value adds 0) and epsilon/2 on
        the count of present values (1 per row added or removed; under replace-one 2 with
        groups, 1 without: `noisy_counts`). All of it on the sum when the number of values is
        public (replace-one, no groups, no missing values allowed; OpenDP's sized map, about
        upper - lower). Interval: exact when that number is public, else the linearised error
        (E_sum - mean_c E_count) / count with exact noise distributions.
        """
        spec = self.numeric(column)
        c, r = centre(spec)
        groups = [[v - c for v in g] for g in self.values(column)]
        if (known := self.known_count(column)) is not None:
            sums, scale = self.noisy_sums(groups, -r, r, epsilon)
            half = laplace_halfwidth(scale) / max(known, 1)
            m = float(sums[0]) / max(known, 1)
            return [clip_row(Row(c + m, c + m - half, c + m + half, scale), spec)]
        part = _split(epsilon, 2)
        sums, scale = self.noisy_sums(groups, -r, r, part, self.may_miss(column))
        counts, count_scale = self.noisy_counts(part, column)
        rows = []
        for s, n in zip(sums, counts.astype(float), strict=True):
            if n <= discrete_laplace_halfwidth(count_scale):
                rows.append(Row(c, spec.lower, spec.upper, scale))
                continue
            m = min(max(s / n, -r), r)
            terms = [(1 / n, "laplace", scale), (m / n, "discrete_laplace", count_scale)]
            half = linear_halfwidth(terms)
            rows.append(clip_row(Row(c + m, c + m - half, c + m + half, scale), spec))
        return rows

    def variance(self, column: str, epsilon: float, root: bool = False) -> list[Row]:
        """Per-group (population) variance of the clamped column, or its square root.

        Privacy: epsilon-DP; epsilon/3 each on the noisy count of present values
        (`noisy_counts`), the sum of x - c over [-r, r] and the sum of (x - c)^2 over [0, r^2]
        (OpenDP bounded-sum maps; a missing value adds 0 to both). Missing values are left
        out. Interval: the
        linearised error (E2 - 2 m1 E1 - (m2 - 2 m1^2) E_count) / count with exact noise
        distributions, clipped to [0, r^2]; for std, the square roots of its ends.
        """
        spec = self.numeric(column)
        c, r = centre(spec)
        groups = [[v - c for v in g] for g in self.values(column)]
        squares = [[min(v * v, r * r) for v in g] for g in groups]
        part = _split(epsilon, 3)
        missing = self.may_miss(column)
        s1, scale1 = self.noisy_sums(groups, -r, r, part, missing)
        s2, scale2 = self.noisy_sums(squares, 0.0, r * r, part, missing)
        counts, count_scale = self.noisy_counts(part, column)
        rows = []
        for a, b, n in zip(s1, s2, counts.astype(float), strict=True):
            if n <= discrete_laplace_halfwidth(count_scale):
                row = Row(r * r / 2, 0.0, r * r, scale2)
            else:
                m1 = min(max(a / n, -r), r)
                m2 = min(max(b / n, m1 * m1), r * r)
                v = m2 - m1 * m1
                terms = [
                    (1 / n, "laplace", scale2),
                    (2 * m1 / n, "laplace", scale1),
                    ((m2 - 2 * m1 * m1) / n, "discrete_laplace", count_scale),
                ]
                half = linear_halfwidth(terms)
                row = Row(v, max(v - half, 0.0), min(v + half, r * r), scale2)
            rows.append(root_row(row) if root else row)
        return rows

    def quantile(self, column: str, alpha: float, epsilon: float) -> list[Row]:
        """Per-group alpha-quantile of the clamped column, by the exponential mechanism.

        Privacy: epsilon-DP; two exponential-mechanism selections composed sequentially: the
        estimate (POINT_SHARE of epsilon; at most CANDIDATES public candidates, `candidates`,
        scored by OpenDP's `make_quantile_score_candidates`, sensitivity from its map) and the
        interval's two ends, chosen together (the rest; `ends`). No count is released, under
        either neighbouring relation. Missing values are left out (a row with none changes no
        score; one turned missing by replace-one moves each by at most what removing it does).
        Interval: at least 95% for every table (`ends`).
        """
        spec = self.numeric(column)
        point, part = quantile_shares(epsilon)
        self.spent += [point, part]  # two selections on every group (parallel)
        rows = []
        for values in self.values(column):
            estimate = self.select(values, spec, alpha, point)
            lower, upper = self.ends(values, spec, alpha, part)
            lower, upper = min(lower, estimate), max(upper, estimate)
            rows.append(Row(estimate, lower, upper, rank_scale(alpha, point, self.neighbouring)))
        return rows

    def ends(
        self, values: list[float], spec: NumericColumn, alpha: float, epsilon: float
    ) -> tuple[float, float]:
        """The ends (lo, hi) of a quantile's 95% interval, epsilon-DP, in one selection.

        The exponential mechanism picks a pair lo <= hi of the END_CANDIDATES public candidates
        (`candidates`) with score max(|s(lo) + M|, |s(hi) - M|) (lower is better; s from
        `signed_rank_scores`, M from `quantile_rank_margin`); the lower bound's score as lo and
        the upper bound's as hi are capped at o = `bound_score` (the bounds are always valid
        ends). Privacy: each s(c) moves by at most max(alpha, 1 - alpha) rows per row added or
        removed (doubled under replace-one with groups, `rank_sensitivity`); |.|, a min with a
        constant and a max of two such scores do not raise that, so this is epsilon-DP.
        Coverage: the pair of bounds scores at most o, so with probability >= 95% the pick has
        |s(lo) + M| <= o + m, i.e. s(lo) <= -2, and |s(hi) - M| <= o + m, s(hi) >= 2 (or lo, hi
        are the bounds). With B = #below lo, T = #tied, s = B - alpha n + alpha T, so B <= alpha
        n - 1 <= alpha (n - 1): at most floor(alpha (n - 1)) values lie below lo, so lo <= the
        sorted value of that index <= the (interpolated) true quantile. Likewise s(hi) >= 2 gives
        #(x <= hi) >= alpha n + 2, so hi >= the next sorted value >= it. Both hold at once with
        probability >= 95%, on any table, ties included.
        """
        grid = np.asarray(candidates(spec, END_CANDIDATES))
        margin = quantile_rank_margin(alpha, epsilon, self.neighbouring, grid.size)
        cap = bound_score(rank_scale(alpha, epsilon, self.neighbouring))
        s = signed_rank_scores(np.clip(values, spec.lower, spec.upper), grid, alpha)
        low, high = cap_bounds(np.abs(s + margin), np.abs(s - margin), cap)
        first, second = np.triu_indices(grid.size)
        scores = np.maximum(low[first], high[second])
        sensitivity = rank_sensitivity(alpha, self.neighbouring)
        index = exponential_mechanism(
            -scores, epsilon=epsilon, sensitivity=sensitivity, rng=self.rng
        )
        return grid[first[index]], grid[second[index]]

    def select(
        self, values: list[float], spec: NumericColumn, alpha: float, epsilon: float
    ) -> float:
        """One epsilon-DP exponential-mechanism quantile of one group's values.

        alpha is clipped to [0, 1]: 0 and 1 give the bounds without a draw, a choice made from
        public or already released values. The caller records the spend.
        """
        if alpha <= 0:
            return spec.lower
        if alpha >= 1:
            return spec.upper
        grid = candidates(spec, CANDIDATES)
        t = _quantile_scores(grid, _rounded_alpha(alpha))
        scores = -np.asarray(t(values), dtype=np.float64)
        sensitivity = group_sensitivity(t, self.neighbouring)
        index = exponential_mechanism(
            scores, epsilon=epsilon, sensitivity=sensitivity, rng=self.rng
        )
        chosen: float = np.asarray(grid)[index]
        return chosen

    def numeric(self, column: str) -> NumericColumn:
        return _numeric(self.schema, column)


def _rounded_alpha(alpha: float) -> float:
    return round(alpha, 4)  # OpenDP turns alpha into a fraction; keep its denominator small


def rank_sensitivity(alpha: float, neighbouring: str) -> float:
    """max(alpha, 1 - alpha) rows of rank per row (twice under replace-one): OpenDP's map / den."""
    return max(alpha, 1 - alpha) * (1 if neighbouring == "add-remove" else 2)


def rank_scale(alpha: float, epsilon: float, neighbouring: str) -> float:
    """The Gumbel scale of one quantile selection in rows of rank: 2 Delta / epsilon."""
    return noise_scale(2 * rank_sensitivity(alpha, neighbouring), epsilon)


def centre(spec: NumericColumn) -> tuple[float, float]:
    """(c, r): the midpoint of the bounds and the half-width, so values lie in [c - r, c + r]."""
    return (spec.lower + spec.upper) / 2, (spec.upper - spec.lower) / 2


def clip_row(row: Row, spec: NumericColumn) -> Row:
    """Clip to [lower, upper] (the true mean lies there, so coverage is unchanged)."""
    low, high = spec.lower, spec.upper
    estimate, lower, upper = (min(max(v, low), high) for v in (row.estimate, row.lower, row.upper))
    return Row(estimate, lower, upper, row.scale)


def root_row(row: Row) -> Row:
    """The square roots (variance to standard deviation; monotone, so coverage is kept)."""
    return Row(math.sqrt(row.estimate), math.sqrt(row.lower), math.sqrt(row.upper), row.scale)


def compute(
    data: pd.DataFrame,
    schema: Schema,
    request: Request,
    *,
    neighbouring: str,
    rng: RandomSource,
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, float]:
    """The statistics table and the exact total epsilon spent (the sum of every piece).

    Privacy: sequential composition of each statistic's epsilon-DP release (its share of the
    request); within a statistic the groups compose in parallel (see the module docstring).
    """
    run = Computer(data, schema, request, neighbouring, rng)
    records = []
    for i, (stat, share) in enumerate(zip(request.statistics, request.shares, strict=True)):
        before = len(run.spent)
        rows = _run_one(run, stat, share)
        used = sum((Fraction(e) for e in run.spent[before:]), Fraction(0))
        for group, row in zip(request.groups or ((),), rows, strict=True):
            records.append(
                {
                    "statistic": stat.label,
                    "column": stat.column or "",
                    **dict(zip(request.by, group, strict=True)),
                    "estimate": row.estimate,
                    "ci_lower": row.lower,
                    "ci_upper": row.upper,
                    "noise_scale": row.scale,
                    "epsilon": float(used),
                }
            )
        if progress:
            progress(i + 1, len(request.statistics))
    total = sum((Fraction(e) for e in run.spent), Fraction(0))
    columns = [*TABLE_COLUMNS[:2], *request.by, *TABLE_COLUMNS[2:]]
    return pd.DataFrame(records, columns=columns), _round_up(total)


def _run_one(run: Computer, stat: Statistic, epsilon: float) -> list[Row]:
    if stat.kind == "count":
        return run.count(epsilon)
    assert stat.column is not None
    if stat.kind == "sum":
        return run.sum(stat.column, epsilon)
    if stat.kind == "mean":
        return run.mean(stat.column, epsilon)
    if stat.kind in ("variance", "std"):
        return run.variance(stat.column, epsilon, root=stat.kind == "std")
    assert stat.alpha is not None
    return run.quantile(stat.column, stat.alpha, epsilon)


def _round_up(value: Fraction) -> float:
    out = float(value)
    while Fraction(out) < value:
        out = math.nextafter(out, math.inf)
    return out


def selected_request(
    schema: Schema,
    params: dict[str, Any],
    columns: Sequence[str],
    *,
    epsilon: float,
    neighbouring: str,
) -> Request:
    """The checked request (`parse_request`), refused if it uses a column not selected."""
    request = parse_request(schema, params, epsilon=epsilon, neighbouring=neighbouring)
    missing = [c for c in request.needed_columns() if c not in columns]
    if missing:
        raise MechanismError(
            f"columns ({', '.join(missing)}) are used by the statistics but not selected; "
            "add them to the columns"
        )
    return request


def run_statistics(
    data: pd.DataFrame,
    schema: Schema,
    *,
    columns: Sequence[str],
    params: dict[str, Any],
    epsilon: float,
    delta: float,
    neighbouring: str,
    rng: RandomSource,
    progress: Progress | None,
) -> ReleaseOutput:
    """The catalogue's entry point: statistics.csv, and the spend recorded piece by piece.

    Privacy: pure epsilon-DP for one row under `neighbouring` (delta is not used); each
    statistic's sensitivity and guarantee are in its Computer method's docstring.
    """
    if math.isinf(epsilon):
        raise MechanismError("epsilon must be finite for summary statistics")
    request = selected_request(schema, params, columns, epsilon=epsilon, neighbouring=neighbouring)
    table, spent = compute(
        data, schema, request, neighbouring=neighbouring, rng=rng, progress=progress
    )
    return ReleaseOutput(
        files={"statistics.csv": csv_bytes(table)},
        manifest={"parameters": public_parameters(schema, request)},
        spent={"epsilon": spent, "delta": 0.0},
    )


def missing_columns(schema: Schema, request: Request) -> list[str]:
    """The statistics' columns that may hold missing values: those are left out (public)."""
    columns = dict.fromkeys(s.column for s in request.statistics if s.column is not None)
    return [c for c in columns if _numeric(schema, c).missing == "cell"]


def _numeric(schema: Schema, column: str) -> NumericColumn:
    spec = schema.column(column)
    assert isinstance(spec, NumericColumn)
    return spec


def public_parameters(schema: Schema, request: Request) -> dict[str, Any]:
    """The manifest's parameters: the request as run, with each statistic's epsilon.

    Also the columns whose missing values were left out (`missing_columns`); public: from the
    request and the schema only.
    """
    return {
        "stat": [s.text for s in request.statistics],
        "by": list(request.by),
        "epsilon_per_statistic": list(request.shares),
        "level": LEVEL,
        "quantile_candidates": {"estimate": CANDIDATES, "interval_ends": END_CANDIDATES},
        "missing_values_left_out": missing_columns(schema, request),
    }


# ---------------------------------------------------------------- the public plan


def statistics_plan(
    schema: Schema,
    columns: Sequence[str],
    params: dict[str, Any],
    *,
    epsilon: float,
    delta: float,
    neighbouring: str,
    n: int,
) -> NoisePlan:
    """Each statistic's epsilon, noise scale and expected 95% half-width, before spending.

    Public inputs only: the schema, the request, epsilon and `n` (public under replace-one; the
    custodian's own preview under add-remove). Groups are assumed to hold n / groups rows each;
    means and variances are previewed for values centred in their bounds.
    details["statistics"]: one dict per statistic (statistic, column, epsilon, noise_scale,
    halfwidth, unit); details["missing_left_out"]: `missing_columns`.
    """
    request = selected_request(schema, params, columns, epsilon=epsilon, neighbouring=neighbouring)
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
        "Laplace, discrete Laplace and the exponential mechanism",
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
            part = _split(epsilon, 2)
            scale = noise_scale(sum_transformation(-r, r, neighbouring, public_n)[1], part)
            half = laplace_halfwidth(scale) / size
        return {**record, "noise_scale": scale, "halfwidth": half, "unit": stat.column}
    if stat.kind in ("variance", "std"):
        part = _split(epsilon, 3)
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
