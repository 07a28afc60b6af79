"""What a summary-statistics release promises: each statistic within ±H of the truth.

For one statistic at its share of epsilon, H is a half-width such that, for every group holding
at least `rows` rows of which at most a share `missing` have no value in the column (public
statements: the planner's assumptions), whatever the values inside the declared bounds, the
group's estimate is published and within ±H of the truth with probability at least the
confidence. The truth is the statistic of the clamped values.

The statistic's epsilon is split as the release splits it (`support`): a sum or quantile that
needs a noisy count of its own spends `support.own_shares` of its share on it and the rest on
itself. A group is published only where its deciding count clears `support`'s rule; the chance
that a group of the assumed values does not (`plan.published_share` at `support.source_scale`)
is taken off the miss allowance: H is each statistic's half-width at confidence + that chance
(a union bound), and infinite when that reaches 1 (no ±H is kept: such groups are withheld too
often). A count is always published.

- count: the discrete Laplace half-width of the count's noise (0 when n is public: exact);
- sum: the exact half-width of the sum's noise (discrete Laplace on its grid, `sum_grid`);
- mean: exact when the number of values is public; else the first-order error of noisy sum
  over noisy count (as `Computer.mean` states its interval) for a mean at a bound, where the
  count's noise weighs most: (E_sum + r E_count) / present, r the half-range;
- variance: the first-order error for the worst coefficients, E2 / present + 2 r E1 / present
  + r^2 E_count / present (|m2 - 2 m1^2| <= r^2 and |m1| <= r);
- std: the square root of the variance's (|sqrt a - sqrt b| <= sqrt |a - b|);
- quantile: in rows of rank: the estimate is one permute-and-flip pick among at most
  `CANDIDATES` public candidates at 75% of the statistic's epsilon, noise scale b
  (`rank_scale`); a candidate scoring t worse than the best wins with probability at most
  e^(-t/b), so the pick's rank distance exceeds the best candidate's by more than
  b ln(candidates / (1 - confidence)) with probability at most 1 - confidence. What the best
  candidate itself misses by (rows tied between two round candidates) is the data's, not
  noise: the promise is about the distance beyond it.

Each is capped at what the statistic can err by at all (the declared range; a group's rows).

Checking the promise (`statistic_errors`, `Measured.judged`): a group is covered when it holds
at least the values the promise assumed (`GroupAssumption.values`: rows (1 - missing) in a
column that may miss values, else the rows; at least 1); a covered group whose estimate was
withheld counts as outside ±H.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mechanisms.arrays import BoolArray, FloatArray, IntArray
from mechanisms.noise import secure_source
from mechanisms.schema import NumericColumn, Schema
from mechanisms.statistics import support
from mechanisms.statistics.aggregates import group_codes
from mechanisms.statistics.compute import Computer
from mechanisms.statistics.measures import (
    SumGrid,
    centre,
    count_scale,
    discrete_laplace_halfwidth,
    linear_halfwidth,
    sum_grid,
)
from mechanisms.statistics.plan import published_share
from mechanisms.statistics.quantiles import (
    CANDIDATES,
    candidates,
    quantile_shares,
    rank_distances,
    rank_scale,
)
from mechanisms.statistics.request import Request, Statistic
from mechanisms.statistics.support import split


@dataclass(frozen=True)
class GroupAssumption:
    """What the planner assumes of each group: at least `rows` rows, at most `missing` missing."""

    rows: float
    missing: float = 0.0

    def values(self, stat: Statistic, schema: Schema) -> float:
        """The fewest values of `stat`'s column a group holds (a count: its rows), at least 1.

        rows (1 - missing) in a column that may miss values, else the rows.
        """
        spec = None if stat.column is None else schema.column(stat.column)
        if not isinstance(spec, NumericColumn) or spec.missing != "cell":
            return max(self.rows, 1.0)
        return max(self.rows * (1.0 - self.missing), 1.0)


@dataclass(frozen=True)
class _Setting:
    """What a half-width depends on besides the statistic and its epsilon."""

    neighbouring: str
    public_n: int | None
    present: float  # values per group: the rows, less the missing share
    confidence: float

    def sum_grid(self, spec: NumericColumn, low: float, high: float) -> SumGrid:
        """The noise grid of a sum of `spec`'s values over [low, high] (`sum_grid`)."""
        missing = spec.missing == "cell"
        return sum_grid(low, high, self.neighbouring, self.public_n, missing)


def statistic_half_width(
    request: Request,
    index: int,
    schema: Schema,
    neighbouring: str,
    public_n: int | None,
    group: GroupAssumption,
    confidence: float,
) -> float:
    """H for statistic `index` of `request` at its share (module docstring), in its unit.

    math.inf when a group of the assumed values is withheld with probability 1 - confidence
    or more.
    """
    stat, share = request.statistics[index], request.shares[index]
    if stat.kind == "count":
        if public_n is not None:
            return 0.0
        return discrete_laplace_halfwidth(count_scale(share, neighbouring), confidence)
    assert stat.column is not None
    spec = schema.column(stat.column)
    assert isinstance(spec, NumericColumn)
    present = group.values(stat, schema)
    deciding = support.source_scale(schema, request, neighbouring, index, public_n)
    level = confidence + (1.0 - published_share(present, deciding))
    if level >= 1.0:
        return math.inf
    setting = _Setting(neighbouring, public_n, present, level)
    source = support.sources(schema, request, neighbouring)[index]
    epsilon = support.own_shares(share)[1] if source.kind == "own" else share
    if stat.kind == "sum":
        return setting.sum_grid(spec, spec.lower, spec.upper).halfwidth(epsilon, level)
    if stat.kind == "mean":
        return _mean(spec, epsilon, setting)
    if stat.kind in ("variance", "std"):
        half = _variance(spec, epsilon, setting)
        return math.sqrt(half) if stat.kind == "std" else half
    assert stat.alpha is not None
    point, _ = quantile_shares(epsilon)
    scale = rank_scale(stat.alpha, point, neighbouring)
    size = len(candidates(spec, CANDIDATES))
    reach = max(stat.alpha, 1 - stat.alpha) * present
    return min(scale * math.log(size / (1 - level)), reach)


