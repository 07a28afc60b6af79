"""The aggregates the summary statistics read, the same from the rows here or from any engine.

Every statistic reads per group (the cells of the `by` columns; one group without them):
- the rows, and per numeric column the values present (not NULL, not NaN, readable);
- up to three exact sums over the present values x (those the request's statistics read,
  `needed_sums`), each clamped as the statistic clamps them:
  "raw" sum(clip(x, lower, upper)) (sums), "centred" sum(clip(x - c, -r, r)) (means and
  variances), "square" sum(clip(x - c, -r, r)^2) (variances), c and r the bounds' midpoint and
  half-width (`measures.centre`);
- per quantile column, the counts of the clamped values around each public candidate
  (`quantiles.RankCounts`): in each open gap between candidates and on each candidate; once a
  quantile's interval is released, the same around the finer candidates inside each group's
  interval (a second pass, `inner_tallies`: public given the release).

Exact sums. A floating-point sum depends on the order of its terms, which no engine fixes (a
GROUP BY adds in parallel). So each clamped value v is read in fixed point first:
w = floor(v 2^k), with k = `sum_exponent` of the public bounds (|w| <= 2^61, a spacing of at
most 2^-61 of the bound), and the words are summed as whole numbers, exact in any order: where
the engine's sum of BIGINT is exact past 64 bits (`Dialect.wide_sums`: HUGEINT in DuckDB,
NUMERIC in PostgreSQL) as one sum per term, elsewhere (here, on Dask and Spark, whose sums are
int64) split into two limbs w = hi 2^31 + lo (0 <= lo < 2^31) summed apart, each sum within
int64 for groups of up to MAX_GROUP_ROWS rows. Either way the answer holds each exact sum S in
one form, (S >> 31, S mod 2^31) (`settled`: equal on every engine), and the sum is S 2^-k,
rounded once to a float. One sum per term halves the sums the engine computes (10^7 rows,
benchmarks/engine_overhead.py: PostgreSQL's groups' query 8.4 s with limbs, 3.4 s without).
Every step before the sums is an IEEE double operation on one value (clip, subtract, multiply
by a power of two, floor), which numpy, DuckDB and PostgreSQL round alike, so the words, and so
the sums, are equal on every engine. The SQL guards two steps PostgreSQL refuses rather than
rounds (overflow, and a product that underflows to zero) by clamps that give the value numpy
computes (see `SquareGuard` and `PRE_CLAMP`); DuckDB, whose doubles overflow and underflow as
numpy's do (`Dialect.ieee`), runs numpy's steps unguarded. PostgreSQL and DuckDB, where a
missing value clamps as +inf does (`Dialect.missing_clamps_high`), sum every row's words
unmasked and take the words of +inf off once per missing value (`GroupTally.unmasked_query`).

Privacy: aggregates only, exact, no noise: the statistics add it (`compute`). Each row's fixed-
point term is a whole number in [floor(low 2^k), floor(high 2^k)] for a clamp to [low, high], so
one row moves a group's exact sum S by a whole number of units that the schema bounds, and the
noise is added to S itself (on the grid S >> shift, `measures.sum_grid`), never to a float
rounded from it. Groups of more than MAX_GROUP_ROWS rows are refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray, FloatArray, IntArray
from mechanisms.counting.sql import (
    MAX_EDGES,
    Dialect,
    Guess,
    Spacing,
    clamp_sql,
    column_sql,
    few_texts,
    flat_index,
    number,
    number_sql,
    raw_texts,
    shifted,
    slot_search,
)
from mechanisms.errors import MechanismError
from mechanisms.schema import NumericColumn, Schema
from mechanisms.statistics.measures import MAX_GROUP_ROWS, centre, sum_exponent
from mechanisms.statistics.quantiles import RankCounts, quantile_grid
from mechanisms.statistics.request import Request

LIMB_BITS = 31  # floor(v 2^k) = hi 2^31 + lo: limbs of at most 31 bits (WORD_BITS = 61)
MAX_BOUND = 2.0**60  # |bounds| up to this: k >= 0, so no product underflows to zero
MIN_BOUND = 2.0**-400  # a nonzero bound at least this: 2^k and the squares stay normal
PRE_CLAMP = 2.0**1000  # SQL clamps x to +-PRE_CLAMP before x - c (no overflow; same clip)
SUMS = ("raw", "centred", "square")
PER_COLUMN = 1 + 2 * len(SUMS)  # values present, then (S >> 31, S mod 2^31) of each sum S
LOW_MASK = (1 << LIMB_BITS) - 1
# (group, slot) pairs up to which the groups' sums and a column's ranks share a pass
# (`table_passes`): the engine returns a row of sums per pair, added up here
JOINED_ROWS = 2**17
# The engines that read them in one pass. Not PostgreSQL: not knowing how few (group, slot)
# pairs there are, its planner sorts every row to group them once the sums' states are wide
# (10^8 rows: 67 s, against 19 s in two passes; at 10^7 it hashed them, 0.6 of two passes)
ONE_PASS_ENGINES = frozenset({"inprocess", "duckdb", "dask", "spark"})


def sum_bounds(spec: NumericColumn, which: str) -> tuple[float, float]:
    """The clamp of one of SUMS: [lower, upper], [-r, r] or [0, r^2]."""
    if which == "raw":
        return spec.lower, spec.upper
    _, r = centre(spec)
    return (-r, r) if which == "centred" else (0.0, r * r)


def check_bounds(spec: NumericColumn) -> None:
    """Refuse bounds whose sums cannot be made exactly alike everywhere, in words."""
    for value in (spec.lower, spec.upper, centre(spec)[1]):
        if abs(value) > MAX_BOUND or 0 < abs(value) < MIN_BOUND:
            raise MechanismError(
                f"column {spec.name!r}: bounds [{spec.lower}, {spec.upper}] are too far from "
                "1 for exact sums (each bound and half their distance must be 0 or between "
                "2^-400 and 2^60 in size): declare the column in another unit"
            )


def limbs(values: FloatArray, k: int) -> tuple[IntArray, IntArray]:
    """(hi, lo) of floor(v 2^k) = hi 2^31 + lo, 0 <= lo < 2^31, for values clamped to bounds."""
    word = np.floor(values * 2.0**k)
    high = np.floor(word * 2.0**-LIMB_BITS)
    low = word - high * 2.0**LIMB_BITS
    return high.astype(np.int64), low.astype(np.int64)


def total(high: int, low: int, k: int) -> float:
    """(high 2^31 + low) 2^-k, rounded once to the nearest float."""
    return float(Fraction((int(high) << LIMB_BITS) + int(low)) / Fraction(2) ** k)


def fixed_sum(values: Any, low: float, high: float) -> int:
    """sum(clip(values, low, high)) as the aggregates compute it: S in units of 2^-k."""
    k = sum_exponent(low, high)
    high_limbs, low_limbs = limbs(np.clip(np.asarray(values, dtype=np.float64), low, high), k)
    return (int(high_limbs.sum()) << LIMB_BITS) + int(low_limbs.sum())


def exact_sum(values: Any, low: float, high: float) -> float:
    """`fixed_sum` in the column's unit, rounded once to the nearest float."""
    exact = fixed_sum(values, low, high)
    return total(exact >> LIMB_BITS, exact & LOW_MASK, sum_exponent(low, high))


