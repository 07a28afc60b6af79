"""Computing the summary statistics over every group, and the release's entry point."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.arrays import FloatArray, IntArray
from mechanisms.chunks import EngineTable
from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource
from mechanisms.release import Progress, ReleaseOutput, csv_bytes
from mechanisms.release_request import MechanismInputs
from mechanisms.schema import NumericColumn, Schema
from mechanisms.statistics import quantiles, support
from mechanisms.statistics.aggregates import (
    Aggregates,
    GroupsAndRanks,
    GroupTally,
    RankTally,
    fixed_sum,
    group_codes,
    inner_tallies,
    sum_bounds,
    table_passes,
    values_counted_publicly,
)
from mechanisms.statistics.measures import (
    LEVEL,
    SumGrid,
    centre,
    count_scale,
    discrete_laplace_halfwidth,
    linear_halfwidth,
    sum_grid,
)
from mechanisms.statistics.quantiles import (
    CANDIDATES,
    END_CANDIDATES,
    quantile_shares,
    rank_scale,
)
from mechanisms.statistics.request import Request, Statistic, parse_request
from mechanisms.statistics.sensitivity import sensitivities
from mechanisms.statistics.support import TOO_FEW, own_shares, publishable, split

FILES = {
    "statistics.csv": "one row per statistic and group: the estimate, its 95% interval "
    "(ci_lower, ci_upper), the main noise scale and the epsilon spent on it; a group whose "
    f'noisy count does not show rows there says "{TOO_FEW}" in its note instead of an '
    "estimate; missing values are left out of a column's statistics (the manifest lists the "
    "columns that may hold them)",
}
COLUMNS = {
    "statistics.csv": {
        "statistic": "which statistic: count (of rows), sum, mean, variance, std (standard "
        "deviation), median or qNN (the NN-th percentile)",
        "column": "the numeric column it summarises (empty for a count of rows)",
        "*": "the group: a declared category of {column}, or “(other)” (values outside "
        "them) or “(missing)” (no value)",
        "estimate": "the statistic over the group's rows, with noise: a number of rows, or the "
        "sum, mean, variance, standard deviation or percentile of the column's values present "
        "(clamped to its declared bounds); empty where the group has too few rows to publish",
        "ci_lower": "lower end of a 95% interval for the statistic's true value over the "
        "group's rows (for a count, the number of rows; for a mean or median, the mean or "
        "median itself)",
        "ci_upper": "upper end of that 95% interval for the statistic's true value",
        "noise_scale": "the scale of the main noise added: rows for a count, the column's unit "
        "for a sum, the column's unit over the count for a mean or variance, rows of rank for "
        "a percentile",
        "epsilon": "the privacy loss ε spent on this statistic (for one row: at person level "
        "the guarantee above says how many rows one person may have, and a person's rows "
        "together spend that many times as much)",
        "note": f"“{TOO_FEW}” where the group's noisy count does not show rows there (no "
        "estimate is published); on a count, that the group may hold no rows",
    }
}
TABLE_COLUMNS = (
    "statistic",
    "column",
    "estimate",
    "ci_lower",
    "ci_upper",
    "noise_scale",
    "epsilon",
    "note",
)


@dataclass
class Row:
    """One statistic for one group: estimate, 95% interval, main noise scale.

    `count` and `count_scale`: the noisy count of the group's rows or values this statistic
    released with it, and that count's scale (None where there is none; scale 0: public), read
    by the publication rule (`support`); `note`: what the published row says beside it.
    """

    estimate: float
    lower: float
    upper: float
    scale: float
    count: float | None = None
    count_scale: float = 0.0
    note: str = ""


class Computer:
    """Runs each statistic over every group, recording every epsilon it spends.

    It reads the table as aggregates only (`aggregates.Aggregates`: rows, values present,
    exact clamped sums and counts around the quantile candidates, per group; and for a quantile
    whose released interval takes finer candidates, a second pass counting around those,
    `finer_counts`), computed from a DataFrame here or by an engine where the table lives (an
    EngineTable) alike.
    """

    def __init__(
        self,
        data: pd.DataFrame | EngineTable,
        schema: Schema,
        request: Request,
        neighbouring: str,
        rng: RandomSource,
    ) -> None:
        self.schema, self.request, self.neighbouring, self.rng = schema, request, neighbouring, rng
        self.data = data
        self.aggregates = read_aggregates(data, schema, request)
        self.n = self.aggregates.n
        self.spent: list[float] = []
        self.count_upper: list[float] | None = None  # the released count's 95% upper ends
        self.skipped_ends: list[list[bool]] = []  # per quantile run, per group (public)

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
        public = values_counted_publicly(self.neighbouring, self.request.by, self.numeric(column))
        return self.n if public else None

    def may_miss(self, column: str) -> bool:
        """Whether the schema lets `column` hold missing values (public)."""
        return self.numeric(column).missing == "cell"

    def values(self, column: str) -> list[FloatArray]:
        """Each group's present values of a DataFrame's `column`, in group order.

        For checks of one building block on the values themselves (`noisy_sums`, `ends`,
        `select`); the statistics read the aggregates.
        """
        if not isinstance(self.data, pd.DataFrame):
            raise MechanismError("the values of a table counted where it lives are not read")
        spec = self.numeric(column)
        x = np.asarray(spec.numbers(self.data[column]), dtype=np.float64)
        keep = ~np.isnan(x)
        group_of = group_codes(self.schema, self.request.by, self.data)[keep]
        order = np.argsort(group_of, kind="stable")
        cuts = np.searchsorted(group_of[order], np.arange(1, len(self.request.groups)))
        return list(np.split(np.asarray(x[keep][order], dtype=np.float64), cuts))

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
        true = self.aggregates.rows() if column is None else self.aggregates.present(column)
        sized = self.public_n if column is not None else None
        scale = count_scale(epsilon, self.neighbouring, sized)
        self._spend(epsilon)
        return self.rng.add_discrete_laplace(true, scale), scale

    def noisy_sums(
        self,
        groups: list[FloatArray],
        low: float,
        high: float,
        epsilon: float,
        missing: bool = False,
    ) -> tuple[FloatArray, SumGrid]:
        """Each group's values clamped to [low, high], summed exactly (`fixed_sum`), + noise.

        The noise step of `noisy_totals` on the values themselves (its privacy checks).
        """
        exact = [fixed_sum(g, low, high) for g in groups]
        return self._noised(exact, low, high, epsilon, missing)

    def noisy_totals(self, column: str, which: str, epsilon: float) -> tuple[FloatArray, SumGrid]:
        """Per group the exact sum `which` of `column` (`aggregates`) + noise, on its grid.

        The bounds are the sum's own (`sum_bounds`), so its grid is that of its fixed point.
        """
        low, high = sum_bounds(self.numeric(column), which)
        exact = self.aggregates.fixed_sums(column, which)
        return self._noised(exact, low, high, epsilon, self.may_miss(column))

    def _noised(
        self, exact: list[int], low: float, high: float, epsilon: float, missing: bool
    ) -> tuple[FloatArray, SumGrid]:
        """Per-group exact sums over [low, high] (units of 2^-k, `sum_exponent`) + noise.

        Each sum takes discrete Laplace noise of scale Delta / epsilon on its grid (`SumGrid`:
        S >> shift, then back to the column's unit). Privacy: epsilon-DP; Delta, the grid sums'
        L1 change between neighbours, from `sum_grid`: one row's largest term, doubled under
        replace-one with groups, or, under replace-one without grouping, the sized bounds for
        the public n (`missing`: the group's values may be fewer than n; each missing one
        counts as 0, so the bounds are widened to hold 0).
        """
        grid = sum_grid(low, high, self.neighbouring, self.public_n, missing)
        scale = grid.grid_scale(epsilon)
        self._spend(epsilon)
        return grid.values(self.rng.add_discrete_laplace(grid.on_grid(exact), scale)), grid

    # -- the statistics ---------------------------------------------------------------

    def count(self, epsilon: float) -> list[Row]:
        """Row count per group. Exact (and free) under replace-one without groups: n is public.

        Interval: exact 95% for the discrete Laplace noise, cut at 0 like the estimate (no group
        has fewer rows, so the cut never uncovers the true count).
        """
        if self.public_n is not None:
            n = float(self.n)
            return [Row(n, n, n, 0.0, count=n)]
        counts, scale = self.noisy_counts(epsilon)
        half = discrete_laplace_halfwidth(scale)
        rows = [
            Row(max(c, 0.0), max(c - half, 0.0), max(c + half, 0.0), scale, c, scale)
            for c in counts.astype(float)
        ]
        self.count_upper = [row.upper for row in rows]
        return rows

    def sum(self, column: str, epsilon: float, own_count: bool = False) -> list[Row]:
        """Per-group sum of the present values of the column clamped to [lower, upper], + noise.

        Privacy: epsilon-DP; sensitivity (`noisy_totals`): about max(|lower|, |upper|) per row
        added or removed (doubled under replace-one with groups; a missing value adds 0), or
        when n is public about upper - lower, or max(upper, 0) - min(lower, 0) if values may be
        missing. With `own_count`, a noisy count of present values first, on SUPPORT_SHARE of
        epsilon (`own_counts`), and the sum on the rest. Interval: exact 95% for the noise.
        """
        counted, epsilon = self.own_counts(column, epsilon, own_count)
        sums, grid = self.noisy_totals(column, "raw", epsilon)
        half, scale = grid.halfwidth(epsilon), grid.scale(epsilon)
        return [Row(s, s - half, s + half, scale, *counted[g]) for g, s in enumerate(sums)]

    def own_counts(
        self, column: str, epsilon: float, wanted: bool
    ) -> tuple[list[tuple[float | None, float]], float]:
        """Per group (noisy count of present values, its scale), and the epsilon left.

        For a statistic that needs a count of its own (`support`); else no counts.

        Privacy: `noisy_counts` on SUPPORT_SHARE of epsilon (`support.own_shares`: the two
        parts add up to at most epsilon).
        """
        if not wanted:
            return [(None, 0.0)] * len(self.request.groups or ((),)), epsilon
        part, rest = own_shares(epsilon)
        counts, scale = self.noisy_counts(part, column)
        return [(float(c), scale) for c in counts], rest

    def mean(self, column: str, epsilon: float) -> list[Row]:
        """Per-group mean of the present values of the clamped column.

        c + (noisy sum of x - c) / (noisy count of present values), c the middle of the bounds
        (`measures.centre`), r half their distance: the sum's bound per row, r, is the
        smallest of any centre, and with it the error's spread is at most OpenDP's pipeline's
        (c = 0) for every true mean (`measures.centre` proves it).

        Privacy: epsilon-DP; epsilon/2 on the sum of x - c over [-r, r] (`noisy_totals`: about
        r per row added or removed, twice under replace-one with groups; a missing value adds
        0) and epsilon/2 on the count of present values (1 per row added or removed; under
        replace-one 2 with groups, 1 without: `noisy_counts`). All of it on the sum when the
        number of values is public (replace-one, no groups, no missing values allowed; about
        upper - lower per row replaced). Interval: exact when that number is public, else the
        linearised error (E_sum - (mean - c) E_count) / count with exact noise distributions.
        """
        spec = self.numeric(column)
        c, r = centre(spec)
        if (known := self.known_count(column)) is not None:
            sums, grid = self.noisy_totals(column, "centred", epsilon)
            half = grid.halfwidth(epsilon) / max(known, 1)
            m = float(sums[0]) / max(known, 1)
            row = Row(c + m, c + m - half, c + m + half, grid.scale(epsilon), count=float(known))
            return [clip_row(row, spec)]
        part = split(epsilon, 2)
        sums, grid = self.noisy_totals(column, "centred", part)
        scale = grid.scale(part)
        counts, count_scale = self.noisy_counts(part, column)
        rows = []
        for s, n in zip(sums, counts.astype(float), strict=True):
            if not publishable(n, count_scale):  # withheld by `support`: nothing to divide
                rows.append(Row(math.nan, math.nan, math.nan, scale, n, count_scale))
                continue
            m = min(max(s / n, -r), r)
            terms = [grid.term(1 / n, part), (m / n, count_scale)]
            half = linear_halfwidth(terms)
            row = Row(c + m, c + m - half, c + m + half, scale, n, count_scale)
            rows.append(clip_row(row, spec))
        return rows

    def variance(self, column: str, epsilon: float, root: bool = False) -> list[Row]:
        """Per-group (population) variance of the clamped column, or its square root.

        Privacy: epsilon-DP; epsilon/3 each on the noisy count of present values
        (`noisy_counts`), the sum of x - c over [-r, r] and the sum of (x - c)^2 over [0, r^2]
        (`noisy_totals`; a missing value adds 0 to both). Missing values are left
        out. Interval: the
        linearised error (E2 - 2 m1 E1 - (m2 - 2 m1^2) E_count) / count with exact noise
        distributions, clipped to [0, r^2]; for std, the square roots of its ends.
        """
        spec = self.numeric(column)
        c, r = centre(spec)
        part = split(epsilon, 3)
        s1, grid1 = self.noisy_totals(column, "centred", part)
        s2, grid2 = self.noisy_totals(column, "square", part)
        scale2 = grid2.scale(part)
        counts, count_scale = self.noisy_counts(part, column)
        rows = []
        for a, b, n in zip(s1, s2, counts.astype(float), strict=True):
            if not publishable(n, count_scale):  # withheld by `support`: nothing to divide
                rows.append(Row(math.nan, math.nan, math.nan, scale2, n, count_scale))
                continue
            m1 = min(max(a / n, -r), r)
            m2 = min(max(b / n, m1 * m1), r * r)
            v = m2 - m1 * m1
            terms = [
                grid2.term(1 / n, part),
                grid1.term(2 * m1 / n, part),
                ((m2 - 2 * m1 * m1) / n, count_scale),
            ]
            half = linear_halfwidth(terms)
            row = Row(v, max(v - half, 0.0), min(v + half, r * r), scale2, n, count_scale)
            rows.append(root_row(row) if root else row)
        return rows

    def quantile(
        self, column: str, alpha: float, epsilon: float, own_count: bool = False
    ) -> list[Row]:
        """Per-group alpha-quantile of the clamped column, by permute-and-flip selections.

        Privacy: epsilon-DP per group (the groups in parallel); two permute-and-flip
        selections composed sequentially (adaptively): the interval's two ends, chosen
        together (1 - POINT_SHARE of epsilon; `ends`), then the estimate among the candidates
        inside them (POINT_SHARE; at most CANDIDATES public candidates, `candidates`, scored by
        the signed tie-aware rank offset `quantiles.rank_offsets`, sensitivity
        `rank_sensitivity`); or, where `quantiles.ends_skipped` says so from a public or released
        upper bound on the group's rows (`rows_at_most`: groups within SKIP_MARGINS rank margins
        of the quantile), the estimate alone at the whole epsilon and the declared range as its
        interval. Either way the group's selections spend epsilon in total. With `own_count`,
        a noisy count of present values first, on SUPPORT_SHARE of epsilon (`own_counts`; its
        95% upper end is one more released bound for `rows_at_most`), and the selections on
        the rest. Missing values are left out (a
        row with none changes no score; one turned missing by replace-one moves each by at most
        what removing it does). Interval: at least 95% for every table (`ends`; the declared
        range: always).
        """
        spec = self.numeric(column)
        counted, epsilon = self.own_counts(column, epsilon, own_count)
        point, _ = quantile_shares(epsilon)
        counts = self.aggregates.rank_counts(column)
        within = [
            self.interval(values, spec, alpha, epsilon, self.rows_at_most(group, *counted[group]))
            for group, values in enumerate(counts)
        ]
        rows, skipped = [], [ends is None for ends in within]
        for group, values in enumerate(self.finer_counts(column, counts, within)):
            estimate, lower, upper = self.estimate(values, spec, alpha, epsilon, within[group])
            scale = rank_scale(alpha, epsilon if skipped[group] else point, self.neighbouring)
            rows.append(Row(float(estimate), float(lower), float(upper), scale, *counted[group]))
        self.spent += [epsilon] if any(skipped) else list(quantile_shares(epsilon))
        self.skipped_ends.append(skipped)
        return rows

    def interval(
        self,
        values: quantiles.Values,
        spec: NumericColumn,
        alpha: float,
        epsilon: float,
        rows: float | None,
    ) -> tuple[Any, Any] | None:
        """The released ends of one group's quantile interval, or None: its pick skipped.

        1 - POINT_SHARE of epsilon (`ends`), or nothing where `quantiles.ends_skipped` says so
        (the interval is then the declared range). `rows` must be public or released. The
        caller records the spend.
        """
        if quantiles.ends_skipped(spec, alpha, epsilon, self.neighbouring, rows):
            return None
        return self.ends(values, spec, alpha, quantile_shares(epsilon)[1])

    def estimate(
        self,
        values: quantiles.Values,
        spec: NumericColumn,
        alpha: float,
        epsilon: float,
        within: tuple[Any, Any] | None,
    ) -> tuple[Any, Any, Any]:
        """(estimate, lower, upper) of one group's quantile, its interval released (`interval`).

        The estimate on POINT_SHARE of epsilon among the candidates inside `within`
        (`quantiles.inner`), or on the whole epsilon among the declared range's (`within`
        None: the ends' pick skipped). The caller records the spend.
        """
        if within is None:
            return self.select(values, spec, alpha, epsilon), spec.lower, spec.upper
        point, _ = quantile_shares(epsilon)
        return self.select(values, spec, alpha, point, within), *within

    def finer_counts(
        self,
        column: str,
        counts: list[quantiles.RankCounts],
        within: list[tuple[Any, Any] | None],
    ) -> list[quantiles.RankCounts]:
        """Each group's counts at the estimate's candidates inside its released interval.

        The first pass's counts where they hold those candidates (`quantiles.inner`), else a
        second pass's around them (`aggregates.inner_tallies`). Privacy: the second pass's
        candidates are a function of the schema and the released ends alone, so choosing them
        is post-processing; the counts it returns are read only by the estimate's selection,
        whose epsilon-DP proof takes any public candidates (`quantiles.select`).
        """
        spec = self.numeric(column)
        grids: list[tuple[float, ...]] = []
        for values, ends in zip(counts, within, strict=True):
            grid = () if ends is None else quantiles.inner(spec, *ends)
            grids.append(() if set(grid) <= set(values.grid) else grid)
        finer = list(counts)
        for tally in inner_tallies(self.schema, self.request.by, column, grids):
            answer = read_tally(self.data, tally)
            for group, grid in enumerate(tally.grids or ()):
                if grid:
                    finer[group] = quantiles.RankCounts(grid, answer[group, : 2 * len(grid) + 1])
        return finer

    def rows_at_most(
        self, group: int, count: float | None = None, scale: float = 0.0
    ) -> float | None:
        """A public or released upper bound on the group's rows (so on its values), or None.

        The row count when it is public (`public_n`); else the 95% upper end of the group's
        released count, when the request holds a `count` (computed first, `run_all`), or of
        the statistic's own noisy `count` of values (of `scale`), the smaller; else None.
        """
        if self.public_n is not None:
            return float(self.public_n)
        bounds = [] if self.count_upper is None else [self.count_upper[group]]
        if count is not None:
            bounds.append(max(count + discrete_laplace_halfwidth(scale), 0.0))
        return min(bounds, default=None)

    def ends(
        self, values: quantiles.Values, spec: NumericColumn, alpha: float, epsilon: float
    ) -> tuple[float, float]:
        """`quantiles.ends` of one group's values or counts (epsilon-DP; caller records it)."""
        return quantiles.ends(values, spec, alpha, epsilon, self.neighbouring, self.rng)

    def select(
        self,
        values: quantiles.Values,
        spec: NumericColumn,
        alpha: float,
        epsilon: float,
        within: tuple[float, float] | None = None,
    ) -> float:
        """`quantiles.select` of one group's values or counts (epsilon-DP; caller records it)."""
        return quantiles.select(values, spec, alpha, epsilon, self.neighbouring, self.rng, within)

    def numeric(self, column: str) -> NumericColumn:
        return _numeric(self.schema, column)


