"""The public schema of a table and its encoding into histogram cells.

A schema is public metadata the custodian states once (a JSON document), for example::

    {"columns": [
       {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "integer": true},
       {"name": "hours", "type": "numeric", "lower": 0, "upper": 99, "bins": [0, 20, 40, 60, 99]},
       {"name": "income", "type": "numeric", "lower": 0, "upper": 2e5, "bins": 20,
        "decimals": 0, "missing": "cell"},
       {"name": "sex", "type": "categorical", "categories": ["F", "M"], "unknown": "reject"},
       {"name": "visit", "type": "date", "part": "month"},
       {"name": "born", "type": "date", "part": "date", "lower": "1900-01-01",
        "upper": "2030-12-31", "bins": 13},
       {"name": "fnlwgt", "type": "ignored"}]}

Keys of every numeric, categorical or date column:

- ``missing``: ``"cell"`` (the default) gives missing values (an empty cell; NaN in a numeric
  column) a cell of their own, labelled "(missing)" in counts and written as an empty value in
  synthetic tables. The cell exists whether or not any value is missing, so the domain never
  depends on the data. ``"reject"``: a missing value makes the data unusable with this schema
  (`mechanisms.validation` names the column, the count and the first row before any release).

Numeric (``"type": "numeric"``): values are clamped to [lower, upper] and binned; bins are
half-open [a, b) except the last, which includes `upper`. `bins` is a count (equal widths) or
the explicit edges, which must start at `lower` and end at `upper`. Bounds and edges are
numbers a 64-bit float holds exactly (the arithmetic of every column): 2**64 is one, 2**64 + 1
and 10**400 are refused rather than silently rounded; bins so narrow that their edges coincide
as floats, or hold no value of the column's precision, are refused (fewer bins or a wider range).

- ``integer``: ``true`` declares whole numbers (a type, not a statistic). `lower` and `upper`
  must then be whole numbers from -2**53 to 2**53 - 1 (those a float holds), bins hold whole
  numbers: a count k gives k bins with whole-number edges (at most one per value), explicit
  edges are whole numbers from `lower` to `upper` (the last bin includes `upper`) or to
  ``upper + 1``, and without `bins` every value gets its own bin when there are at most 31 of
  them (month 1..12: 12 bins), else 10 bins. Synthetic values
  are whole numbers drawn uniformly among those of their bin.
- ``decimals``: the precision of synthetic values of a non-integer column: values are drawn
  uniformly among the multiples of 10^-decimals inside their bin (every bin must hold one).
  Default: two more digits than the smallest bin width needs (width 7.3 -> 2 decimals).

Date (``"type": "date"``): a date or date-time column, read as ISO 8601 text (YYYY-MM-DD,
optionally with a time; times with an offset are converted to UTC), released as one derived
whole-number column chosen by ``part``:

- ``"year"`` (`lower` and `upper` required, e.g. 1900 and 2030), ``"month"`` (1..12),
  ``"weekday"`` (1 = Monday .. 7 = Sunday, ISO 8601), ``"hour"`` (0..23): the synthetic column
  holds the number; bins as for integer columns (default one per value);
- ``"date"``: a range of days with date bounds (`lower`, `upper`, and explicit edges, given as
  "YYYY-MM-DD"); synthetic values are dates "YYYY-MM-DD".

A value that is already a number is taken as the part itself (2012 as a year, 3 as March), so
released synthetic tables encode back into the same cells.
Categorical: values are compared as text with the listed categories. A value outside the list
goes to an extra cell labelled "(other)" when "unknown" is "other" (the default), or makes
encoding fail when it is "reject". The "(other)" cell exists whether or not any value falls in
it. An empty value is a missing value (see ``missing``), not a category.

- ``match``: how a value's text is compared with the categories. ``"exact"`` (the default):
  character for character. ``"casefold"``: both sides lose their surrounding whitespace and are
  compared in Unicode case-folded form (Python's ``str.strip().casefold()``), so the data's
  ``female``, `` FEMALE `` and ``Female`` all count as the declared ``Female``; released labels
  keep the declared spelling. The rule is part of the public schema: it depends on the declared
  categories only, never on the data, and categories that become equal under it are refused.
Nothing here derives bounds, bins, categories or precision from the data.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from mechanisms.arrays import AnyArray
from mechanisms.chunks import EngineTable, table_chunks
from mechanisms.dates import date_numbers, day_number, day_text
from mechanisms.errors import MechanismError, parsed_json, shown
from mechanisms.noise import RandomSource, resolve_rng
from mechanisms.persons import PersonLevel, schema_entries, split_schema

if TYPE_CHECKING:
    from mechanisms.chunks import ChunkedTable


OTHER_LABEL = "(other)"
MISSING_LABEL = "(missing)"
MISSING_CHOICES = ("cell", "reject")
MATCH_CHOICES = ("exact", "casefold")
MAX_CELLS = 10**8
CHUNK_ROWS = 1 << 20
SMALL_INTEGER_RANGE = 31  # whole-number columns get one bin per value up to this many values
DEFAULT_INTEGER_BINS = 10
MAX_DECIMALS = 12
EXACT_WHOLE = 2**53  # float64 holds every whole number of at most this magnitude exactly
TEXT = pd.StringDtype("pyarrow", na_value=np.nan)  # pandas' own text type: decoded text columns
MAX_FLOAT_INTEGER = int(np.finfo(np.float64).max)
NUMBER_RULE = (
    "finite numbers that a 64-bit float holds exactly (a whole number beyond "
    f"{EXACT_WHOLE} may not be: round it, for example to 1.8e19)"
)
DATE_PARTS: dict[str, tuple[int, int] | None] = {
    "year": None,
    "month": (1, 12),
    "weekday": (1, 7),
    "hour": (0, 23),
    "date": None,
}


def _is_number(value: Any) -> TypeGuard[int | float]:
    """A finite number that a 64-bit float holds exactly, as every column computes in float64.

    A JSON integer beyond 2**53 may fall between two floats (2**64 + 1) or beyond them all
    (10**400); it is not a number here rather than a silently different one.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= MAX_FLOAT_INTEGER and float(value) == value
    return math.isfinite(value)