def clamped_terms(x: FloatArray, spec: NumericColumn) -> dict[str, FloatArray]:
    """Each of SUMS' terms of present values x (numpy: the reference the SQL repeats)."""
    c, r = centre(spec)
    with np.errstate(over="ignore"):  # x - c of +-1e308 may be +-inf: clipped to +-r
        g = np.clip(x - c, -r, r)
    return {"raw": np.clip(x, spec.lower, spec.upper), "centred": g, "square": g * g}


@dataclass(frozen=True)
class GroupTally:
    """Per group: rows, and per numeric column its present values and SUMS, exact.

    Shape (groups, 1 + PER_COLUMN * len(numeric)), int64: column 0 the rows; then per numeric
    column: values present, then each of SUMS in order as its fixed-point sum S written
    (S >> 31, S mod 2^31) (`settled`). With `wanted`, per numeric column the sums its
    statistics read (`needed_sums`); the others are not computed and read 0.
    """

    schema: Schema
    by: tuple[str, ...]
    numeric: tuple[str, ...]
    wanted: tuple[tuple[str, ...], ...] | None = None

    def terms(self, column: str) -> tuple[str, ...]:
        """The SUMS computed for `column` (all of them without `wanted`)."""
        return SUMS if self.wanted is None else self.wanted[self.numeric.index(column)]

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys([*self.numeric, *self.by]))

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.groups, 1 + PER_COLUMN * len(self.numeric))

    @property
    def groups(self) -> int:
        return math.prod(self.schema.domain_shape(list(self.by))) if self.by else 1

    def spec(self, column: str) -> NumericColumn:
        found = self.schema.column(column)
        assert isinstance(found, NumericColumn)  # parse_request checked it
        return found

    def of_frame(self, frame: pd.DataFrame) -> AnyArray:
        return self.of_groups(frame, group_codes(self.schema, self.by, frame))

    def of_groups(self, frame: pd.DataFrame, group: IntArray) -> AnyArray:
        """`of_frame`, given each row's group (`group_codes`)."""
        out = np.zeros(self.shape, dtype=np.int64)
        np.add.at(out[:, 0], group, 1)
        for j, column in enumerate(self.numeric):
            spec, base = self.spec(column), 1 + PER_COLUMN * j
            check_bounds(spec)
            x = np.asarray(spec.numbers(frame[column]), dtype=np.float64)
            present = ~np.isnan(x)
            where, terms = group[present], clamped_terms(x[present], spec)
            np.add.at(out[:, base], where, 1)
            for i, which in enumerate(SUMS):
                if which not in self.terms(column):
                    continue
                high, low = limbs(terms[which], sum_exponent(*sum_bounds(spec, which)))
                np.add.at(out[:, base + 1 + 2 * i], where, high)
                np.add.at(out[:, base + 2 + 2 * i], where, low)
        return self.settled(out)

    def sum_columns(self) -> list[int]:
        """The answer's columns holding each sum's hi (its lo the next)."""
        return [
            1 + PER_COLUMN * j + 1 + 2 * i
            for j in range(len(self.numeric))
            for i in range(len(SUMS))
        ]

    def settled(self, answer: AnyArray) -> AnyArray:
        """Each sum S as (S >> 31, S mod 2^31), however its limbs were added up."""
        out = np.array(answer, dtype=np.int64)
        high = self.sum_columns()
        low = [h + 1 for h in high]
        out[:, high] += out[:, low] >> LIMB_BITS
        out[:, low] &= LOW_MASK
        return out

    def query(
        self, dialect: Dialect, kinds: dict[str, str], table: str, ranks: RankTally | None = None
    ) -> str:
        """Three nested SELECTs: read and test each value, clamp it, then sum the words.

        Two whole numbers per sum, hi and lo with S = hi 2^31 + lo: the sums of the limbs, or
        where the dialect's sums are wide (`Dialect.wide_sums`) 0 and the words' one sum. Where
        a missing value clamps as +inf does (`Dialect.missing_clamps_high`), one SELECT with no
        mask instead (`unmasked_query`). With `ranks` (`GroupsAndRanks`), per group and slot of
        that column's value (`RankTally.slot_sql`) instead of per group: rows (g, s, ...).
        """
        if dialect.missing_clamps_high:
            return self.unmasked_query(dialect, kinds, table, ranks)
        read, clamp, sums = [group_sql(dialect, self.schema, self.by, kinds) + " AS g"], [], []
        for j, column in enumerate(self.numeric):
            spec = self.spec(column)
            check_bounds(spec)
            value, missing = number_sql(dialect, spec, kinds[column])
            read += [f"{value} AS v{j}", f"{missing} AS m{j}"]
            safe = clamp_sql(dialect, f"v{j}", -PRE_CLAMP, PRE_CLAMP)
            terms = {"raw": clamp_sql(dialect, f"v{j}", spec.lower, spec.upper)}
            for which, shift in shifts(spec).items():
                if which not in raw_alike(spec):
                    moved = f"({safe} - {number(dialect, shift)})"
                    terms[which] = clamp_sql(dialect, moved, *sum_bounds(spec, which))
            clamp += [
                f"m{j}",
                *(f"CASE WHEN m{j} THEN NULL ELSE {t} END AS {w}{j}" for w, t in terms.items()),
            ]
            sums.append(f"sum(CASE WHEN m{j} THEN 0 ELSE 1 END)")
            for which in SUMS:
                k = sum_exponent(*sum_bounds(spec, which))
                word = _word_sql(dialect, which, j, k, raw_alike(spec))
                sums += word_sums(dialect, word) if which in self.terms(column) else ["0", "0"]
        keys = ["g"] if ranks is None else ["g", f"{self.slot_sql(dialect, ranks)} AS s"]
        inner = f"SELECT {', '.join(read)} FROM {table}"  # noqa: S608  # nosec B608: quoted
        middle = f"SELECT {', '.join([*keys, *clamp])} FROM ({inner}) AS r"  # noqa: S608  # nosec B608
        names = ["g"] if ranks is None else ["g", "s"]
        selected = ", ".join([*names, "count(*)", *sums])
        return f"SELECT {selected} FROM ({middle}) AS c GROUP BY {', '.join(names)}"  # noqa: S608  # nosec B608

    def slot_sql(self, dialect: Dialect, ranks: RankTally) -> str:
        """The slot of the read value `v{j}` of the ranks' column (any, for a missing value)."""
        return ranks.slot_sql(dialect, ranks.grid, f"v{self.numeric.index(ranks.column)}")

    def unmasked_query(
        self, dialect: Dialect, kinds: dict[str, str], table: str, ranks: RankTally | None = None
    ) -> str:
        """The sums over every row, less the words of +inf once per missing value.

        PostgreSQL inlines the nested SELECTs of `query` and evaluates each reference to a
        clamped value anew, its missing test included (the square read the centred value twice);
        on DuckDB this form alone saves nothing measurable, but it is the one that groups the
        raw texts first (`grouped_first`): both together, 0.47 against 0.63 s of CPU for the
        benchmark's 10^7 rows. Here every term reads the value itself: a missing one (NULL,
        which greatest() and least() skip, or NaN, which they rank above every number) clamps
        to each term's upper bound, exactly as +inf does, so each group's sum over all its rows
        is the sum over its present values plus (rows - present) times the word of +inf
        (`high_words`), which the query takes off (exact, in `Dialect.wide`, per group). The
        square reads |g| = min(r, |x - c|), equal to |clip(x - c, -r, r)|. x - c is not clamped
        first: |c| <= 2^61 (`check_bounds`) against 2^970 for the difference of a finite x to
        round to infinity. The values present: `present_count`.
        """
        assert dialect.wide_sums  # the sums over every row and their correction are exact
        read: list[str] = []
        sums: list[str] = []
        for j, column in enumerate(self.numeric):
            spec = self.spec(column)
            check_bounds(spec)
            value, missing = number_sql(dialect, spec, kinds[column])
            reads, present = present_count(dialect, value, missing, j)
            read += reads
            lost = f"CAST(count(*) - {present} AS {dialect.wide})"
            sums.append(present)
            high = high_words(spec)
            for which, word in unmasked_words(dialect, spec, f"v{j}").items():
                if which not in self.terms(column):
                    sums += ["0", "0"]
                    continue
                zero, total = word_sums(dialect, word)  # wide: "0" and the words' one sum
                sums += [zero, f"{total} - {lost} * {high[which]}"]

        keys = [] if ranks is None else [self.slot_sql(dialect, ranks)]

        def rows(texts: list[str]) -> tuple[str, list[str], list[str]]:
            source = f"(SELECT {', '.join([*texts, *read])} FROM {table}) AS r"  # noqa: S608  # nosec B608: quoted
            return source, keys, ["count(*)", *sums]

        first = grouped_first(dialect, self.schema, self.by, kinds, rows)
        if first is not None:
            return first
        group = group_sql(dialect, self.schema, self.by, kinds)
        inner = f"SELECT {', '.join([group + ' AS g', *read])} FROM {table}"  # noqa: S608  # nosec B608: quoted
        selected = ", ".join(["g", *keys, "count(*)", *sums])
        positions = ", ".join(str(i + 1) for i in range(1 + len(keys)))
        return f"SELECT {selected} FROM ({inner}) AS r GROUP BY {positions}"  # noqa: S608  # nosec B608

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        out = np.zeros(self.shape, dtype=np.int64)
        for row in rows:
            group = int(row[0])
            if not 0 <= group < self.groups:
                raise MechanismError("the engine returned a group outside the declared groups")
            values = [0 if v is None else int(v) for v in row[1:]]
            refuse_large_group(values[0])  # its sums may not fit int64 once settled
            for high in self.sum_columns():  # S = hi 2^31 + lo: lo may pass int64
                exact = (values[high] << LIMB_BITS) + values[high + 1]
                values[high : high + 2] = [exact >> LIMB_BITS, exact & LOW_MASK]
            out[group] = values
        return out