def read_aggregates(
    data: pd.DataFrame | EngineTable, schema: Schema, request: Request
) -> Aggregates:
    """The request's aggregates of `data`: its engine's where it lives, else computed here."""
    engine = data.engine if isinstance(data, EngineTable) else "inprocess"
    first, *ranked = table_passes(schema, request, engine)
    ranks = {t.column: read_tally(data, t) for t in ranked if isinstance(t, RankTally)}
    if isinstance(first, GroupsAndRanks):
        table, ranks[first.ranks.column] = first.split(read_tally(data, first))
        return Aggregates(first.groups, table, ranks)
    assert isinstance(first, GroupTally)
    return Aggregates(first, read_tally(data, first), ranks)


def read_tally(
    data: pd.DataFrame | EngineTable, tally: GroupTally | GroupsAndRanks | RankTally
) -> IntArray:
    """One tally of `data`: its engine's where it lives, else computed here (equal answers)."""
    return data.tally(tally) if isinstance(data, EngineTable) else tally.of_frame(data)


def clip_row(row: Row, spec: NumericColumn) -> Row:
    """Clip to [lower, upper] (the true mean lies there, so coverage is unchanged)."""
    low, high = spec.lower, spec.upper
    estimate, lower, upper = (min(max(v, low), high) for v in (row.estimate, row.lower, row.upper))
    return replace(row, estimate=estimate, lower=lower, upper=upper)