def _is_whole(value: Any) -> bool:
    return _is_number(value) and float(value).is_integer()


@dataclass(frozen=True)
class NumericColumn:
    """A numeric (or date-derived) column with public bounds, bin edges and a missing cell.

    For whole-number columns `edges` end at upper + 1 and every bin is half-open, so bin i
    holds the whole numbers edges[i] .. edges[i + 1] - 1.
    """

    name: str
    lower: float
    upper: float
    edges: tuple[float, ...]
    equal_width: bool
    missing: str = "cell"
    integer: bool = False
    decimals: int = 0
    bins_spec: int | list[Any] | None = None  # the bins as declared, for to_dict
    part: str | None = None  # the date part of a "date" column, None for numeric

    @property
    def n_bins(self) -> int:
        return len(self.edges) - 1

    @property
    def n_cells(self) -> int:
        return self.n_bins + (self.missing == "cell")

    def labels(self) -> list[str]:
        """Readable cell labels for pages, spreadsheets and reports.

        A bin holds its lower edge, not its upper one: "17 to under 26.125", the last bin
        "81.875 to 90" (both edges in). Whole-number bins name the values they hold: "3", "1 to
        4". A column with a missing cell ends with "(missing)".
        """
        e = self.edges
        if self.integer:
            text = day_text if self.part == "date" else (lambda v: f"{v:g}")
            bins = [
                text(e[i]) if e[i + 1] - e[i] == 1 else f"{text(e[i])} to {text(e[i + 1] - 1)}"
                for i in range(self.n_bins)
            ]
        else:
            bins = [
                f"{e[i]:g} to {'' if i == len(e) - 2 else 'under '}{e[i + 1]:g}"
                for i in range(len(e) - 1)
            ]
        return bins + ([MISSING_LABEL] if self.missing == "cell" else [])

    def widths(self) -> AnyArray:
        """Width of every cell (the missing cell counts as width 1)."""
        widths = np.diff(np.asarray(self.edges))
        return np.append(widths, 1.0) if self.missing == "cell" else widths

    def numbers(self, values: AnyArray | pd.Series[Any]) -> AnyArray:
        """The values as float64 (a date column: its part), NaN where missing or unreadable."""
        if self.part is not None:
            return date_numbers(values, self.part)
        return _as_float(values)

    def encode(self, values: AnyArray | pd.Series[Any], first_row: int = 0) -> AnyArray:
        """Cell index of each value: its bin after clamping to [lower, upper].

        A missing value goes to the missing cell (refused when "missing" is "reject").
        """
        numbers = self.numbers(values)
        absent = np.isnan(numbers)
        any_absent = bool(absent.any())
        if any_absent:
            if self.missing == "reject":
                raise MechanismError(
                    f"column {self.name!r} has {int(absent.sum())} missing or unreadable values "
                    f"(first on data row {first_row + int(np.argmax(absent)) + 1}); clean them, "
                    'set "missing": "cell" or mark the column ignored'
                )
            numbers = np.where(absent, self.lower, numbers)
        codes = self._bin_codes(numbers)
        if any_absent:
            codes[absent] = self.n_bins
        return codes

    def _bin_codes(self, values: AnyArray) -> AnyArray:
        if self.equal_width:
            return equal_width_codes(values, self.lower, self.upper, self.n_bins)
        codes = np.searchsorted(np.asarray(self.edges[1:-1]), values, side="right")
        return np.clip(codes, 0, self.n_bins - 1, out=codes).astype(np.int64)

    def decode(self, codes: AnyArray, rng: RandomSource) -> AnyArray:
        """A value drawn uniformly among the declared-precision values inside each code's bin.

        Those are the multiples of 10^-decimals (whole numbers for an integer column); the
        missing cell decodes to NaN.
        """
        codes = np.asarray(codes, dtype=np.int64)
        absent = codes == self.n_bins
        safe = np.where(absent, 0, codes) if absent.any() else codes
        start, count, scale = _grid(self.edges, self.decimals, not self.integer)
        values = rng.uniform(len(codes))
        values *= count[safe]
        np.floor(values, out=values)
        values += start[safe]
        values /= scale
        values[absent] = np.nan
        return values

    def output(self, values: AnyArray) -> Any:
        """Decoded values as the synthetic column.

        Whole numbers become integers (empty when missing), a "date" part YYYY-MM-DD text.
        """
        if self.part == "date":  # by pyarrow: NumPy's text and pandas took 0.7 CPU s a million
            present = ~np.isnan(values)
            whole = np.where(present, values, 0).astype(np.int32)
            days = pa.array(whole, pa.date32(), mask=~present)  # days since 1970-01-01
            return pd.array(pc.cast(days, pa.large_string()), dtype=TEXT)
        if self.integer:
            return pd.array(values, dtype="Int64")
        return values

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": "numeric" if self.part is None else "date",
        }
        if self.part is not None:
            out["part"] = self.part
        as_text = self.part == "date"
        out["lower"] = day_text(self.lower) if as_text else _plain(self.lower)
        out["upper"] = day_text(self.upper) if as_text else _plain(self.upper)
        out["bins"] = self.bins_spec
        out["missing"] = self.missing
        if self.part is None:
            out["integer"] = self.integer
            if not self.integer:
                out["decimals"] = self.decimals
        return out


