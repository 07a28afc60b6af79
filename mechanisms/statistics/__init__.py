"""Summary statistics: counts, sums, means, variances, standard deviations and quantiles by group.

A request names statistics as ``kind:column`` (``count``, ``sum:income``, ``mean:income``,
``variance:age``, ``std:age``, ``median:age``, ``q25:age`` for the 25th percentile), optionally
grouped by one or two categorical columns (``by``). The groups are every combination of the
declared categories (plus "(other)" where declared), never discovered from the data: an empty
group gets noisy outputs like any other, and its estimates are withheld unless a noisy count
shows rows there (below). The budget is split across the statistics, evenly or
by `weights` (one positive number per statistic); each statistic's share is spent on every group
at once (the groups are disjoint, so one row touches at most two of them, see below).

Building blocks: OpenDP's count transformations give, through their stability maps, the
counts' sensitivity. The statistics read the table as aggregates only (`aggregates`: per group
the rows, the values present, exact fixed-point sums of the clamped values and counts around the
public quantile candidates, and, once a quantile's interval is released, counts around the finer
candidates inside them), computed here or by an engine where the table lives alike. A sum's
noise is added to the exact fixed-point sum on a grid (`measures.sum_grid`: S >> 32), scaled to
one row's largest whole-number term there, at most OpenDP's map of its own bounded float sum
(below it for bounds around 0, half of it for bounds symmetric about 0); no float rounding
enters the privacy argument. A quantile's estimate scores a public grid of candidates by a
signed tie-aware rank offset (`quantiles.rank_offsets`, its sensitivity proven there) for
permute-and-flip (report-noisy-max with exponential noise, as OpenDP's own quantile
measurement). All noise comes from
`mechanisms.noise` (OpenDP's samplers on the secure source): integer discrete Laplace for counts
and for sums on their grid, and report-noisy-max with exponential noise (OpenDP's sampler) for
the quantiles' selections.

Sensitivity across groups. A transformation t on one group has stability t.map(d) for d rows
added or removed in that group. Under add/remove one row lands in one group: the per-group
vector moves by t.map(1) in L1. Under replace-one a row either stays in its group (d = 2 in the
symmetric distance) or moves between two groups (d = 1 in each): the vector moves by at most
max(t.map(2), 2 t.map(1)). The sums follow the same rule with their own bound per row
(`measures.sum_grid`). Without grouping under replace-one the row count n is public, so a
changed row moves a sum by at most about upper - lower and the count is released exactly
without spending anything.

Values are clamped to the schema's [lower, upper]; the "true value" each interval is for is the
statistic of the clamped values. Means and variances work on values centred at the bounds'
midpoint c (sums of x - c over [-r, r]), which keeps the count's noise from inflating them and
gives the sum the smallest bound per row; it keeps a mean's error at or below OpenDP's
pipeline's on any data (`measures.centre`).

Intervals (95%, every released number has one; computed from released values and public noise
scales only, so they are post-processing):
- count, sum, and the mean when n is public: exact, from the noise distribution itself;
- mean and variance from noisy sums over a noisy count: the exact noise distribution of the
  first-order (linearised) error, with plug-in coefficients; approximate, close to 95% once a
  group holds many more rows than the count's noise scale. A group whose noisy count is not
  clearly positive gets the whole range [lower, upper] (or [0, max variance]);
- quantiles: at least 95% on every table: the two ends of the interval are one permute-and-
  flip pick among pairs of candidates with 25% of the statistic's epsilon, each end scored by the
  distance from a rank offset M (rows, public: the selection's own 95% rank-error bound at that
  epsilon) to the span of ranks the candidate covers, not by a fraction of n, so no count is needed;
  the proof is in `quantiles.ends`. The estimate then gets POINT_SHARE (75%), picked among the
  candidates inside the interval. Where a public or released upper bound on a group's rows (the
  public n under replace-one without groups, or the 95% upper end of the request's own `count`,
  which is computed first) shows the group within two margins M of the quantile on its wider
  side (`quantiles.ends_skipped`: the interval would hold half the group or more, and the
  estimate's noise, 4/3 of the whole epsilon's, would set its error), the pick is skipped: the
  interval is the declared range (it always holds the quantile) and the estimate gets the
  whole epsilon. The choice is post-processing
  of released values (adaptive composition) and the manifest states it per group
  (`quantile_interval_picks`).

Quantile candidates are public round numbers (`candidates`): the multiples of the finest step
of 1, 2 or 5 times a power of ten, no finer than the column's declared precision, that leaves
at most CANDIDATES of them (END_CANDIDATES for the interval's ends), and the bounds. Values
recorded at a round precision are candidates themselves, so a quantile on tied values (many
zeros, whole ages) can be picked exactly.

Groups the data may not hold: any group may be empty ("(other)" and "(missing)" most often), and
a mean or a median of no rows is noise that looks like a finding. A group's estimate is published
only where a noisy count shows rows there, by the rule of MWEM's structural cells (above the
one-sided 99.9% quantile of the count's noise at 0: `accuracy.told_from_zero`); elsewhere its
row's note says "too few rows to publish" and its estimate and interval are empty. Each
statistic reads the count `support.sources` names (its own count of values, the request's count,
a mean's count of the same column, or a count of its own on a quarter of its epsilon); the
decision is post-processing of released noisy counts, and the manifest states the rule and the
count per statistic (`publication_rule`, `published_where`).

Missing values: a column declared `"missing": "cell"` may hold them; they are left out of its
statistics, which are computed over the present values. How many values are present is then
not public under either relation, so means and variances divide by a noisy count of present
values (OpenDP's count over those rows), and under replace-one, where one row may turn from
present to missing, each sensitivity allows for that (`sum_grid`, `noisy_counts`).
The manifest (`missing_values_left_out`) and the portal say which columns this concerns; the
manifest also states each statistic's guarantee and the sensitivity of each of its noisy
pieces (`sensitivity.sensitivities`).
Grouping columns may have a "(missing)" cell: it is one more declared group.

Modules: `request` (parsing, budget split), `aggregates` (what is read of the table, from
any engine), `measures` (the counts' and sums' noise, half-widths), `quantiles`, `compute`
(the statistics over every group, the release), `plan` (the public preview, by group size),
`sensitivity` (the manifest's sensitivities), `support` (which groups' estimates are
published).
"""