def root_row(row: Row) -> Row:
    """The square roots (variance to standard deviation; monotone, so coverage is kept)."""
    root = math.sqrt
    return replace(row, estimate=root(row.estimate), lower=root(row.lower), upper=root(row.upper))


def computed(
    data: pd.DataFrame | EngineTable,
    schema: Schema,
    request: Request,
    *,
    neighbouring: str,
    rng: RandomSource,
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, float, Computer]:
    """The statistics table, the exact epsilon spent and the Computer it ran.

    The epsilon is the sum of every piece; the Computer keeps the public record of skipped
    interval picks.

    Privacy: sequential composition of each statistic's epsilon-DP release (its share of the
    request), adaptively (`run_all`); within a statistic the groups compose in parallel (see
    the module docstring).
    """
    run = Computer(data, schema, request, neighbouring, rng)
    records = []
    for stat, (rows, used) in zip(request.statistics, run_all(run, progress), strict=True):
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
                    "note": row.note,
                }
            )
    total = sum((Fraction(e) for e in run.spent), Fraction(0))
    columns = [*TABLE_COLUMNS[:2], *request.by, *TABLE_COLUMNS[2:]]
    return pd.DataFrame(records, columns=columns), _round_up(total), run


def run_all(run: Computer, progress: Progress | None = None) -> list[tuple[list[Row], Fraction]]:
    """Each statistic's rows and exact spend, in request order, each group published or not.

    Whether a group's row is published or withheld is `support`'s rule (`published`). The
    counts are computed first, then the statistics that release a count of present values
    (mean, variance, std), then the rest, so every count a statistic's rule reads
    (`support.sources`) is released before it.

    Privacy: adaptive sequential composition of the statistics' epsilon-DP releases; a quantile
    may read the released counts' 95% upper ends (`Computer.rows_at_most`), and the rule reads
    released noisy counts (`published`): post-processing of epsilon-DP outputs already spent on.
    """
    request = run.request
    found = support.sources(run.schema, request, run.neighbouring)
    order = sorted(range(len(request.statistics)), key=lambda i: _rank(request.statistics[i]))
    results: dict[int, tuple[list[Row], Fraction]] = {}
    for done, i in enumerate(order):
        before = len(run.spent)
        stat, source = request.statistics[i], found[i]
        rows = _run_one(run, stat, request.shares[i], own_count=source.kind == "own")
        deciding = rows if source.statistic is None else results[source.statistic][0]
        rows = published(stat, rows, deciding)
        results[i] = rows, sum((Fraction(e) for e in run.spent[before:]), Fraction(0))
        if progress:
            progress(done + 1, len(order))
    return [results[i] for i in range(len(order))]