def present_count(dialect: Dialect, value: str, missing: str, j: int) -> tuple[list[str], str]:
    """The select items reading a numeric column as `v{j}`, and its values present per group.

    By the dialect's own count where it has one (`Dialect.count_present`; DuckDB: `count_if`
    of v <= +inf, which a number, +-inf included, passes and NULL and NaN do not; NULL over
    values all NULL, so read as 0: the sums then take off their words of +inf), with no
    missing test per row (the benchmark's groups and ranks, 10^6 of its rows on one thread,
    callgrind: 785 against 822 instructions per row for the sum of a CASE on the missing
    test, 821 for count(*) FILTER). Elsewhere (PostgreSQL) that sum, of the missing test `m{j}`.
    """
    if dialect.count_present is not None:
        return [f"{value} AS v{j}"], dialect.count_present(f"v{j}")
    return [f"{value} AS v{j}", f"{missing} AS m{j}"], f"sum(CASE WHEN m{j} THEN 0 ELSE 1 END)"


def high_words(spec: NumericColumn) -> dict[str, int]:
    """floor(term 2^k) of each of SUMS for x = +inf, as numpy computes it: each upper bound's."""
    terms = clamped_terms(np.array([math.inf]), spec)
    words = {}
    for which in SUMS:
        high, low = limbs(terms[which], sum_exponent(*sum_bounds(spec, which)))
        words[which] = (int(high[0]) << LIMB_BITS) + int(low[0])
    return words


