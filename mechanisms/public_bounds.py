"""Bounds and categories for a schema, estimated with differential privacy ("estimate for me").

A custodian who has no code book can spend a share of the budget on these instead of reading
the data. Both are differentially private for one row (the unit of every release) under the
dataset's neighbouring relation, and take their noise from the injected random source (OpenDP's
samplers by default, `mechanisms.noise`). What an estimate can do at a given spend is computed
from public inputs alone, before anything is spent (`estimate_accuracy`).

- `estimate_bounds`: a DP median, then a sparse-vector scan outward from it on each side over
  public round numbers, stopping where few rows lie beyond. Pure epsilon-DP. It states, without
  the data, how many rows its bounds leave beyond them on average (at most).
- `discover_categories`: the distinct values whose noisy count clears a threshold set from
  delta (the domain is unknown, so a value held by one row could otherwise be revealed).
  (epsilon, delta)-DP; it needs delta > 0. It states, without the data, the fewest rows a value
  needs to be found with 95% probability.
- `run_estimate`: either of them for columns of a table, as the catalogue row
  `dp_schema_estimate` (mechanisms.catalogue): `run_release` runs it at the table's unit of
  privacy, one row or (with a person column) one person, bounded to k rows exactly as a
  release is.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from mechanisms import persons
from mechanisms.accounting import (
    DEFAULT_NEIGHBOURING,
    check_delta,
    check_epsilon,
    float_at_most,
    noise_scale,
)
from mechanisms.accuracy import discrete_laplace_std
from mechanisms.errors import MechanismError, shown
from mechanisms.histogram import count_sensitivity
from mechanisms.noise import RandomSource, check_count_noise, resolve_rng
from mechanisms.plans import NoisePlan
from mechanisms.release import ReleaseOutput, json_bytes
from mechanisms.release_request import MechanismInputs, PlanInputs

MANTISSAS = (1, 2, 5)
DECADES = range(-3, 13)  # 0.001 ... 5e12
MAX_DISCOVERED = 200
MEDIAN_SHARE = Fraction(1, 10)  # of a bounds estimate's epsilon: the median it scans from
THRESHOLD_SHARE = Fraction(7, 10)  # of the rest: the noise on each scan's threshold
STOP_MARGIN = 1.5  # the threshold T, in query noise scales (T = ceil(STOP_MARGIN * scale))
NEXT_TO_MEDIAN = 3  # both scans stopping this close to the median: no bounds (too few rows)
FOUND_WITH = 0.95  # a category "can be found" when it is released with this probability


def _grid() -> np.ndarray:
    positive = [m * 10.0**k for k in DECADES for m in MANTISSAS]
    return _plain_array(sorted([-p for p in positive] + [0.0] + positive))


def _median_grid() -> np.ndarray:
    """0 and +-x 10^k for x = 1.00, 1.01, ..., 9.99 (three significant digits), increasing."""
    positive = np.concatenate([np.arange(100, 1000) * 10.0 ** (k - 2) for k in DECADES])
    return _plain_array(np.concatenate([-positive[::-1], [0.0], positive]))


def _plain_array(values: Iterable[float]) -> np.ndarray:
    """Values as written with 12 significant digits (0.001, 20, 1990), without float noise."""
    return np.array([float(f"{v:.12g}") for v in values])


GRID = _grid()
OFFSETS = GRID[GRID > 0]
MEDIAN_GRID = _median_grid()
MAX_SCAN = len(GRID) + len(OFFSETS) + 1  # candidates one scan may ask about (m too), at most


def bounds_grid() -> np.ndarray:
    """The public round numbers every scan may stop at: 0 and +-m 10^k (m in 1, 2, 5)."""
    return GRID.copy()


@dataclass(frozen=True)
class BoundsPlan:
    """The public parameters of one bounds estimate, from (epsilon, neighbouring) only.

    `median_scale`: the permute-and-flip scale of the median; `threshold_scale` and
    `query_scale`: the discrete Laplace scales on each scan's threshold and counts;
    `threshold`: T, the rows a bound may leave beyond it before noise.
    """

    epsilon: float
    median_scale: float
    threshold_scale: float
    query_scale: float
    threshold: int

    def expected_clamp_rows(self) -> float:
        """At most this many rows, on average, lie beyond the two bounds (data-independent).

        Each side leaves at most T + E rows beyond its bound on average, E the expected excess
        bound of `_expected_excess` (a union over at most MAX_SCAN candidates); the sum of both.
        """
        excess = _expected_excess(self.threshold_scale, self.query_scale, MAX_SCAN)
        return 2 * (self.threshold + excess)


def bounds_plan(epsilon: float, neighbouring: str = DEFAULT_NEIGHBOURING) -> BoundsPlan:
    """The scales and threshold `estimate_bounds` uses at this (epsilon, neighbouring).

    Under replace-one the whole estimate runs at epsilon / 2 of add-remove (two add-remove
    steps make one replacement: group privacy). Of that, MEDIAN_SHARE goes to the median and
    the rest to the scans, split THRESHOLD_SHARE to the threshold noise and the remainder to
    the count noise; each part is rounded down and each scale up (`noise_scale`), so the parts
    realise at most the requested epsilon.
    """
    epsilon = check_epsilon(epsilon, allow_infinite=False)
    row = Fraction(epsilon) / count_sensitivity(neighbouring)
    median = row * MEDIAN_SHARE
    threshold_part = (row - median) * THRESHOLD_SHARE
    query_part = row - median - threshold_part
    query_scale = _count_scale(query_part, epsilon)
    return BoundsPlan(
        epsilon=epsilon,
        median_scale=noise_scale(2, float_at_most(median)),
        threshold_scale=_count_scale(threshold_part, epsilon),
        query_scale=query_scale,
        threshold=math.ceil(STOP_MARGIN * query_scale),
    )


def _count_scale(part: Fraction, epsilon: float) -> float:
    return check_count_noise(noise_scale(1, float_at_most(part)), epsilon)


@dataclass(frozen=True)
class BoundsEstimate:
    """DP bounds, with the public plan they were found with (None: no bound found)."""

    lower: float | None
    upper: float | None
    plan: BoundsPlan


def estimate_bounds(
    values: Iterable[float] | pd.Series,
    *,
    epsilon: float,
    neighbouring: str = DEFAULT_NEIGHBOURING,
    rng: RandomSource | None = None,
) -> BoundsEstimate:
    """Lower and upper bounds of a numeric column that leave few rows beyond them, pure DP.

    1. A median m: permute-and-flip (report noisy max with exponential noise; OpenDP's
       `make_noisy_max` in the secure source) over MEDIAN_GRID with score
       -|#{x < c} - #{x > c}|.
    2. Two sparse-vector scans outward from m over public candidates (`scan_candidates`: the
       round numbers of GRID and the multiples of each offset d in OFFSETS at least d beyond
       m). The upper scan asks q(c) = #{x > c} for c >= m, increasing; the lower scan asks
       #{x < c} for c <= m, decreasing. Each draws one noisy threshold T + rho and stops at
       the first candidate whose noisy count is at most it; that candidate is the bound (none
       if no candidate stops the scan). Both scans stopping within their first NEXT_TO_MEDIAN
       candidates (within 0.002 of m) means too few rows for this epsilon, or a single value:
       no bounds.

    Guarantee: pure epsilon-DP for one row under `neighbouring`; the plan (`bounds_plan`) runs
    under add-remove at epsilon / 2 under replace-one (group privacy), at epsilon under
    add-remove. Under add-remove of one row x:
    - the median's scores move by at most 1: permute-and-flip at scale 2 / epsilon_m is
      epsilon_m-DP (McKenna and Sheldon 2020);
    - given m (a DP output: adaptive composition), a row x > m moves only the upper scan's
      counts, x < m only the lower scan's, x = m neither: the scans read disjoint rows, so
      both together cost what one costs (parallel composition);
    - one scan is the sparse vector technique with monotone queries: adding x raises every
      count by 0 or 1, never lowers one. With rho ~ DLap(1 / epsilon_1) and each count's noise
      DLap(1 / epsilon_2), the index where it stops is (epsilon_1 + epsilon_2)-DP (Lyu, Su and
      Li 2017, monotone queries). For integer counts and discrete Laplace noise the proof is
      the usual shift: for D' = D + x and output "stop at k", substitute rho + 1 for rho
      (factor e^epsilon_1); every earlier count passes as before, and the stop at k needs at
      most one more unit of its noise (factor e^epsilon_2); "stop at k" under D' against D
      needs only the latter, and "no stop" only the former.
    The total, epsilon_m + epsilon_1 + epsilon_2, is the epsilon of the plan. Noise comes from
    `rng` (OpenDP's samplers by default): one permute-and-flip and, per scan, two discrete
    Laplace calls.

    Accuracy (public, `BoundsPlan.expected_clamp_rows`): the rows beyond a bound are at most
    T plus the excess of the first count the scan stopped on; E[excess] is bounded without the
    data, by a union over the at most MAX_SCAN candidates before the stop. The bounds aim at
    where the last few rows lie, not at the extremes; a scan may stop a candidate or two beyond
    the last row (bounds a little wide).
    """
    plan = bounds_plan(epsilon, neighbouring)
    rng = resolve_rng(rng)
    numbers = _as_floats(values)
    present = np.sort(numbers[~np.isnan(numbers)])
    median = _median(present, plan, rng)
    below, above = scan_candidates(median)
    low_at = _first_at_or_below(np.searchsorted(present, below, side="left"), plan, rng)
    rows_above = len(present) - np.searchsorted(present, above, side="right")
    high_at = _first_at_or_below(rows_above, plan, rng)
    if max(low_at or 0, high_at or 0) < NEXT_TO_MEDIAN:
        return BoundsEstimate(None, None, plan)  # both stopped next to m: too few rows here
    lower = None if low_at is None else float(below[low_at])
    upper = None if high_at is None else float(above[high_at])
    return BoundsEstimate(lower, upper, plan)


def scan_candidates(median: float) -> tuple[np.ndarray, np.ndarray]:
    """The candidates of the lower scan (m, then decreasing) and the upper scan (m, increasing).

    They are the round numbers of GRID beyond m, and for each d in OFFSETS the multiple of d at
    least d below (above) m; public, given m.
    """
    down = np.floor((median - OFFSETS) / OFFSETS) * OFFSETS
    up = np.ceil((median + OFFSETS) / OFFSETS) * OFFSETS
    below = np.unique(_plain_array([median, *GRID[GRID < median], *down]))
    above = np.unique(_plain_array([median, *GRID[GRID > median], *up]))
    return below[below <= median][::-1], above[above >= median]


def _median(present: np.ndarray, plan: BoundsPlan, rng: RandomSource) -> float:
    """A DP median of the sorted values on MEDIAN_GRID (permute-and-flip, sensitivity 1)."""
    below = np.searchsorted(present, MEDIAN_GRID, side="left")
    above = len(present) - np.searchsorted(present, MEDIAN_GRID, side="right")
    scores = -np.abs(below - above).astype(np.float64)
    return float(MEDIAN_GRID[rng.permute_and_flip(scores, plan.median_scale)])


def _first_at_or_below(counts: np.ndarray, plan: BoundsPlan, rng: RandomSource) -> int | None:
    """The sparse vector technique: the first index whose noisy count is at most the threshold.

    One draw for the threshold, one per count; None when no count stops the scan.
    """
    threshold = rng.add_discrete_laplace([plan.threshold], plan.threshold_scale)[0]
    noisy = rng.add_discrete_laplace(np.asarray(counts, dtype=np.int64), plan.query_scale)
    stops = np.flatnonzero(noisy <= threshold)
    return int(stops[0]) if stops.size else None


def _expected_excess(threshold_scale: float, query_scale: float, candidates: int) -> float:
    """A data-independent bound on E[(q_stop - T)+], the rows beyond one scan's bound over T.

    The scan stops on a count q >= T + s only if some candidate with such a count has noise
    nu <= rho - s: P(excess >= s) <= E_rho[min(1, K F(rho - s))], F the CDF of nu and K the
    number of candidates (a union bound). With a = e^(-1/scale), F(-t) = a2^t / (1 + a2) for
    t >= 0; t0 the first t with K F(-t) < 1. Summing over s >= 1 in closed form:
    E[excess] <= E[(rho + t0 - 1)+] + K / ((1 + a2)(1 - a2)) E[a2^max(t0, 1 - rho)].
    """
    a1, a2 = math.exp(-1 / threshold_scale), math.exp(-1 / query_scale)
    t0 = max(0, math.floor(query_scale * math.log(candidates / (1 + a2))) + 1)
    tail = a2**t0 * (1 - a1**t0 / (1 + a1))
    tail += (1 - a1) / (1 + a1) * a2 * (a1 * a2) ** t0 / (1 - a1 * a2)
    return _positive_part_mean(a1, t0 - 1) + candidates / ((1 + a2) * (1 - a2)) * tail


def _positive_part_mean(a: float, shift: int) -> float:
    """E[(rho + shift)+] for rho discrete Laplace with P(rho = r) = (1 - a)/(1 + a) a^|r|."""
    kappa = (1 - a) / (1 + a)
    if shift < 0:  # only shift = -1 occurs: sum over r >= 1 of (r - 1) kappa a^r
        return kappa * a**2 / (1 - a) ** 2
    nonnegative = a / (1 - a) ** 2 + shift / (1 - a)
    negative = shift * a * (1 - a**shift) / (1 - a)
    negative -= a * (1 - (shift + 1) * a**shift + shift * a ** (shift + 1)) / (1 - a) ** 2
    return kappa * (nonnegative + negative)


@dataclass(frozen=True)
class CategoryEstimate:
    """DP categories (sorted), the count threshold they cleared and the noise scale."""

    categories: list[str]
    threshold: int
    scale: float
    epsilon: float
    delta: float


def category_threshold(scale: float, epsilon: float, delta: float, neighbouring: str) -> int:
    """The count a value needs (after noise) to be released; see `discover_categories`."""
    unshared = 1 + math.exp(epsilon) if neighbouring == "replace-one" else math.exp(epsilon)
    return 1 + max(0, math.ceil(scale * math.log(unshared / delta)))


def discover_categories(
    values: Iterable[object] | pd.Series,
    *,
    epsilon: float,
    delta: float,
    neighbouring: str = DEFAULT_NEIGHBOURING,
    rng: RandomSource | None = None,
    limit: int = MAX_DISCOVERED,
) -> CategoryEstimate:
    """The values of a categorical column held by enough rows, (epsilon, delta)-DP.

    Guarantee: (epsilon, delta)-DP for one row under `neighbouring`. Each distinct value present
    gets its count plus discrete Laplace noise of scale b = sensitivity / epsilon (sensitivity 2
    under replace-one, 1 under add-remove: one `add_discrete_laplace` call over the values
    present), and only values whose noisy count reaches tau = 1 + ceil(b ln(c / delta)) are
    released (names only), with c = 1 + e^epsilon under replace-one and e^epsilon under
    add-remove. On the values both neighbours hold, this is the Laplace mechanism (epsilon).
    A value held by one row of D and absent from D' is released with probability
    p = P(1 + Z >= tau) <= e^(-(tau - 1) / b) <= delta / c; a neighbour pair has at most one
    such value on each side (replace-one) or one in all (add-remove), so the total slack is at
    most p + e^epsilon p <= delta. Sorting and the cap of `limit` values (the largest noisy
    counts) are post-processing. Missing values ("" and nulls) are never released.
    """
    epsilon = check_epsilon(epsilon, allow_infinite=False)
    delta = _check_discovery_delta(delta)
    scale = check_count_noise(count_sensitivity(neighbouring) / epsilon, epsilon)
    counts = Counter(str(v) for v in values if not _is_missing(v))
    counts.pop("", None)
    names = list(counts)
    exact = np.fromiter(counts.values(), dtype=np.int64, count=len(names))
    noisy = resolve_rng(rng).add_discrete_laplace(exact, scale)
    threshold = category_threshold(scale, epsilon, delta, neighbouring)
    kept = sorted(
        ((int(n), v) for n, v in zip(noisy, names, strict=True) if n >= threshold), reverse=True
    )[:limit]
    return CategoryEstimate(sorted(v for _n, v in kept), threshold, scale, epsilon, delta)


def categories_found_rows(
    epsilon: float, delta: float, neighbouring: str = DEFAULT_NEIGHBOURING
) -> int:
    """The fewest rows a value needs to be released with probability FOUND_WITH or more.

    Public inputs only (`discover_categories` at this epsilon, delta and relation).

    A value held by m rows is released when m + Z >= tau (Z discrete Laplace of scale b,
    a = e^(-1/b)); it is missed when Z <= -j with j = m - tau + 1, which has probability
    a^j / (1 + a). So m = tau - 1 + j for the smallest j with a^j / (1 + a) <= 1 - FOUND_WITH.
    """
    epsilon = check_epsilon(epsilon, allow_infinite=False)
    delta = _check_discovery_delta(delta)
    scale = count_sensitivity(neighbouring) / epsilon
    a = math.exp(-1 / scale)
    missed = max(0, math.ceil(scale * math.log(1 / ((1 - FOUND_WITH) * (1 + a)))))
    return category_threshold(scale, epsilon, delta, neighbouring) - 1 + missed


def _check_discovery_delta(delta: float) -> float:
    delta = check_delta(delta)
    if delta <= 0:
        raise MechanismError(
            "discovering categories needs delta > 0: without a list, a value held by a single "
            "row could be revealed; give the list from public knowledge instead"
        )
    return delta


ESTIMATE_KINDS = ("numeric", "categorical")
ESTIMATE_RESULTS = "estimates.json"  # {column: its estimate}, what the portal's schema page reads
ESTIMATE_FILES = {
    "estimates.csv": "per column: the DP bounds or categories, and what they can do",
    ESTIMATE_RESULTS: "the same estimates, exactly, for programs (the portal's schema page)",
}
ESTIMATE_COLUMNS = {
    "estimates.csv": {
        "column": "the column estimated",
        "kind": "numeric (bounds) or categorical (categories)",
        "lower": "the DP lower bound (empty: none found at this epsilon)",
        "upper": "the DP upper bound (empty: none found at this epsilon)",
        "categories": "the DP categories, separated by ' | ' (values held by few rows are "
        "left out)",
        "rows_beyond_at_most": "bounds: on average at most this many rows lie beyond the two "
        "bounds (from public inputs only)",
        "found_rows": "categories: a value held by at least this many rows is found with "
        "probability 95% or more (from public inputs only)",
    }
}


def run_estimate(inputs: MechanismInputs[pd.DataFrame]) -> ReleaseOutput:
    """Bounds ("numeric") or categories ("categorical", params["kind"]) of each column.

    The columns are ones the schema has not described yet (their declared type is not read):
    their bounds and categories are what this estimates. The budget is split evenly over the
    columns (sequential composition; each share rounded down).

    Guarantee: for one row under `neighbouring`, pure epsilon-DP for bounds (`estimate_bounds`,
    delta is not spent) and (epsilon, delta)-DP for categories (`discover_categories`); the
    L1 sensitivity of the counts is 2 (replace-one) or 1 (add-remove). At person level
    `run_release` has already bounded each person to k rows and passes the row-level budget of
    the catalogue row's `group_budget` (`persons.approx_group_budget`: the category threshold is
    not zCDP), so the guarantee holds for one person (mechanisms.persons).
    """
    kind = inputs.params.get("kind", "numeric")
    unknown = set(inputs.params) - {"kind"}
    if unknown or kind not in ESTIMATE_KINDS:
        raise MechanismError(
            f"an estimate takes kind numeric (bounds) or categorical (categories), not "
            f"{shown(kind) if not unknown else sorted(unknown)}"
        )
    epsilon = check_epsilon(inputs.epsilon, allow_infinite=False)
    epsilon = float_at_most(Fraction(epsilon) / len(inputs.columns))
    delta = float_at_most(Fraction(inputs.delta) / len(inputs.columns))
    results = {
        name: _estimate(inputs.data[name], kind, epsilon, delta, inputs.neighbouring, inputs.rng)
        for name in inputs.columns
    }
    rows = [_estimate_row(name, kind, result) for name, result in results.items()]
    return ReleaseOutput(
        files={"estimates.csv": _csv_bytes(rows), ESTIMATE_RESULTS: json_bytes(results)},
        manifest={"parameters": {"kind": kind}},
        spent={"epsilon": inputs.epsilon, "delta": inputs.delta if kind == "categorical" else 0.0},
    )


def _csv_bytes(rows: list[dict[str, Any]]) -> bytes:
    """RFC 4180 CSV of a few rows, None an empty field.

    Pandas and pyarrow would cost more than the estimate itself, which the privacy audits run
    thousands of times.
    """
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def _estimate_row(name: str, kind: str, result: dict[str, Any]) -> dict[str, Any]:
    """One row of estimates.csv: a column's public estimate in plain cells."""
    return {
        "column": name,
        "kind": kind,
        "lower": result.get("lower"),
        "upper": result.get("upper"),
        "categories": " | ".join(result.get("categories", [])),
        "rows_beyond_at_most": result.get("expected_clamp_rows"),
        "found_rows": result.get("found_rows"),
    }