def equal_width_codes(values: AnyArray, lower: float, upper: float, bins: int) -> AnyArray:
    """The bin of each number (not NaN) among `bins` equal-width bins of [lower, upper].

    (v - lower) * (bins / (upper - lower)), clipped to [0, bins - 1] and floored: the arithmetic
    the SQL engines repeat step for step (`mechanisms.counting.sql.equal_width_sql`).
    """
    with np.errstate(over="ignore"):  # ±1e308 scale to ±inf, which the clip handles
        scaled = (np.asarray(values, dtype=np.float64) - lower) * (bins / (upper - lower))
    np.clip(scaled, 0, bins - 1, out=scaled)  # clip before the cast: inf would not fit int64
    return np.floor(scaled, out=scaled).astype(np.int64)


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _grid(
    edges: Sequence[float], decimals: int, last_closed: bool
) -> tuple[AnyArray, AnyArray, float]:
    """Per bin, its first multiple of 10^-decimals (in steps), how many it holds; 10^decimals."""
    scale = 10.0**decimals
    scaled = np.asarray(edges, dtype=np.float64) * scale
    small = np.abs(scaled) < EXACT_WHOLE  # larger floats are whole; rounding them overflows
    scaled[small] = np.round(scaled[small], 6)
    start = np.ceil(scaled[:-1])
    stop = np.ceil(scaled[1:])  # first multiple at or above the upper edge, excluded
    if last_closed:
        stop[-1] = np.floor(scaled[-1]) + 1
    return start, stop - start, scale


def _as_float(values: AnyArray | pd.Series[Any]) -> AnyArray:
    values = np.asarray(values)
    if values.dtype.kind in "iuf":
        return values.astype(np.float64, copy=False)
    return pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)


def is_missing(values: pd.Series[Any]) -> AnyArray:
    """Missing values of a column: empty (or blank) text, null, NaN."""
    if values.dtype.kind in "iufb":
        return values.isna().to_numpy(dtype=bool)
    text = _texts(values).str.strip()
    return (text.isna() | (text == "")).to_numpy(dtype=bool)