def unmasked_words(dialect: Dialect, spec: NumericColumn, value: str) -> dict[str, str]:
    """floor(term 2^k) of each of SUMS from the value itself, no missing test (`unmasked_query`).

    A term equal to the raw one (`raw_alike`) is the raw one's very SQL (its sum is computed
    once); the square's guard is `SquareGuard`'s, on min(r, |x - c|). Where the engine
    computes a repeated expression once (`Dialect.shares_repeats`, DuckDB), a term that is the
    clamped raw value minus its shift (`from_clamped`) is written so, and the square's size as
    its absolute value: one clamp per value instead of three (DuckDB, 10^7 rows, the groups'
    query: 0.27 against 0.34 s of CPU; PostgreSQL, which evaluates each use, 1.93 against
    1.82 s, so not there). Each clamp: `clamp_high`.
    """
    alike = raw_alike(spec)
    raw = clamp_high(dialect, value, spec.lower, spec.upper)
    terms = {"raw": raw}
    for which, shift in shifts(spec).items():
        moved = shifted(dialect, value, shift)
        if which in alike:
            terms[which] = raw
        elif dialect.shares_repeats and from_clamped(spec, which):
            terms[which] = f"({raw} - {number(dialect, shift)})"
        else:
            terms[which] = clamp_high(dialect, moved, *sum_bounds(spec, which))
    c, r = centre(spec)
    moved = shifted(dialect, value, c)
    size = f"least({number(dialect, r)}, abs({moved}))"
    if dialect.shares_repeats and ("centred" in alike or from_clamped(spec, "centred")):
        size = f"abs({terms['centred']})"  # |clip(x - c, -r, r)|
    words = {}
    for which in SUMS:
        k = sum_exponent(*sum_bounds(spec, which))
        if which == "square":
            words[which] = SquareGuard(k).of_size(dialect, size)
        else:
            words[which] = f"floor({terms[which]} * {number(dialect, 2.0**k)})"
    return words


def clamp_high(dialect: Dialect, value: str, lower: float, upper: float) -> str:
    """`clamp_sql` of a number, and `upper` of NULL and NaN (as greatest() and least() give).

    Where the engine computes a repeated expression once (`Dialect.shares_repeats`, DuckDB), a
    CASE of two comparisons: NULL passes neither, NaN (ranked above every number) neither, so
    both read `upper`, as +inf does. Cheaper there than DuckDB's greatest() and least() (10^6
    of the benchmark's values, one thread, callgrind: 63 against 104 instructions per value;
    its one pass of groups and ranks, the word's and the slot's bucket clamped so, 457 against
    540 per row). Elsewhere `clamp_sql`.
    """
    if not dialect.shares_repeats:
        return clamp_sql(dialect, value, lower, upper)
    low, high = number(dialect, lower), number(dialect, upper)
    return (
        f"CASE WHEN {value} < {low} THEN {low} WHEN {value} <= {high} THEN {value} ELSE {high} END"
    )


def from_clamped(spec: NumericColumn, which: str) -> bool:
    """Whether a term of `shifts`, clip(x - s, a, b), is clip(x, lower, upper) - s value for value.

    It is when lower - s and upper - s (rounded) are its bounds a and b: x - s is monotone in
    x, so a value within the bounds keeps x - s, inside [a, b], and one beyond a bound (+-inf
    and, in the unmasked sums, a missing value clamped high) takes that bound's a or b. Public:
    from the schema alone.
    """
    shift = shifts(spec)[which]
    return (spec.lower - shift, spec.upper - shift) == sum_bounds(spec, which)


def refuse_large_group(rows: int) -> None:
    """Refuse a group of more than MAX_GROUP_ROWS rows, in words.

    The sums' float rounding (`measures`) is bounded for up to that many rows, and an engine's
    exact sums of a larger group may not fit int64 once settled.
    """
    if rows > MAX_GROUP_ROWS:
        raise MechanismError(
            f"a group holds more than {MAX_GROUP_ROWS:,} rows, more than the exact sums "
            "allow for: group by one more column"
        )


def word_sums(dialect: Dialect, word: str) -> list[str]:
    """(hi, lo) with hi 2^31 + lo the exact sum of the words floor(term 2^k) in SQL.

    Where the dialect's sums of BIGINT are wide (`Dialect.wide_sums`), 0 and the words' sum,
    which passes int64 past 4 words of 2^61 and stays exact (2^93 at MAX_GROUP_ROWS); else the
    sums of their 31-bit limbs, each within int64 for MAX_GROUP_ROWS rows: the word, a whole
    number of at most 2^61 in size, cast to BIGINT once (exact), hi = word >> 31 (an arithmetic
    shift: the floor of word / 2^31) and lo = word & (2^31 - 1). Spark, the one engine that sums
    in limbs, computes the shared cast once; with the limbs by double arithmetic (floor(word
    2^-31) and word - hi 2^31, each a double expression of its own) its groups' query took 6
    to 23% more wall time (docs/scale.md, "Spark's statistics").
    """
    if dialect.wide_sums:
        return ["0", f"sum(CAST({word} AS BIGINT))"]
    whole = f"CAST({word} AS BIGINT)"
    return [f"sum({whole} >> {LIMB_BITS})", f"sum({whole} & {LOW_MASK})"]


def shifts(spec: NumericColumn) -> dict[str, float]:
    """The point each clamped term of SUMS but "raw" and "square" is taken around (c)."""
    return {"centred": centre(spec)[0]}


def raw_alike(spec: NumericColumn) -> frozenset[str]:
    """The terms of `shifts` equal to the raw one, value for value.

    Those taken around 0 and clamped to the bounds: "centred" for bounds symmetric about 0
    (c = 0). x - 0 is x (-0.0 included) and the clamp
    to PRE_CLAMP changes no clamp to the bounds, so their SQL reads the raw column and their
    sums are the raw sums' very expressions, which DuckDB, PostgreSQL and Spark compute once.
    Public: from the schema alone.
    """
    bounds = (spec.lower, spec.upper)
    return frozenset(
        which
        for which, shift in shifts(spec).items()
        if shift == 0.0 and sum_bounds(spec, which) == bounds
    )