def estimate_plan(inputs: PlanInputs) -> NoisePlan:
    """The discrete Laplace noise on each estimate's counts, from the request alone."""
    share = float_at_most(Fraction(inputs.epsilon) / len(inputs.columns))
    if inputs.params.get("kind") == "categorical":
        scale = count_sensitivity(inputs.neighbouring) / share
        details: dict[str, Any] = {}
    else:
        plan = bounds_plan(share, inputs.neighbouring)
        scale, details = plan.query_scale, {"expected_clamp_rows": plan.expected_clamp_rows()}
    return NoisePlan(
        "discrete Laplace",
        scale,
        discrete_laplace_std(scale),
        len(inputs.columns),
        len(inputs.columns),
        details,
    )


def row_budget(
    kind: str,
    person: persons.PersonLevel | None,
    epsilon: float,
    delta: float,
    neighbouring: str,
) -> tuple[float, float, str]:
    """(epsilon, delta, neighbouring) one column's row-level estimate of `kind` runs at.

    The request itself without a person column; with one, what `run_release` passes the
    catalogue row: `persons.approx_group_budget` for the person's group of rows, under
    add-remove (bounds spend no delta, so theirs is epsilon / g).
    """
    if kind not in ESTIMATE_KINDS:
        raise MechanismError(f"an estimate is of bounds or categories, not {kind!r}")
    delta = delta if kind == "categorical" else 0.0
    if person is None:
        return epsilon, delta, neighbouring
    group = person.group_size(neighbouring)
    return (*persons.approx_group_budget(epsilon, delta, group), "add-remove")