@dataclass(frozen=True)
class CategoricalColumn:
    """A categorical column with a public list of categories."""

    name: str
    categories: tuple[str, ...]
    unknown: str
    missing: str = "cell"
    match: str = "exact"  # or "casefold" (MATCH_CHOICES): how `compared` reads texts

    @property
    def n_cells(self) -> int:
        return len(self.categories) + (self.unknown == "other") + (self.missing == "cell")

    def compared(self, texts: pd.Series) -> pd.Series:
        """The texts as the column's `match` rule compares them (strings or missing)."""
        return texts.str.strip().str.casefold() if self.match == "casefold" else texts

    def labels(self) -> list[str]:
        return (
            list(self.categories)
            + ([OTHER_LABEL] if self.unknown == "other" else [])
            + ([MISSING_LABEL] if self.missing == "cell" else [])
        )

    def widths(self) -> AnyArray:
        return np.ones(self.n_cells)

    def encode(self, values: AnyArray | pd.Series[Any], first_row: int = 0) -> AnyArray:
        """Category indices; unknown values go to "(other)", missing ones to "(missing)".

        Either is refused instead when the column's "unknown" or "missing" is "reject".
        """
        series = pd.Series(values, copy=False)
        codes = self._category_indices(series)
        unlisted = codes < 0
        absent = np.zeros(len(codes), dtype=bool)
        if unlisted.any():  # only unlisted values can be missing: test those alone
            absent[unlisted] = is_missing(series[unlisted])
        unknown = unlisted & ~absent
        for mask, refused, what, fix in (
            (
                unknown,
                self.unknown == "reject",
                "values outside its declared categories",
                'add them to the schema or set "unknown": "other"',
            ),
            (
                absent,
                self.missing == "reject",
                "missing (empty) values",
                'fill them in or set "missing": "cell"',
            ),
        ):
            if refused and mask.any():
                raise MechanismError(
                    f"column {self.name!r} has {int(mask.sum())} {what} (first on data row "
                    f"{first_row + int(np.argmax(mask)) + 1}); {fix}"
                )
        codes[unknown] = len(self.categories)
        codes[absent] = len(self.categories) + (self.unknown == "other")
        return codes

    def _category_indices(self, values: pd.Series) -> AnyArray:
        """Index of each value's text among the categories, -1 if none.

        Text and integer columns are compared once per distinct value (their distinct values
        have distinct texts; floats and mixed objects may not: 0.0 and -0.0, 1 and True).
        """
        declared = pd.Series(self.categories, dtype="string")
        categories = pd.Index(self.compared(declared))
        if values.dtype.kind in "iu" or isinstance(values.dtype, pd.StringDtype):
            codes, distinct = pd.factorize(values)  # missing values get -1
            texts = self.compared(pd.Series(distinct).astype("string"))
            known: AnyArray = categories.get_indexer(pd.Index(texts))
            return np.append(known, -1).astype(np.int64)[codes]
        found: AnyArray = categories.get_indexer(pd.Index(self.compared(_texts(values))))
        return found.astype(np.int64)

    def decode(self, codes: AnyArray, rng: RandomSource) -> Any:
        """The category label of each code, a missing value for the missing cell: pandas text.

        Each label is taken by pyarrow at its codes, not made a Python string per row (pandas
        took 0.09 CPU s a column to turn a million of those into its text type; the take
        0.01).
        """
        labels: list[str | None] = list(self.labels())
        if self.missing == "cell":
            labels[-1] = None
        taken = pa.array(labels, pa.large_string()).take(np.asarray(codes, dtype=np.int64))
        return pd.array(taken, dtype=TEXT)

    def output(self, values: AnyArray) -> Any:
        return values

    def to_dict(self) -> dict[str, Any]:
        document = {
            "name": self.name,
            "type": "categorical",
            "categories": list(self.categories),
            "unknown": self.unknown,
            "missing": self.missing,
        }
        return document | ({"match": self.match} if self.match != "exact" else {})


def _texts(values: pd.Series) -> pd.Series:
    """Values of any kind as pandas text, bytes read as UTF-8.

    A byte that is not UTF-8 is replaced (U+FFFD), so that the value matches no category
    instead of ending the count (a Parquet column stored as binary, read in process).
    """
    try:
        return values.astype("string")
    except UnicodeDecodeError:
        return values.map(_decoded).astype("string")