def _word_sql(dialect: Dialect, which: str, j: int, k: int, alike: frozenset[str]) -> str:
    """floor(term 2^k) of one of SUMS in SQL, as numpy computes it (see `SquareGuard`)."""
    scale = number(dialect, 2.0**k)
    column = f"{'raw' if which in alike else which}{j}"
    if which == "raw":
        return f"floor(raw{j} * {scale})"  # k >= 0 (`check_bounds`): no product underflows
    if which == "centred":
        return f"floor({column} * {scale})"
    return SquareGuard(k).sql(dialect, f"{'raw' if 'centred' in alike else 'centred'}{j}")


@dataclass(frozen=True)
class SquareGuard:
    """floor(g * g * 2^k) of a clamped centred value g without an underflowing product.

    PostgreSQL refuses a product that underflows to zero, where numpy rounds it. So g is read
    as h = max(|g|, t), t = 2^(floor(-k / 2) - 1) (`floor_at`), and the word is
    floor(h * h * 2^k). Below t, g^2 2^k <= t^2 2^k <= 1/4 in floating point (rounding is
    monotone, and t^2 2^k is a power of two at most 1/4, exact), so numpy's floor is 0, and so
    is h's. At t or above, h * h is g * g (|g| * |g| is g * g bit for bit), and it stays a
    normal number (k <= 861 by `check_bounds`, so t >= 2^-432), as does its product with 2^k
    (at least 1/8): SQL computes numpy's value. A missing value (NULL) reads t too (SQL's
    greatest skips NULL): a word of 0, which adds what a missing value adds, nothing. No
    CASE: an engine shares h's expression where it shares any (a CASE on g evaluated g three
    times on PostgreSQL: 0.55 s of its 4.5 s groups' query, 10^7 rows).
    """

    k: int

    @property
    def floor_at(self) -> float:
        """t: below it every square's word is 0."""
        return 2.0 ** (math.floor(-self.k / 2) - 1)

    def sql(self, dialect: Dialect, g: str) -> str:
        if dialect.ieee:  # a product that underflows is 0 (or subnormal) there, as in numpy
            return f"floor(({g} * {g}) * {number(dialect, 2.0**self.k)})"
        return self.of_size(dialect, f"abs({g})")

    def of_size(self, dialect: Dialect, size: str) -> str:
        """The word from |g| (`size`, NULL for a missing value), guarded unless `Dialect.ieee`."""
        if dialect.ieee:
            return self.sql(dialect, size)
        h = f"greatest({size}, {number(dialect, self.floor_at)})"
        return f"floor(({h} * {h}) * {number(dialect, 2.0**self.k)})"


@dataclass(frozen=True)
class RankTally:
    """Per group, the counts of one column's clamped present values around each candidate.

    Shape (groups, 2 m + 1) for the m candidates of `quantiles.quantile_grid` (the same for
    every group), or with `grids`, one grid per group (a second pass at the estimate's finer
    candidates inside each group's released interval, `inner_tallies`; m the longest, a
    group's slots past 2 len(its grid) + 1 empty): slot 2 i holds the values strictly between
    candidates i - 1 and i, slot 2 i + 1 those equal to candidate i (`RankCounts`); the slot of
    a value is #(candidates < v) + #(candidates <= v) (0 for a group with no candidates).
    """

    schema: Schema
    by: tuple[str, ...]
    column: str
    grids: tuple[tuple[float, ...], ...] | None = None

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys([self.column, *self.by]))

    @property
    def spec(self) -> NumericColumn:
        spec = self.schema.column(self.column)
        assert isinstance(spec, NumericColumn)
        return spec

    @property
    def grid(self) -> tuple[float, ...]:
        return quantile_grid(self.spec)

    @property
    def shape(self) -> tuple[int, ...]:
        groups = math.prod(self.schema.domain_shape(list(self.by))) if self.by else 1
        longest = len(self.grid) if self.grids is None else max(map(len, self.grids), default=0)
        return (groups, 2 * longest + 1)

    def of_frame(self, frame: pd.DataFrame) -> AnyArray:
        return self.of_groups(frame, group_codes(self.schema, self.by, frame))

    def of_groups(self, frame: pd.DataFrame, group: IntArray) -> AnyArray:
        """`of_frame`, given each row's group (`group_codes`)."""
        spec = self.spec
        x = np.asarray(spec.numbers(frame[self.column]), dtype=np.float64)
        present = ~np.isnan(x)
        group, clamped = group[present], np.clip(x[present], spec.lower, spec.upper)
        if self.grids is None:
            slots = RankCounts.slots_of(clamped, self.grid)
        else:
            slots = np.zeros(clamped.size, dtype=np.int64)
            for g, grid in enumerate(self.grids):
                mine = group == g
                slots[mine] = RankCounts.slots_of(clamped[mine], grid)
        out = np.zeros(self.shape, dtype=np.int64)
        np.add.at(out, (group, slots), 1)
        return out

    def query(self, dialect: Dialect, kinds: dict[str, str], table: str) -> str:
        """Per group and slot, the rows: the slot of the value unclamped (`from_rows` clamps it)."""
        value, missing = number_sql(dialect, self.spec, kinds[self.column])
        unclamped = f"{value} AS v"

        def rows(texts: list[str]) -> tuple[str, list[str], list[str]]:
            inner = f"SELECT {', '.join([*texts, unclamped])} FROM {table} WHERE NOT {missing}"  # noqa: S608  # nosec B608: quoted
            return f"({inner}) AS q", [self.slot_sql(dialect, self.grid)], ["count(*)"]

        first = (
            None
            if self.grids is not None
            else grouped_first(dialect, self.schema, self.by, kinds, rows)
        )
        if first is not None:
            return first
        group = group_sql(dialect, self.schema, self.by, kinds)
        inner = f"SELECT {group} AS g, {unclamped} FROM {table} WHERE NOT {missing}"  # noqa: S608  # nosec B608: quoted
        if self.grids is None:
            slot = self.slot_sql(dialect, self.grid)
        else:
            arms = [
                f"WHEN {g} THEN {self.slot_sql(dialect, grid)}"
                for g, grid in enumerate(self.grids)
                if grid
            ]
            slot = f"CASE g {' '.join(arms)} ELSE 0 END" if arms else "0"
        return f"SELECT g, {slot} AS s, count(*) FROM ({inner}) AS q GROUP BY 1, 2"  # noqa: S608  # nosec B608

    def slot_sql(self, dialect: Dialect, grid: tuple[float, ...], value: str = "v") -> str:
        """#(candidates < v) + #(candidates <= v) in SQL: `sign_slot`, else one search."""
        return sign_slot(dialect, value, grid) or slot_search(dialect, value, grid, self.column)

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        """Counts per group and slot from (group, slot of the unclamped value, rows).

        The slot is monotone in the value, so the clamped value's slot is the unclamped one's
        clamped to the slots of the bounds (`slot_bounds`): a value below the lower bound
        takes the lower bound's slot, one above the upper bound the upper bound's. Clamping on
        the groups spares each row the clamp's least() and greatest() (10^7 rows, the rank query's
        CPU, best of 5 to 7: PostgreSQL 1.86 against 2.09 s, DuckDB 0.25 against 0.34 s).
        """
        return self.from_triples(np.array(rows, dtype=np.int64).reshape(-1, 3))

    def from_triples(self, triples: IntArray) -> AnyArray:
        """`from_rows` of the rows as an (n, 3) array."""
        out = np.zeros(self.shape, dtype=np.int64)
        if triples.size and (
            triples[:, :2].min() < 0
            or triples[:, 0].max() >= out.shape[0]
            or triples[:, 1].max() >= out.shape[1]
        ):
            raise MechanismError("the engine returned a group or slot outside the declared ones")
        low, high = self.slot_bounds()
        groups = triples[:, 0]
        slots = np.clip(triples[:, 1], low[groups], high[groups])
        np.add.at(out, (groups, slots), triples[:, 2])
        return out

    def slot_bounds(self) -> tuple[IntArray, IntArray]:
        """Per group, the slots of the lower and the upper bound among its candidates."""
        spec, groups = self.spec, self.shape[0]
        grids = [self.grid] * groups if self.grids is None else self.grids
        grids = [*grids, *[()] * (groups - len(grids))]  # a group past the grids: no candidates
        bounds = np.array([spec.lower, spec.upper], dtype=np.float64)
        slots = np.array([RankCounts.slots_of(bounds, grid) for grid in grids], dtype=np.int64)
        return slots[:, 0], slots[:, 1]

    def settled(self, answer: AnyArray) -> AnyArray:
        return answer