def estimate_accuracy(
    kind: str,
    *,
    person: persons.PersonLevel | None,
    epsilon: float,
    delta: float = 0.0,
    neighbouring: str = DEFAULT_NEIGHBOURING,
) -> dict[str, float]:
    """What an estimate at this spend can do, from public inputs only (no data is read).

    Bounds: {"expected_clamp_rows"}: on average at most this many rows lie beyond the two
    bounds (`BoundsPlan.expected_clamp_rows`). Categories: {"found_rows"}: a value held by at
    least this many rows is released with probability FOUND_WITH or more
    (`categories_found_rows`). With a person column, rows are those kept (k per person).
    """
    epsilon = check_epsilon(epsilon, allow_infinite=False)
    row_epsilon, row_delta, relation = row_budget(
        kind, person, epsilon, check_delta(delta), neighbouring
    )
    if kind == "numeric":
        return {"expected_clamp_rows": bounds_plan(row_epsilon, relation).expected_clamp_rows()}
    return {"found_rows": categories_found_rows(row_epsilon, row_delta, relation)}


def _estimate(
    values: pd.Series, kind: str, epsilon: float, delta: float, neighbouring: str, rng: RandomSource
) -> dict[str, Any]:
    """The row-level estimate of `kind`, as the public result the portal stores and shows."""
    if kind == "numeric":
        bounds = estimate_bounds(values, epsilon=epsilon, neighbouring=neighbouring, rng=rng)
        return {
            "lower": bounds.lower,
            "upper": bounds.upper,
            "threshold": bounds.plan.threshold,
            "noise_scale": bounds.plan.query_scale,
            "expected_clamp_rows": bounds.plan.expected_clamp_rows(),
            "definition": "pure epsilon-DP",
        }
    found = discover_categories(
        values, epsilon=epsilon, delta=delta, neighbouring=neighbouring, rng=rng
    )
    return {
        "categories": found.categories,
        "threshold": found.threshold,
        "noise_scale": found.scale,
        "found_rows": categories_found_rows(epsilon, delta, neighbouring),
        "definition": "(epsilon, delta)-DP",
    }


def _as_floats(values: Iterable[float] | pd.Series) -> np.ndarray:
    """The values as floats; text that is not a number and missing values become NaN."""
    if isinstance(values, pd.Series | np.ndarray):
        array = values.to_numpy() if isinstance(values, pd.Series) else values
    else:
        array = np.asarray(list(values))
    if array.dtype.kind in "iufb":
        return array.astype(float)
    return pd.to_numeric(pd.Series(array), errors="coerce").to_numpy(dtype=float)


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
