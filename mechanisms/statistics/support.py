"""Which groups get published estimates: only those a noisy count says hold rows.

The groups are every combination of the declared categories, with "(other)" and "(missing)"
where the schema declares them, whether or not the data holds such rows (the groups never
depend on the data). A group with no rows still gets noisy outputs, and a mean or a median of
nothing is the noise alone, or the middle of the declared range: a number that looks like a
finding. So a group's estimate of a statistic is published only where a noisy count says rows
are there, by the rule the histograms and MWEM apply to their "(missing)" and "(other)" cells
(`accuracy.told_from_zero`): the count must be above the one-sided 99.9% quantile of its
noise at a true count of 0. Otherwise the row says TOO_FEW, with an empty estimate and
interval. The rule holds for every group alike, declared categories included (any of them may
be empty). A count itself is always published (it is the evidence); where it is not told from 0
its row says MAY_BE_EMPTY.

The count each statistic reads (`sources`; a public choice, from the request and the schema):

- count: the count itself;
- mean, variance, std: their own noisy count of the values present (their divisor);
- sum and quantiles: the public number of values (replace-one without groups, on a column
  that cannot hold missing values: every group holds n > 0 values, nothing to decide); else
  the request's noisy count of rows, when the column cannot hold missing values, or the noisy
  count of the column's present values released by a mean, variance or std of the request,
  whichever has the smallest noise (the first on a tie); else a noisy count of present values
  of its own, on SUPPORT_SHARE of the statistic's epsilon.

Privacy: the decision is post-processing of released noisy counts and of public noise scales;
an own count is one more piece of the statistic's epsilon (sequential composition within the
statistic; its shares add up to the statistic's share exactly).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from mechanisms.accounting import float_at_most
from mechanisms.accuracy import ZERO_LEVEL, told_from_zero, zero_threshold
from mechanisms.schema import NumericColumn, Schema
from mechanisms.statistics.measures import count_scale
from mechanisms.statistics.request import Request, Statistic

TOO_FEW = "too few rows to publish"
MAY_BE_EMPTY = "the group may hold no rows: its noisy count is not told from 0"
SUPPORT_SHARE = 0.25  # of a sum's or quantile's epsilon, when it needs a count of its own
COUNTED = ("mean", "variance", "std")  # statistics that release a count of present values


@dataclass(frozen=True)
class Source:
    """Where a statistic's groups get the noisy count the rule reads.

    kind: "itself" (a count, or the divisor of a mean, variance or std), "public" (the public
    number of values), "statistic" (the noisy count of `statistic`, an earlier one of the
    request), or "own" (a count of its own, on SUPPORT_SHARE of its epsilon).
    """

    kind: str
    statistic: int | None = None

    def words(self, request: Request) -> str:
        """Which count decides, in words (the manifest states it per statistic)."""
        if self.kind == "itself":
            return "its own noisy count"
        if self.kind == "public":
            return "the public number of rows"
        if self.kind == "own":
            return f"a noisy count of present values on {SUPPORT_SHARE:.0%} of its epsilon"
        assert self.statistic is not None
        other = request.statistics[self.statistic]
        what = "rows" if other.kind == "count" else f"present values of {other.column}"
        return f"the noisy count of {what} released with {other.text}"


def sources(schema: Schema, request: Request, neighbouring: str) -> list[Source]:
    """Per statistic, where its groups' deciding count comes from (module docstring)."""
    return [_source(schema, request, neighbouring, stat) for stat in request.statistics]


def _source(schema: Schema, request: Request, neighbouring: str, stat: Statistic) -> Source:
    if stat.kind == "count" or stat.kind in COUNTED:
        return Source("itself")
    assert stat.column is not None
    may_miss = _numeric(schema, stat.column).missing == "cell"
    if neighbouring == "replace-one" and not request.by and not may_miss:
        return Source("public")
    offers = [
        (count_epsilon(other, share), k)
        for k, (other, share) in enumerate(zip(request.statistics, request.shares, strict=True))
        if (other.kind == "count" and not may_miss and share > 0)
        or (other.kind in COUNTED and other.column == stat.column)
    ]
    if not offers:
        return Source("own")
    best = max(offers, key=lambda offer: (offer[0], -offer[1]))
    return Source("statistic", best[1])


def count_epsilon(stat: Statistic, share: float) -> float:
    """The epsilon of the noisy count a statistic releases (`Computer`'s own split)."""
    if stat.kind == "count":
        return share
    return split(share, 2 if stat.kind == "mean" else 3)


def split(epsilon: float, parts: int) -> float:
    """epsilon / parts, rounded down (so the parts never add up to more than epsilon)."""
    return float_at_most(Fraction(epsilon) / parts)


def own_shares(epsilon: float) -> tuple[float, float]:
    """(the own count's epsilon, the rest) of a statistic that counts for itself.

    The two add up to at most epsilon, exactly.
    """
    part = float_at_most(Fraction(epsilon) * Fraction(SUPPORT_SHARE))
    return part, float_at_most(Fraction(epsilon) - Fraction(part))


def source_scale(
    schema: Schema,
    request: Request,
    neighbouring: str,
    index: int,
    public_n: int | None,
) -> float:
    """The noise scale of the count that decides statistic `index`'s groups (0: public).

    Public: the same scales the release uses (`count_scale` at each piece's epsilon); the
    plan states the threshold they give.
    """
    stat, share = request.statistics[index], request.shares[index]
    source = sources(schema, request, neighbouring)[index]
    if source.kind == "public" or share == 0 or _known(schema, stat, public_n):
        return 0.0
    if source.kind == "statistic":
        assert source.statistic is not None
        stat, share = request.statistics[source.statistic], request.shares[source.statistic]
    elif source.kind == "own":
        share = own_shares(share)[0]
    piece = count_epsilon(stat, share) if stat.kind in COUNTED else share
    return count_scale(piece, neighbouring, public_n if stat.kind != "count" else None)


def _known(schema: Schema, stat: Statistic, public_n: int | None) -> bool:
    """Whether a mean's number of values is public (it then divides by n, no count)."""
    if stat.kind != "mean" or public_n is None or stat.column is None:
        return False
    return _numeric(schema, stat.column).missing != "cell"


def threshold(scale: float) -> float:
    """The most a noisy count of `scale` may be and still not be told from 0 (rows)."""
    return zero_threshold(scale, 1, ZERO_LEVEL)


def publishable(count: float | None, scale: float) -> bool:
    """Whether a group with this released noisy count gets its estimate (None: public)."""
    return count is None or bool(told_from_zero(count, scale))


def rule_text() -> str:
    """The rule as the manifest states it."""
    return (
        "a group's estimate is published only where the noisy count named in "
        f"published_where is above the one-sided {1 - ZERO_LEVEL:.1%} quantile of its noise "
        f'at a true count of 0; otherwise its row says "{TOO_FEW}"'
    )


def _numeric(schema: Schema, column: str) -> NumericColumn:
    spec = schema.column(column)
    assert isinstance(spec, NumericColumn)
    return spec