def _rank(stat: Statistic) -> int:
    """Run order: counts, then the statistics with a count of present values, then the rest."""
    return 0 if stat.kind == "count" else 1 if stat.kind in support.COUNTED else 2


def published(stat: Statistic, rows: list[Row], deciding: list[Row]) -> list[Row]:
    """`rows` with each group's estimate withheld where its deciding count shows no rows.

    `deciding`: the same groups' rows of the statistic that released that count. A count
    keeps its value and says MAY_BE_EMPTY instead. Post-processing of released noisy counts
    (`support.publishable`).
    """
    out = []
    for row, counted in zip(rows, deciding, strict=True):
        if support.publishable(counted.count, counted.count_scale):
            out.append(row)
        elif stat.kind == "count":
            out.append(replace(row, note=support.MAY_BE_EMPTY))
        else:
            out.append(
                replace(
                    row, estimate=math.nan, lower=math.nan, upper=math.nan, note=support.TOO_FEW
                )
            )
    return out


def _run_one(run: Computer, stat: Statistic, epsilon: float, own_count: bool = False) -> list[Row]:
    if stat.kind == "count":
        return run.count(epsilon)
    assert stat.column is not None
    if stat.kind == "sum":
        return run.sum(stat.column, epsilon, own_count)
    if stat.kind == "mean":
        return run.mean(stat.column, epsilon)
    if stat.kind in ("variance", "std"):
        return run.variance(stat.column, epsilon, root=stat.kind == "std")
    assert stat.alpha is not None
    return run.quantile(stat.column, stat.alpha, epsilon, own_count)


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