from mechanisms.statistics.compute import (
    COLUMNS,
    FILES,
    TABLE_COLUMNS,
    Computer,
    Row,
    missing_columns,
    public_parameters,
    run_statistics,
    selected_request,
)
from mechanisms.statistics.measures import (
    LEVEL,
    count_scale,
    discrete_laplace_halfwidth,
    group_sensitivity,
    linear_halfwidth,
    sum_grid,
)
from mechanisms.statistics.plan import statistics_plan
from mechanisms.statistics.quantiles import (
    CANDIDATES,
    END_CANDIDATES,
    POINT_SHARE,
    candidates,
    margin_reaches,
    quantile_rank_margin,
    quantile_shares,
    rank_scale,
    rank_sensitivity,
)
from mechanisms.statistics.request import (
    KINDS,
    Request,
    Statistic,
    parse_request,
    parse_statistic,
)

__all__ = [
    "CANDIDATES",
    "COLUMNS",
    "END_CANDIDATES",
    "FILES",
    "KINDS",
    "LEVEL",
    "POINT_SHARE",
    "TABLE_COLUMNS",
    "Computer",
    "Request",
    "Row",
    "Statistic",
    "candidates",
    "count_scale",
    "discrete_laplace_halfwidth",
    "group_sensitivity",
    "linear_halfwidth",
    "missing_columns",
    "parse_request",
    "parse_statistic",
    "public_parameters",
    "margin_reaches",
    "quantile_rank_margin",
    "quantile_shares",
    "rank_scale",
    "rank_sensitivity",
    "run_statistics",
    "selected_request",
    "statistics_plan",
    "sum_grid",
]