def _decoded(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@dataclass(frozen=True)
class IgnoredColumn:
    """A column the mechanisms never read."""

    name: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": "ignored"}


Column = NumericColumn | CategoricalColumn


def _missing_choice(d: dict[str, Any]) -> str:
    missing = d.get("missing", "cell")
    if missing not in MISSING_CHOICES:
        raise MechanismError(
            f'column {d["name"]!r}: missing ({shown(missing)}) must be "cell" or "reject"'
        )
    return str(missing)


def _numeric_from_dict(d: dict[str, Any]) -> NumericColumn:
    name, lower, upper = d["name"], d.get("lower"), d.get("upper")
    integer = d.get("integer", False)
    if not isinstance(integer, bool):
        raise MechanismError(f"column {name!r}: integer ({shown(integer)}) must be true or false")
    return _binned(d, lower, upper, integer=integer, part=None)


def _binned(
    d: dict[str, Any], lower: Any, upper: Any, *, integer: bool, part: str | None
) -> NumericColumn:
    """A NumericColumn from validated bounds and the declared bins, decimals and missing."""
    name, bins = d["name"], d.get("bins")
    if not (_is_number(lower) and _is_number(upper)):
        raise MechanismError(
            f"column {name!r}: lower ({shown(lower)}) and upper ({shown(upper)}) must be "
            f"{NUMBER_RULE}"
        )
    if lower == upper:
        raise MechanismError(
            f"column {name!r}: lower and upper are both {shown(lower)}; give a range with upper "
            "above lower"
        )
    if not lower < upper:
        raise MechanismError(
            f"column {name!r}: lower ({lower!r}) must be below upper ({upper!r}); swap them"
        )
    if not math.isfinite(upper - lower):
        raise MechanismError(
            f"column {name!r}: the range from lower ({lower!r}) to upper ({upper!r}) is wider "
            "than a 64-bit float holds (about 1.8e308); narrow it"
        )
    missing = _missing_choice(d)
    if integer:
        if not (_is_whole(lower) and _is_whole(upper)):
            raise MechanismError(
                f"column {name!r}: lower ({shown(lower)}) and upper ({shown(upper)}) must be whole "
                'numbers for a whole-number column; set "integer": false otherwise'
            )
        if not (-EXACT_WHOLE <= lower and upper < EXACT_WHOLE):
            raise MechanismError(
                f"column {name!r}: lower ({lower!r}) and upper ({upper!r}) of a whole-number "
                f"column must lie from {-EXACT_WHOLE} to {EXACT_WHOLE - 1}, the whole numbers "
                'a 64-bit float holds exactly; narrow them or set "integer": false'
            )
        if d.get("decimals") not in (None, 0):
            raise MechanismError(
                f"column {name!r}: decimals ({shown(d['decimals'])}) applies to non-integer columns"
            )
        edges, spec = _integer_edges(name, int(lower), int(upper), bins)
        return NumericColumn(
            name, float(lower), float(upper), edges, False, missing, True, 0, spec, part
        )
    edges, equal = _edges(name, float(lower), float(upper), bins)
    decimals = _decimals(name, edges, d.get("decimals"))
    declared: int | list[Any] = bins if isinstance(bins, int) else [_plain(e) for e in edges]
    return NumericColumn(
        name, float(lower), float(upper), edges, equal, missing, False, decimals, declared, part
    )


def _edges(name: str, lower: float, upper: float, bins: Any) -> tuple[tuple[float, ...], bool]:
    if isinstance(bins, int) and not isinstance(bins, bool):
        if not 1 <= bins <= MAX_CELLS:
            raise MechanismError(
                f"column {name!r}: bins ({shown(bins)}) must be between 1 and {MAX_CELLS}"
            )
        edges = tuple(float(e) for e in np.linspace(lower, upper, bins + 1))
        if not all(a < b for a, b in zip(edges, edges[1:], strict=False)):
            raise MechanismError(
                f"column {name!r}: {bins} equal bins are too narrow for the range from "
                f"{lower!r} to {upper!r}: neighbouring bin edges are the same 64-bit float; use "
                "fewer bins or a wider range"
            )
        return edges, True
    if not (isinstance(bins, list) and len(bins) >= 2 and all(_is_number(e) for e in bins)):
        raise MechanismError(
            f"column {name!r}: bins ({shown(bins)}) must be a count or a list of at least two edges"
        )
    if not (
        all(a < b for a, b in zip(bins, bins[1:], strict=False))
        and bins[0] == lower
        and bins[-1] == upper
    ):
        raise MechanismError(
            f"column {name!r}: bin edges ({shown(bins)}) must increase from lower ({shown(lower)}) "
            f"to upper ({shown(upper)})"
        )
    return tuple(float(e) for e in bins), False


def _integer_edges(
    name: str, lower: int, upper: int, bins: Any
) -> tuple[tuple[float, ...], int | list[int]]:
    """Whole-number edges ending at upper + 1, and the bins to publish."""
    values = upper - lower + 1
    if bins is None:
        bins = values if values <= SMALL_INTEGER_RANGE else DEFAULT_INTEGER_BINS
    if isinstance(bins, int) and not isinstance(bins, bool):
        if not 1 <= bins <= min(values, MAX_CELLS):
            raise MechanismError(
                f"column {name!r}: bins ({bins}) must be between 1 and {min(values, MAX_CELLS)}"
                f" (at most one bin per whole number from {lower} to {upper})"
            )
        edges = [lower + (i * values) // bins for i in range(bins + 1)]
        return tuple(float(e) for e in edges), bins
    if not (isinstance(bins, list) and len(bins) >= 2 and all(_is_whole(e) for e in bins)):
        raise MechanismError(
            f"column {name!r}: bins ({shown(bins)}) must be a count or a list of at least two "
            "whole-number edges"
        )
    edges = [int(e) for e in bins]
    if edges[-1] == upper and len(edges) > 1:
        edges[-1] = upper + 1  # the last bin includes upper
    if not (
        all(a < b for a, b in zip(edges, edges[1:], strict=False))
        and edges[0] == lower
        and edges[-1] == upper + 1
    ):
        raise MechanismError(
            f"column {name!r}: bin edges ({shown(bins)}) must increase from lower ({lower}) to "
            f"upper ({upper}) or upper + 1 ({upper + 1})"
        )
    return tuple(float(e) for e in edges), [int(e) for e in bins]


def _decimals(name: str, edges: tuple[float, ...], declared: Any) -> int:
    """The declared precision, checked to leave a value inside every bin, or the default.

    The default is two more digits than the narrowest bin needs, at most MAX_DECIMALS and at
    most what float64 holds exactly at the column's magnitude; edges are strictly increasing.
    """
    if declared is None:
        narrowest = float(np.min(np.diff(edges)))
        magnitude = max(abs(edges[0]), abs(edges[-1]), 1.0)
        exact = math.floor(math.log10(EXACT_WHOLE / magnitude))
        wanted = 2 - math.floor(math.log10(narrowest))
        decimals = max(0, min(MAX_DECIMALS, exact, wanted))
        fix = "use fewer bins or a wider range"
    elif isinstance(declared, bool) or not isinstance(declared, int) or not 0 <= declared <= 12:
        raise MechanismError(
            f"column {name!r}: decimals ({shown(declared)}) must be a whole number from 0 to 12"
        )
    else:
        decimals, fix = declared, "use more decimals or wider bins"
    with np.errstate(over="ignore", invalid="ignore"):
        _, count, _ = _grid(edges, decimals, True)
    empty = ~(count >= 1)  # NaN when the scaled edges overflow
    if empty.any():
        i = int(np.argmax(empty))
        raise MechanismError(
            f"column {name!r}: decimals ({decimals}{' by default' if declared is None else ''}"
            f") leaves no value inside the bin [{edges[i]:g}, {edges[i + 1]:g}); {fix}"
        )
    return decimals


def _date_from_dict(d: dict[str, Any]) -> NumericColumn:
    name, part = d["name"], d.get("part")
    if not isinstance(part, str) or part not in DATE_PARTS:
        raise MechanismError(
            f"column {name!r}: part ({shown(part)}) must be one of {', '.join(DATE_PARTS)}"
        )
    fixed = DATE_PARTS[part]
    lower, upper = d.get("lower"), d.get("upper")
    if fixed is not None:
        lower = fixed[0] if lower is None else lower
        upper = fixed[1] if upper is None else upper
        if not (_is_whole(lower) and _is_whole(upper) and fixed[0] <= lower <= upper <= fixed[1]):
            raise MechanismError(
                f"column {name!r}: a {part} lies between {fixed[0]} and {fixed[1]}; "
                f"lower ({shown(lower)}) and upper ({shown(upper)}) must be whole numbers in that "
                "range"
            )
        if lower == upper:
            raise MechanismError(f"column {name!r}: lower must be below upper")
    if part == "date":
        lower, upper = day_number(name, "lower", lower), day_number(name, "upper", upper)
        bins = d.get("bins")
        if isinstance(bins, list):
            d = d | {"bins": [day_number(name, "bins", e) for e in bins]}
    return _binned(d, lower, upper, integer=True, part=part)


def _categorical_from_dict(d: dict[str, Any]) -> CategoricalColumn:
    name, categories, unknown = d["name"], d.get("categories"), d.get("unknown", "other")
    if not (
        isinstance(categories, list)
        and categories
        and all(isinstance(c, str | int) and not isinstance(c, bool) for c in categories)
    ):
        raise MechanismError(
            f"column {name!r}: categories ({shown(categories)}) must be a non-empty list of texts"
        )
    labels = tuple(str(c) for c in categories)
    if len(set(labels)) != len(labels) or {OTHER_LABEL, MISSING_LABEL} & set(labels):
        raise MechanismError(
            f"column {name!r}: categories ({shown(categories)}) must be distinct and must not "
            f"include {OTHER_LABEL!r} or {MISSING_LABEL!r}"
        )
    if any(not label.strip() for label in labels):
        raise MechanismError(
            f'column {name!r}: an empty category is a missing value; use "missing": "cell"'
        )
    if unknown not in ("other", "reject"):
        raise MechanismError(
            f'column {name!r}: unknown ({shown(unknown)}) must be "other" or "reject"'
        )
    match = d.get("match", "exact")
    if match not in MATCH_CHOICES:
        raise MechanismError(
            f'column {name!r}: match ({shown(match)}) must be "exact" or "casefold"'
        )
    if match == "casefold":
        _check_folded_distinct(name, labels)
    return CategoricalColumn(name, labels, unknown, _missing_choice(d), match)


def _check_folded_distinct(name: str, labels: tuple[str, ...]) -> None:
    """Refuse categories that capitals and surrounding spaces alone tell apart.

    Under "casefold" a value could not say which one of them it is.
    """
    seen: dict[str, str] = {}
    for label in labels:
        folded = label.strip().casefold()
        if folded in seen:
            raise MechanismError(
                f"column {name!r}: categories {seen[folded]!r} and {label!r} are the same once "
                'capitals and surrounding spaces are ignored ("match": "casefold"); remove '
                'one, or declare "match": "exact"'
            )
        seen[folded] = label


def _column_from_dict(d: dict[str, Any]) -> Column | IgnoredColumn:
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"]:
        raise MechanismError(
            f'schema column ({shown(d)}) must be an object with a non-empty "name"'
        )
    kind = d.get("type")
    if kind == "numeric":
        return _numeric_from_dict(d)
    if kind == "date":
        return _date_from_dict(d)
    if kind == "categorical":
        return _categorical_from_dict(d)
    if kind == "ignored":
        return IgnoredColumn(d["name"])
    raise MechanismError(
        f"column {d['name']!r}: type ({shown(kind)}) must be numeric, date, categorical or ignored"
    )


class Schema:
    """Public metadata of a table: one spec per column, in file order."""

    def __init__(self, columns: list[Column | IgnoredColumn], person: PersonLevel | None = None):
        self.columns = {c.name: c for c in columns}
        self.person = person  # the person column (never released) and k; mechanisms.persons
        if len(self.columns) != len(columns):
            names = [c.name for c in columns]
            dup = next(n for n in names if names.count(n) > 1)
            raise MechanismError(
                f"schema column name ({dup!r}) appears twice; names must be unique"
            )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schema:
        """Build and validate a schema from its JSON form."""
        if not isinstance(d, dict) or not isinstance(d.get("columns"), list) or not d["columns"]:
            raise MechanismError(
                'schema must be an object {"columns": [...]} with at least one column'
            )
        entries, person = split_schema(d)
        if person is not None and any(
            isinstance(c, dict) and c.get("name") == person.column for c in entries
        ):
            raise MechanismError(f"schema column name ({person.column!r}) appears twice")
        return cls([_column_from_dict(c) for c in entries], person)

    @classmethod
    def load(cls, path: str | Path, max_rows_per_person: int | None = None) -> Schema:
        """Read a schema JSON file.

        `max_rows_per_person` (the command line's) stands in for the file's when the file names
        a person column without one.
        """
        try:
            document = parsed_json(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise MechanismError(
                f"schema file ({str(path)!r}) cannot be read: {exc.strerror}"
            ) from None
        except ValueError as exc:
            raise MechanismError(f"schema file ({str(path)!r}) is not valid JSON: {exc}") from None
        if max_rows_per_person is not None and isinstance(document, dict):
            document.setdefault("max_rows_per_person", max_rows_per_person)
        return cls.from_dict(document)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        document: dict[str, Any] = {"columns": [c.to_dict() for c in self.columns.values()]}
        if self.person is not None:
            column, top = schema_entries(self.person)
            document["columns"].insert(self.person.position, column)
            document.update(top)
        return document

    def column(self, name: str) -> Column:
        """The spec of a column a mechanism may use (not ignored)."""
        spec = self.columns.get(name)
        if spec is None:
            raise MechanismError(
                f"column ({name!r}) is not in the schema; known columns: {', '.join(self.columns)}"
            )
        if isinstance(spec, IgnoredColumn):
            raise MechanismError(
                f"column ({name!r}) is marked ignored in the schema; declare its "
                "type (numeric or categorical) to use it"
            )
        return spec

    def accepting(self) -> Schema:
        """The schema with every "reject" rule read as its accepting twin.

        A value outside a column's categories goes to "(other)" and a missing value to
        "(missing)", so no value makes counting fail. This is how a table counted where it
        lives (an EngineTable) is read: it is checked against no schema and may change after
        any check, and once a release has started its data must never make it fail.

        Privacy: every row still lands in exactly one cell, so the cell counts keep the
        sensitivity every mechanism assumes (one row changes them by 1, or 2 when replaced)
        and their sum stays the row count, public under replace-one. Dropping refused rows
        instead would make that sum change under replace-one and publish it.
        """
        columns = [_accepting(c) for c in self.columns.values()]
        return Schema(columns, self.person)

    def resolve_columns(
        self, columns: Sequence[str] | None = None, *, undescribed: bool = False
    ) -> list[str]:
        """The requested column names, validated; None means every column that is not ignored.

        `undescribed`: columns whose metadata is still to be found (a DP estimate of it), so
        an ignored column is accepted too, and None means every column.
        """
        if columns is None:
            columns = [
                n
                for n, c in self.columns.items()
                if undescribed or not isinstance(c, IgnoredColumn)
            ]
        elif isinstance(columns, str):
            columns = [columns]
        columns = list(columns)
        if not columns:
            raise MechanismError("columns (empty) must name at least one schema column")
        if len(set(columns)) != len(columns):
            raise MechanismError(f"columns ({shown(columns)}) must not repeat a column")
        for name in columns:
            if not (undescribed and name in self.columns):
                self.column(name)
        return columns

    def domain_shape(self, columns: Sequence[str] | None) -> tuple[int, ...]:
        """Number of cells along each column, in order."""
        names = self.resolve_columns(columns)
        shape = tuple(self.column(n).n_cells for n in names)
        if math.prod(shape) > MAX_CELLS:
            raise MechanismError(
                f"columns {names} make {math.prod(shape)} cells, more than {MAX_CELLS}; "
                "use fewer bins or columns"
            )
        return shape

    def axis_labels(self, column: str) -> list[str]:
        """Human-readable label of each cell along a column."""
        return self.column(column).labels()

    def encode(self, data: pd.DataFrame, columns: Sequence[str] | None) -> AnyArray:
        """Cell index per column, shape (n, k), int64."""
        columns = self.resolve_columns(columns)
        _check_present(data, columns)
        codes = np.empty((len(data), len(columns)), dtype=np.int64)
        for j, name in enumerate(columns):
            codes[:, j] = self.column(name).encode(data[name])
        return codes

    def _flat_chunks(
        self, data: pd.DataFrame | ChunkedTable, columns: Sequence[str] | None
    ) -> Iterator[tuple[int, AnyArray]]:
        """Yield (start, flat cell index of one chunk's rows), row-major.

        `data` is a DataFrame, encoded CHUNK_ROWS rows at a time, or a ChunkedTable.
        """
        columns = self.resolve_columns(columns)
        shape = self.domain_shape(columns)
        dtype = np.int32 if math.prod(shape) < 2**31 else np.int64
        for start, piece in table_chunks(data, CHUNK_ROWS):
            _check_present(piece, columns)
            flat: AnyArray = np.zeros(len(piece), dtype=dtype)
            for name, size in zip(columns, shape, strict=True):
                flat *= size
                flat += self.column(name).encode(piece[name], start).astype(dtype)
            yield start, flat

    def cell_index(self, data: pd.DataFrame, columns: Sequence[str] | None) -> AnyArray:
        """Flat (row-major) cell index of each row."""
        chunks = [flat for _, flat in self._flat_chunks(data, columns)]
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)

    def cell_counts(
        self, data: pd.DataFrame | ChunkedTable | EngineTable, columns: Sequence[str] | None
    ) -> AnyArray:
        """Exact count of rows in each cell, shape `domain_shape(columns)`, int64.

        `data` is a DataFrame or a ChunkedTable; either is encoded chunk by chunk, so memory
        beyond the input stays small whatever the row count. An EngineTable is counted by its
        engine where the table lives (mechanisms.counting), to the same counts.
        """
        shape = self.domain_shape(columns)
        if isinstance(data, EngineTable):
            return data.cell_counts(self, self.resolve_columns(columns))
        counts = np.zeros(math.prod(shape), dtype=np.int64)
        for _, flat in self._flat_chunks(data, columns):
            counts += np.bincount(flat, minlength=counts.size)
        return counts.reshape(shape)

    def decode(
        self, codes: AnyArray, columns: Sequence[str] | None, rng: RandomSource | None = None
    ) -> pd.DataFrame:
        """Rows from cell codes (n, k): uniform inside numeric bins, labels for categories.

        A missing cell decodes to an empty value.
        """
        columns, rng = self.resolve_columns(columns), resolve_rng(rng)
        codes = np.asarray(codes, dtype=np.int64).reshape(-1, len(columns))
        specs = [self.column(n) for n in columns]
        return pd.DataFrame(
            {s.name: s.output(s.decode(codes[:, j], rng)) for j, s in enumerate(specs)}
        )

    def decode_cells(
        self, flat: AnyArray, columns: Sequence[str] | None, rng: RandomSource | None = None
    ) -> pd.DataFrame:
        """Rows from flat cell indices, decoded in chunks into preallocated columns.

        A numeric column's values are drawn chunk by chunk; a categorical column's codes are
        gathered the same way and its labels taken once at the end (they draw nothing).
        """
        columns, rng = self.resolve_columns(columns), resolve_rng(rng)
        specs = [self.column(n) for n in columns]
        shape = self.domain_shape(columns)
        strides = [math.prod(shape[j + 1 :]) for j in range(len(shape))]
        out = {
            s.name: np.empty(
                len(flat), dtype=np.float64 if isinstance(s, NumericColumn) else np.int64
            )
            for s in specs
        }
        for start in range(0, len(flat), CHUNK_ROWS):
            chunk = flat[start : start + CHUNK_ROWS]
            for spec, size, stride in zip(specs, shape, strides, strict=True):
                codes = (chunk // stride) % size
                numeric = isinstance(spec, NumericColumn)
                out[spec.name][start : start + len(chunk)] = (
                    spec.decode(codes, rng) if numeric else codes
                )
        decoded = {
            s.name: s.output(
                out[s.name] if isinstance(s, NumericColumn) else s.decode(out[s.name], rng)
            )
            for s in specs
        }
        return pd.DataFrame(decoded, copy=False)


def _accepting(column: Column | IgnoredColumn) -> Column | IgnoredColumn:
    """The column with "reject" rules replaced by "other" (unknown) and "cell" (missing)."""
    if isinstance(column, CategoricalColumn):
        return replace(column, unknown="other", missing="cell")
    if isinstance(column, NumericColumn):
        return replace(column, missing="cell")
    return column


def _check_present(data: pd.DataFrame, columns: list[str]) -> None:
    missing = [n for n in columns if n not in data.columns]
    if missing:
        raise MechanismError(
            f"column ({missing[0]!r}) is in the schema but not in the data; "
            f"data columns: {', '.join(map(str, data.columns)) or '(none)'}"
        )