def run_statistics(inputs: MechanismInputs[pd.DataFrame | EngineTable]) -> ReleaseOutput:
    """The catalogue's entry point: statistics.csv, and the spend recorded piece by piece.

    Privacy: pure epsilon-DP for one row under `neighbouring` (delta is not used); each
    statistic's sensitivity and guarantee are in its Computer method's docstring. `data` is a
    DataFrame or an EngineTable, whose engine computes the aggregates where the table lives
    (`aggregates`): only those leave it, and the noise is added here.
    """
    schema, epsilon, neighbouring = inputs.schema, inputs.epsilon, inputs.neighbouring
    if math.isinf(epsilon):
        raise MechanismError("epsilon must be finite for summary statistics")
    request = selected_request(
        schema, inputs.params, inputs.columns, epsilon=epsilon, neighbouring=neighbouring
    )
    table, spent, run = computed(
        inputs.data,
        schema,
        request,
        neighbouring=neighbouring,
        rng=inputs.rng,
        progress=inputs.progress,
    )
    return ReleaseOutput(
        files={"statistics.csv": csv_bytes(table)},
        manifest={
            "parameters": {
                **public_parameters(schema, request),
                "sensitivities": sensitivities(schema, request, neighbouring, run.n),
                "quantile_interval_picks": interval_picks(run),
                **publication(schema, request, neighbouring),
            }
        },
        spent={"epsilon": spent, "delta": 0.0},
    )


def publication(schema: Schema, request: Request, neighbouring: str) -> dict[str, Any]:
    """The manifest's statement of which groups' estimates are published (`support`).

    The rule and, per statistic, the noisy count that decides it. Public: from the request and
    the schema.
    """
    found = support.sources(schema, request, neighbouring)
    return {
        "publication_rule": support.rule_text(),
        "published_where": {
            stat.text: source.words(request)
            for stat, source in zip(request.statistics, found, strict=True)
        },
    }


def interval_picks(run: Computer) -> dict[str, list[str]]:
    """Per quantile statistic and group: how its interval was made ("picked" or "declared range").

    "picked": its ends were chosen with 25% of its epsilon; "declared range": that pick was
    skipped and the estimate had the whole epsilon. Public: a function of the request, the
    schema and the released counts (`ends_skipped`).
    """
    quantile_stats = [s.text for s in run.request.statistics if s.alpha is not None]
    return {
        text: ["declared range" if skip else "picked" for skip in skipped]
        for text, skipped in zip(quantile_stats, run.skipped_ends, strict=True)
    }


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