def sign_slot(dialect: Dialect, value: str, grid: tuple[float, ...]) -> str | None:
    """`slot_search`'s slot of a number (not NaN) by the sign of its distance to one candidate.

    Where doubles round as IEEE 754 (`Dialect.ieee`) and each candidate c_b is alone in its
    bucket and written by arithmetic (`Guess.sql`'s spaced form: `Guess`, `Spacing`), the
    candidates before the value's bucket b lie below the value and those after it above, so
    the slot 2 b + [c_b < v] + [c_b <= v] (`Guess.sql`'s one CASE) is 2 b + 1 + sign(v - c_b):
    a difference of two doubles is rounded with its sign, is 0 only where they are equal
    (gradual underflow: no difference of unequal doubles is 0; -0.0 - 0.0 is -0.0, sign 0),
    and is +-inf for v = +-inf. Arithmetic instead of the CASE's two comparisons (DuckDB, the
    benchmark's groups and ranks, 10^6 of its rows on one thread, callgrind: 759 against 785
    instructions per row). The bucket is `equal_width_sql`'s, clamped by `clamp_high` (NaN
    and NULL in the top bucket). Of NaN some number, of NULL NULL, neither read.
    None where it does not apply (also past MAX_EDGES candidates: `slot_search` refuses them).
    """
    edges = tuple(float(c) for c in grid)
    guess = Guess.of(edges) if dialect.ieee and len(edges) <= MAX_EDGES else None
    if guess is None or guess.window != 1 or guess.first != tuple(range(len(edges))):
        return None
    spaced = Spacing.of(edges)
    if spaced is None:
        return None
    factor = len(edges) / (edges[-1] - edges[0])  # `equal_width_sql`'s steps, its clamp a CASE
    moved = shifted(dialect, value, edges[0])
    scaled = f"({moved} * {number(dialect, factor)})"
    bucket = f"floor({clamp_high(dialect, scaled, 0.0, float(len(edges) - 1))})"
    return f"(2 * {bucket} + 1 + sign({value} - {spaced.sql(dialect, bucket)}))"