def unit(stat: Statistic) -> str:
    """The unit of a statistic's half-width: rows, the column's unit, or rows of rank."""
    if stat.kind == "count":
        return "rows"
    if stat.kind == "quantile":
        return "rows of rank"
    if stat.kind == "variance":
        return f"({stat.column})²"
    return str(stat.column)


def _mean(spec: NumericColumn, epsilon: float, setting: _Setting) -> float:
    _, r = centre(spec)
    known = setting.public_n if spec.missing != "cell" else None
    if known is not None:
        half = setting.sum_grid(spec, -r, r).halfwidth(epsilon, setting.confidence)
        return min(half / max(known, 1), 2 * r)
    part = split(epsilon, 2)
    counts = count_scale(part, setting.neighbouring, setting.public_n)
    present = setting.present
    terms = [setting.sum_grid(spec, -r, r).term(1 / present, part), (r / present, counts)]
    return min(linear_halfwidth(terms, setting.confidence), 2 * r)


def _variance(spec: NumericColumn, epsilon: float, setting: _Setting) -> float:
    _, r = centre(spec)
    part = split(epsilon, 3)
    present = setting.present
    terms = [
        setting.sum_grid(spec, 0.0, r * r).term(1 / present, part),
        setting.sum_grid(spec, -r, r).term(2 * r / present, part),
        (
            r * r / present,
            count_scale(part, setting.neighbouring, setting.public_n),
        ),
    ]
    return min(linear_halfwidth(terms, setting.confidence), r * r)


@dataclass(frozen=True)
class Measured:
    """A release's statistics against the raw rows (`statistic_errors`). CUSTODIAN-ONLY.

    rows: per group, its rows; values: per statistic, each group's values (its rows for a
    count); errors: per statistic, each group's |estimate - truth| (NaN where the estimate was
    withheld; 0 for a group without values: no truth to miss).
    """

    rows: IntArray
    values: list[IntArray]
    errors: list[FloatArray]

    def judged(self, index: int, fewest: float) -> FloatArray:
        """Statistic `index`'s errors on the groups its promise covers.

        Covered: at least `fewest` values (`GroupAssumption.values`: the module docstring); a
        covered group whose estimate was withheld is outside any ±H (inf).
        """
        covered: BoolArray = self.values[index] >= fewest - 1e-9
        errors = self.errors[index][covered]
        return np.where(np.isnan(errors), math.inf, errors)


def statistic_errors(
    data: pd.DataFrame, schema: Schema, request: Request, estimates: Sequence[Sequence[float]]
) -> Measured:
    """Each statistic's error in each group (`Measured`), from the raw rows.

    CUSTODIAN-ONLY (it reads the data): what the promise is checked against. The truth is the
    statistic of the group's present values clamped to the bounds (`Computer` groups and
    reads them as the release does); a quantile's error is in rows of rank beyond the best
    candidate's (module docstring). A group without values has no truth to miss: error 0.
    `estimates`: per statistic, one estimate per group in `request.groups` order.
    """
    computer = Computer(data, schema, request, "add-remove", secure_source())
    rows: IntArray = np.bincount(
        group_codes(schema, request.by, data), minlength=len(request.groups)
    )
    values, errors = [], []
    for stat, released in zip(request.statistics, estimates, strict=True):
        if stat.column is None:
            values.append(rows)
            errors.append(np.abs(np.asarray(released, dtype=float) - rows))
            continue
        spec = computer.numeric(stat.column)
        groups = computer.values(stat.column)
        values.append(np.array([len(v) for v in groups], dtype=np.int64))
        errors.append(
            np.array(
                [
                    _error(stat, spec, np.clip(v, spec.lower, spec.upper), float(estimate))
                    for v, estimate in zip(groups, released, strict=True)
                ]
            )
        )
    return Measured(rows, values, errors)


def _error(stat: Statistic, spec: NumericColumn, values: FloatArray, estimate: float) -> float:
    if not len(values):
        return 0.0
    if math.isnan(estimate):  # withheld: nothing published to judge
        return math.nan
    if stat.alpha is not None:
        grid = np.asarray(candidates(spec, CANDIDATES))
        best = float(rank_distances(values, grid, stat.alpha).min())
        return float(rank_distances(values, np.array([estimate]), stat.alpha)[0]) - best
    truth = {
        "sum": values.sum(),
        "mean": values.mean(),
        "variance": values.var(),
        "std": values.std(),
    }[stat.kind]
    return abs(estimate - float(truth))