@dataclass(frozen=True)
class GroupsAndRanks:
    """The groups' tally and one column's first rank tally in one pass over the rows.

    Its answer is theirs, flattened one after the other (`split`). Here the rows' groups are
    coded once for both. In SQL the groups' query is grouped by group and by the slot of the
    rank column's value (`GroupTally.query` with `ranks`): per (group, slot) the rows, the
    values present and the sums. The rank counts are that column's values present per
    (group, slot): a missing value's slot is whatever the search makes of NULL or NaN, and it
    counts in no value present. The groups' sums are the (group, slot) sums added up, whole
    numbers, so exact. One pass instead of two (10^7 rows, DuckDB, one thread: 0.58 against
    0.37 + 0.31 s of CPU). DuckDB returns one row per group instead, the slots as text
    (`packed_query`).
    """

    groups: GroupTally
    ranks: RankTally

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys([*self.groups.columns, *self.ranks.columns]))

    @property
    def shape(self) -> tuple[int, ...]:
        return (math.prod(self.groups.shape) + math.prod(self.ranks.shape),)

    def split(self, answer: AnyArray) -> tuple[AnyArray, AnyArray]:
        """(the groups' answer, the ranks' answer) of this tally's answer."""
        size = math.prod(self.groups.shape)
        return answer[:size].reshape(self.groups.shape), answer[size:].reshape(self.ranks.shape)

    def joined(self, groups: AnyArray, ranks: AnyArray) -> AnyArray:
        return np.concatenate([groups.ravel(), ranks.ravel()])

    def of_frame(self, frame: pd.DataFrame) -> AnyArray:
        group = group_codes(self.groups.schema, self.groups.by, frame)
        return self.joined(self.groups.of_groups(frame, group), self.ranks.of_groups(frame, group))

    def query(self, dialect: Dialect, kinds: dict[str, str], table: str) -> str:
        pairs = self.groups.query(dialect, kinds, table, self.ranks)
        return self.packed_query(pairs) if dialect.packs_slots else pairs

    def packed_query(self, pairs: str) -> str:
        """The rows of `pairs` (one per group and slot) added up per group, slots as one text.

        One row per group: (group, rows, per numeric column present and sums, then the rank
        column's slots and values present, "s n s n ...", for the slots holding any), so
        the engine returns a few rows, not one per (group, slot). DuckDB hands each HUGEINT
        to Python as text and each row as a tuple of values: its 12,170 rows of the
        benchmark's pairs took 0.035 s of CPU to fetch, and 0.027 s more to add up here; its
        12 groups' rows and texts, 0.003 s and 0.005 s (10^7 rows: the whole tally 0.36 s of
        wall time). Each slot is a whole number (`RankTally.slot_sql`); a slot of values
        present that is NULL reads -1, which `from_triples` refuses. The group's sums are
        the (group, slot) sums added up: whole numbers, exact.
        """
        names = [f"c{i}" for i in range(3 + PER_COLUMN * len(self.groups.numeric))]
        present = names[self.present_position]
        slot = "coalesce(CAST(CAST(c1 AS BIGINT) AS VARCHAR), '-1')"
        pair = f"CASE WHEN {present} > 0 THEN {slot} || ' ' || CAST({present} AS VARCHAR) END"
        added = [f"sum({n})" for n in names[2:]]
        selected = ", ".join(["c0", *added, f"coalesce(string_agg({pair}, ' '), '')"])
        source = f"({pairs}) AS p({', '.join(names)})"
        return f"SELECT {selected} FROM {source} GROUP BY c0"  # noqa: S608  # nosec B608: ours

    @property
    def present_position(self) -> int:
        """The place of the rank column's values present in a row of (group, slot, rows, ...)."""
        return 3 + PER_COLUMN * self.groups.numeric.index(self.ranks.column)

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        """Both answers from rows (group, slot, rows, then per numeric column present, sums).

        Or from `packed_query`'s rows (their last item a text).
        """
        if rows and isinstance(rows[0][-1], str):
            return self.from_packed(rows)
        present = self.present_position
        per_group: dict[int, list[int]] = {}
        slots = []
        for row in rows:
            values = [0 if v is None else int(v) for v in row[2:]]
            added = per_group.get(int(row[0]))
            per_group[int(row[0])] = (
                values if added is None else [a + v for a, v in zip(added, values, strict=True)]
            )
            if row[present]:  # a slot of no value present (a missing value's) is left out
                slots.append((row[0], -1 if row[1] is None else row[1], row[present]))
        groups = self.groups.from_rows([(g, *v) for g, v in per_group.items()])
        return self.joined(groups, self.ranks.from_rows(slots))

    def from_packed(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        """Both answers from `packed_query`'s rows: the groups' as they are, the slots' texts."""
        groups = self.groups.from_rows([row[:-1] for row in rows])
        triples = [np.zeros((0, 3), dtype=np.int64)]
        for row in rows:
            pairs = np.array(row[-1].split(), dtype=np.int64).reshape(-1, 2)
            triples.append(np.column_stack([np.full(len(pairs), int(row[0])), pairs]))
        return self.joined(groups, self.ranks.from_triples(np.concatenate(triples)))

    def settled(self, answer: AnyArray) -> AnyArray:
        groups, ranks = self.split(answer)
        return self.joined(self.groups.settled(groups), ranks)


def group_codes(schema: Schema, by: tuple[str, ...], frame: pd.DataFrame) -> IntArray:
    """The flat group (row-major cell of the `by` columns) of each row; 0 without grouping."""
    if not by:
        return np.zeros(len(frame), dtype=np.int64)
    codes = schema.encode(frame, list(by))
    flat: IntArray = np.ravel_multi_index(tuple(codes.T), schema.domain_shape(list(by)))
    return flat.astype(np.int64)


def grouped_first(
    dialect: Dialect,
    schema: Schema,
    by: tuple[str, ...],
    kinds: dict[str, str],
    query: Callable[[list[str]], tuple[str, list[str], list[str]]],
) -> str | None:
    """A statistics query grouped by the `by` columns' raw texts first, each coded once after.

    Where every `by` column is text and their texts' combinations are few (`few_texts`) by the
    database's statistics (`Dialect.distinct_texts`), `query(texts)` gives (the rows' source,
    keys, aggregates) with `texts` the select items of the raw texts, t0, t1, ..., compared
    bytewise (`Dialect.bytewise`, so a GROUP BY joins exactly the texts the cell codes find
    equal); the rows are grouped by the texts and the keys, then each text combination gets
    its group code (the same CASE as per row, on one row per distinct text) and the groups'
    aggregates are added up per code: sums of whole numbers, exact. 10^7 rows, 13 texts
    (PostgreSQL, CPU of one backend): groups' query 1.83 against 2.48 s, rank query 2.11
    against 2.93 s. Grouping by raw texts is slower where they are many (an identifier declared
    categorical, 10^7 distinct texts: 4x), hence the statistics; where they are wrong (stale)
    the answer is the same, only slower. None where it does not apply.
    """
    if len(set(by)) < len(by) or not few_texts(dialect, by, kinds):
        return None
    aliases, texts, coded = raw_texts(dialect, by)
    source, keys, sums = query(texts)
    names = [*aliases, *(f"k{i}" for i in range(len(keys)))]
    listed = [*aliases, *(f"{k} AS k{i}" for i, k in enumerate(keys))]
    listed += [f"{a} AS a{i}" for i, a in enumerate(sums)]
    added = ["0" if a == "0" else f"sum(a{i})" for i, a in enumerate(sums)]
    inner = f"SELECT {', '.join(listed)} FROM {source} GROUP BY {', '.join(names)}"  # noqa: S608  # nosec B608: quoted
    outer = [f"{group_sql(coded, schema, by, kinds)} AS g", *names[len(by) :], *added]
    positions = ", ".join(str(i + 1) for i in range(1 + len(keys)))
    return f"SELECT {', '.join(outer)} FROM ({inner}) AS raw GROUP BY {positions}"  # noqa: S608  # nosec B608


def group_sql(dialect: Dialect, schema: Schema, by: tuple[str, ...], kinds: dict[str, str]) -> str:
    """`group_codes` in SQL (the cell expressions of `mechanisms.counting.sql`)."""
    if not by:
        return "CAST(0 AS BIGINT)"
    return flat_index(schema, [column_sql(dialect, schema.column(b), kinds[b]) for b in by])


@dataclass(frozen=True)
class Aggregates:
    """What the statistics read of a table (see the module docstring); exact, no noise."""

    tally: GroupTally
    table: IntArray  # GroupTally's answer
    ranks: dict[str, IntArray]  # RankTally's answer per quantile column

    def __post_init__(self) -> None:
        if self.table.size:
            refuse_large_group(int(self.table[:, 0].max()))

    @property
    def n(self) -> int:
        return int(self.table[:, 0].sum())

    def rows(self) -> IntArray:
        return self.table[:, 0].copy()

    def present(self, column: str) -> IntArray:
        return self.table[:, 1 + PER_COLUMN * self.tally.numeric.index(column)].copy()

    def fixed_sums(self, column: str, which: str) -> list[int]:
        """Per group the exact sum `which` (of SUMS) of the column's clamped present values.

        Each is S in units of 2^-k (`sum_exponent` of its `sum_bounds`).
        """
        return [(int(h) << LIMB_BITS) + int(lo) for h, lo in self._limbs(column, which)]

    def sums(self, column: str, which: str) -> FloatArray:
        """`fixed_sums` in the column's unit, each rounded once to the nearest float."""
        k = sum_exponent(*sum_bounds(self.tally.spec(column), which))
        return np.array([total(h, lo, k) for h, lo in self._limbs(column, which)])

    def _limbs(self, column: str, which: str) -> IntArray:
        """Per group (S >> 31, S mod 2^31) of the sum `which` of `column` (`settled`)."""
        if which not in self.tally.terms(column):  # a statistic reading a sum not asked for
            raise MechanismError(f"the {which} sums of column {column!r} were not read")
        base = 1 + PER_COLUMN * self.tally.numeric.index(column) + 1 + 2 * SUMS.index(which)
        return self.table[:, base : base + 2]

    def rank_counts(self, column: str) -> list[RankCounts]:
        spec = self.tally.spec(column)
        grid = quantile_grid(spec)
        return [RankCounts(grid, slots) for slots in self.ranks[column]]


def inner_tallies(
    schema: Schema, by: tuple[str, ...], column: str, grids: list[tuple[float, ...]]
) -> list[RankTally]:
    """The second passes counting each group's values around its own `grids` (empty: none).

    As few passes as keep each query at MAX_EDGES candidates or fewer (a group's grid whole).
    The grids must be public or released (`quantiles.inner` of a released interval): the
    counts are then aggregates at public candidates, like the first pass's.
    """
    passes: list[list[tuple[float, ...]]] = []
    size = MAX_EDGES
    for g, grid in enumerate(grids):
        if not grid:
            continue
        if size + len(grid) > MAX_EDGES:
            passes.append([()] * len(grids))
            size = 0
        passes[-1][g], size = grid, size + len(grid)
    return [RankTally(schema, by, column, tuple(chosen)) for chosen in passes]


def table_passes(
    schema: Schema, request: Request, engine: str = "inprocess"
) -> list[GroupTally | GroupsAndRanks | RankTally]:
    """The tallies a request runs, one per pass over the table.

    The groups' sums together with the first quantile column's rank counts (`GroupsAndRanks`)
    where their (group, slot) pairs are at most JOINED_ROWS and `engine` is one of
    ONE_PASS_ENGINES; then one per other quantile column (`read_aggregates` reads them).
    """
    groups, ranked = tallies(schema, request)
    if ranked and math.prod(ranked[0].shape) <= JOINED_ROWS and engine in ONE_PASS_ENGINES:
        return [GroupsAndRanks(groups, ranked[0]), *ranked[1:]]
    return [groups, *ranked]


def needed_sums(request: Request, column: str) -> tuple[str, ...]:
    """The SUMS the request's statistics of `column` read (`compute`), in SUMS order.

    A sum "raw"; a mean "centred"; a variance or standard deviation "centred" and "square"; a
    count or a quantile none.
    """
    reads = {"sum": {"raw"}, "mean": {"centred"}, "variance": {"centred", "square"}}
    reads["std"] = reads["variance"]
    stats = [s for s in request.statistics if s.column == column]
    return tuple(w for w in SUMS if any(w in reads.get(s.kind, set()) for s in stats))


def values_counted_publicly(neighbouring: str, by: tuple[str, ...], spec: NumericColumn) -> bool:
    """Whether the number of a column's values is public (public itself: no data read).

    It is where the row count is (replace-one without groups) and the schema rules out missing
    values ("missing": "reject"); never from whether the data happen to hold any.
    """
    return neighbouring == "replace-one" and not by and spec.missing != "cell"


def tallies(schema: Schema, request: Request) -> tuple[GroupTally, list[RankTally]]:
    """The tallies a request needs: the groups' and one per quantile column.

    The groups' sums are those its statistics read (`needed_sums`).
    """
    numeric = tuple(dict.fromkeys(s.column for s in request.statistics if s.column is not None))
    quantile = dict.fromkeys(
        s.column for s in request.statistics if s.alpha is not None and s.column is not None
    )
    wanted = tuple(needed_sums(request, column) for column in numeric)
    return GroupTally(schema, request.by, numeric, wanted), [
        RankTally(schema, request.by, c) for c in quantile
    ]
