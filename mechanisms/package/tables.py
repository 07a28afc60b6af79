"""A release's CSV files as spreadsheet-friendly tables (the package's CSVs and release.xlsx).

Post-processing of public mechanism output only (no privacy cost, nothing read from the data):

- cells holding JSON (range-count query definitions) become plain text ("age 17 to 40");
- numbers are numbers, rounded to a declared precision (PRECISION_NOTES): counts and count
  estimates to whole numbers; interval bounds outward (lower down, upper up), so an interval
  never gets narrower; synthetic numeric values whole in whole-number and date columns, rounded
  to a column's declared "decimals", else cut to the decimals of their column's bin edges,
  so every value stays in its bin; other numbers to 4 significant digits, or more where an
  estimate's noise is so small that this would add more than a tenth of its standard deviation
  (its `noise_sd` column, else read from its interval; see mechanisms.package.precision), and
  so its interval bounds;
- interval columns (`ci_lower`, `ci_upper`, or any `*_lower` / `*_upper`) sit right after the
  estimate they belong to;
- a negative noisy count is kept (so sums over cells stay unbiased) and explained in a `note`
  column on its row.

Columns are recognised by name, so a new mechanism's columns flow through without a special
case. Columns are converted whole (pandas and pyarrow), never cell by cell: each distinct text
parsed, rounded or made readable once (`distinct_values`, `per_value`), a million synthetic
rows of 8 columns in about 0.3 CPU s, half of it pyarrow's reading of the text. Text columns
are kept as pandas categoricals (each distinct text once, a code per cell), and a numeric
column's distinct values and codes are kept beside it (`Table.encoded`), so the CSV, the
workbook and the charts work per distinct value without finding the distinct values again.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from mechanisms.csv_safety import escape_cell
from mechanisms.package.precision import (
    round_for_noise,
    round_outward,
    sd_from_interval,
    significant,
)

Cell = str | int | float | None
Encoded = tuple[pa.Array, np.ndarray]  # a column's distinct values, each cell's index among them
ESTIMATE_NAMES = ("noisy_count", "synthetic_count", "count", "answer", "estimate")
NEGATIVE_NOTE = (
    "negative because of the added noise: the true count is 0 or more (read it as 0; "
    "the value is kept so that sums over cells stay unbiased)"
)
NOISE_SD = "noise_sd"  # a column stating each estimate's noise standard deviation
PRECISION_NOTES = (
    "Counts and count estimates are rounded to whole numbers.",
    "Interval bounds are rounded outward (lower bounds down, upper bounds up), so no interval "
    "is narrower than computed.",
    "Synthetic values of whole-number and date columns are whole numbers; other synthetic "
    "numeric values are rounded to their column's declared decimals, or else cut to the "
    "decimals of its bin edges, so every value stays in its bin.",
    "Other numbers are rounded to 4 significant digits (never coarser than whole numbers), or "
    "to more decimals where an estimate's noise is small: rounding never moves an estimate or "
    "its interval bounds by more than a tenth of the noise's standard deviation (the noise_sd "
    "column where a table has one, else at most the 95% interval's half-width / 2.12).",
)


WORKBOOK_ROWS = 100_000  # rows per sheet of release.xlsx (Excel holds 1,048,575): the CSV has all


@dataclass
class Table:
    """One released CSV as typed columns: its file name, the frame, what was done to it.

    Numbers are float or nullable integer columns, text columns categoricals (read_table).
    `encoded`: the distinct values and codes read_table rounded a numeric column by, so that
    the CSV and the workbook do not hash its cells again (`distinct`).
    """

    name: str
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    encoded: dict[str, Encoded] = field(default_factory=dict, repr=False)

    @property
    def title(self) -> str:
        """The sheet and chart title: the file name without .csv, words spaced."""
        return self.name.removesuffix(".csv").replace("_", " ")

    @property
    def header(self) -> list[str]:
        """The column names, in order."""
        return [str(c) for c in self.frame.columns]

    @property
    def rows(self) -> list[list[Cell]]:
        """Every row as plain Python values (None where a cell is empty)."""
        return list(self.head_rows(len(self.frame)))

    def head_rows(self, limit: int) -> Iterator[list[Cell]]:
        """The first `limit` rows as plain Python values (None where a cell is empty)."""
        head = self.frame.head(limit).astype(object)
        yield from head.where(head.notna(), None).to_numpy().tolist()

    def distinct(self, name: str, rows: int | None = None) -> Encoded:
        """A column's distinct values and each of its first `rows` cells' index among them.

        As `encoded` holds them (numeric columns read_table rounded once per distinct value:
        a missing value a null among the values), else found now (`distinct_values`: -1
        where a cell is missing). The frame's columns are not changed after read_table.
        """
        if name in self.encoded:
            values, codes = self.encoded[name]
            return values, codes[:rows]
        return distinct_values(pa.array(self.frame[name].iloc[:rows], from_pandas=True))

    def column(self, name: str) -> list[Cell]:
        """The cells of one column."""
        values = self.frame[name].astype(object)
        return list(values.where(values.notna(), None).tolist())

    def is_numeric(self, name: str) -> bool:
        """Whether a column holds numbers (not text)."""
        return bool(pd.api.types.is_numeric_dtype(self.frame[name]))


def is_estimate(name: str) -> bool:
    """Whether a column holds a count or estimate (intervals go beside it)."""
    return name in ESTIMATE_NAMES or name.endswith("_count") or name.endswith("_estimate")


def is_count(name: str) -> bool:
    """Whether a column holds counts or count estimates (whole numbers; negatives explained).

    `answer` (range counts) or any name with the word `count` (real_count_estimate).
    """
    return name == "answer" or "count" in name.split("_")


def is_interval(name: str) -> bool:
    """Whether a column is one bound of an interval (ci_lower, ci_upper, *_lower, *_upper)."""
    return name.endswith("_lower") or name.endswith("_upper")


def read_table(name: str, content: bytes, manifest: dict[str, Any]) -> Table:
    """A released CSV file as a typed, rounded, reordered Table (see the module docstring)."""
    raw = text_cells(content)
    schema = {c["name"]: c for c in manifest.get("schema", {}).get("columns", [])}
    columns = manifest.get("parameters", {}).get("columns") or list(schema)
    whole = any(is_count(str(h)) for h in raw.columns)  # intervals of counts: whole numbers
    header = [str(h) for h in raw.columns]
    sd = _noise_sd(raw, header)
    owner = _owner(header)
    typed = {
        h: _typed_column(
            h, raw[h], schema.get(h), columns, whole, sd if h == owner or is_interval(h) else None
        )
        for h in header
    }
    order = _order(list(typed))
    frame = pd.DataFrame({h: typed[h][0] for h in order}, copy=False)  # columns are new
    encoded = {h: known for h, (_, known) in typed.items() if known is not None}
    table = Table(name, frame, encoded=encoded)
    _explain_negatives(table)
    return table


def text_cells(content: bytes) -> pd.DataFrame:
    """Every cell of a CSV as text, an empty one "" (nothing is read as missing).

    Read by pyarrow, several times faster than pandas on large synthetic tables; by pandas
    when pyarrow cannot (repeated column names, which pandas renames). The same frame as
    pandas' `read_csv(dtype=str, keep_default_na=False)`; the portal reads released CSVs with
    it too (`dpportal.releases.packaging.read_csv`).
    """
    text = io.TextIOWrapper(io.BytesIO(content), encoding="utf-8-sig", newline="")
    names = next(csv.reader(text), [])
    if names and len(set(names)) == len(names):
        options = pa_csv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )
        with contextlib.suppress(pa.ArrowInvalid):
            table = pa_csv.read_csv(io.BytesIO(content), convert_options=options)
            frame: pd.DataFrame = table.to_pandas()
            return frame
    return pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False, encoding="utf-8-sig")


def _order(header: list[str]) -> list[str]:
    """Column order with the interval bounds right after their estimate.

    Their estimate is the last estimate column before the first bound (real_count_estimate,
    not synthetic_count, in "synthetic_count, real_count_estimate, ci_lower, ci_upper"), else
    the first estimate.
    """
    owner = _owner(header)
    if owner is None:
        return header
    intervals = [h for h in header if is_interval(h)]
    rest = [h for h in header if h not in intervals]
    at = rest.index(owner) + 1
    return rest[:at] + intervals + rest[at:]


def _owner(header: list[str]) -> str | None:
    """The estimate column the interval bounds belong to, in the CSV's own column order."""
    intervals = [h for h in header if is_interval(h)]
    estimates = [h for h in header if is_estimate(h)]
    if not intervals or not estimates:
        return None
    before = [h for h in header[: header.index(intervals[0])] if is_estimate(h)]
    return before[-1] if before else estimates[0]


def _noise_sd(raw: pd.DataFrame, header: list[str]) -> pd.Series | None:
    """Each row's noise sd, or NaN where unknown.

    As the mechanism states it (a `noise_sd` column: range counts), else a lower bound read from
    the row's first interval.
    """
    if NOISE_SD in header:
        return pd.to_numeric(raw[NOISE_SD], errors="coerce")
    lowers = [h for h in header if h.endswith("_lower")]
    upper = lowers[0].removesuffix("_lower") + "_upper" if lowers else ""
    if upper not in header:
        return None
    low, high = (pd.to_numeric(raw[h], errors="coerce") for h in (lowers[0], upper))
    return pd.Series(
        [sd_from_interval(a, b) for a, b in zip(low, high, strict=True)], index=raw.index
    )


def interval_owner(table: Table) -> str | None:
    """The estimate column the table's interval bounds belong to (the one right before them)."""
    header = table.header
    bounds = [k for k, h in enumerate(header) if is_interval(h)]
    if bounds and bounds[0] > 0 and is_estimate(header[bounds[0] - 1]):
        return header[bounds[0] - 1]
    return None


def _typed_column(
    name: str,
    cells: pd.Series,
    column: dict[str, Any] | None,
    columns: list[str],
    whole: bool,
    sd: pd.Series | None,
) -> tuple[pd.Series, Encoded | None]:
    """A column typed and rounded; its distinct values and codes where it was rounded by them.

    A text column's categories are its distinct values already (None).
    """
    categorical = column is not None and column.get("type") == "categorical"  # "007" stays
    if not categorical and len(cells):  # never parsed: to_numeric is slow on text
        texts, codes = distinct_values(pa.array(cells, type=pa.string(), from_pandas=True))
        if bool((codes >= 0).all()):  # no missing cell (text_cells reads none)
            once = texts.to_pandas()  # each distinct text parsed and rounded once
            numbers = _numbers(once).replace([np.inf, -np.inf], np.nan)
            if bool((numbers.notna() | (once == "")).all()):
                numbers = numbers.astype(float)
                if sd is None:  # every rule of `_rounded` then takes one value at a time
                    rounded = _rounded(name, numbers, column, whole, None)
                    encoded = (pa.array(rounded, from_pandas=True), codes)
                    return _taken(rounded, codes, cells), encoded
                return _rounded(name, _taken(numbers, codes, cells), column, whole, sd), None
    declared = column.get("categories", []) if categorical and column is not None else []
    texts = per_value(cells, lambda cell: _text(cell, columns), declared)
    typed: pd.Series = texts.to_pandas().set_axis(cells.index)
    return typed, None


def distinct_values(cells: pa.Array | pa.ChunkedArray, declared: Sequence[Any] = ()) -> Encoded:
    """A column's distinct values and each cell's index among them (-1 where missing).

    A dictionary (categorical) column's own dictionary and indices; a text column whose every
    cell is one of the `declared` texts (a categorical column's categories in the schema),
    those (some perhaps taken by no cell) and each cell's index among them, looked up by
    pyarrow's `index_in` (two thirds of a hash's time); else one hash of its cells
    (pyarrow's `dictionary_encode`). The column is the values taken at the codes.
    """
    texts = list(dict.fromkeys(t for t in declared if isinstance(t, str)))
    if texts and (pa.types.is_string(cells.type) or pa.types.is_large_string(cells.type)):
        values = pa.array(texts, pa.string())
        found = pc.index_in(cells, value_set=values)
        if found.null_count == 0:
            return values, found.to_numpy().astype(np.int32, copy=False)
    encoded = cells if pa.types.is_dictionary(cells.type) else pc.dictionary_encode(cells)
    chunks = encoded.chunks if isinstance(encoded, pa.ChunkedArray) else [encoded]
    if not chunks:
        return pa.array(
            [], cells.type.value_type if pa.types.is_dictionary(cells.type) else cells.type
        ), np.zeros(0, dtype=np.int32)
    values = chunks[0].dictionary
    if not all(chunk.dictionary.equals(values) for chunk in chunks[1:]):  # one memo: never
        decoded = [chunk.dictionary_decode() for chunk in chunks]
        return distinct_values(pc.dictionary_encode(pa.concat_arrays(decoded)))
    codes = np.concatenate(
        [chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False) for chunk in chunks]
    ).astype(np.int32, copy=False)
    return values, codes


def _taken(once: pd.Series, codes: np.ndarray, like: pd.Series) -> pd.Series:
    """The column of `like`'s index whose cells are `once`'s values at `codes` (none -1)."""
    return pd.Series(once.array.take(codes), index=like.index, name=like.name)


def per_value(
    values: pd.Series,
    rule: Callable[[str], str],
    declared: Sequence[Any] = (),
) -> pa.DictionaryArray:
    """A text column as arrow dictionary text, `rule` applied once per distinct value.

    A missing value stays missing. The distinct values are a categorical column's categories
    (a Table's text columns are categorical), else the `declared` ones where every cell is
    one, else found by one hash (`distinct_values`); the cells are then indices into the
    rule's texts: pandas' `map` took 0.1 CPU s a column on a million synthetic rows
    (benchmarks/package_build.py).
    """
    texts, codes = distinct_values(pa.array(values, from_pandas=True), declared)
    return dictionary_cells([rule(text) for text in texts.to_pylist()], codes)


def dictionary_cells(texts: list[str], codes: np.ndarray) -> pa.DictionaryArray:
    """The cells `texts[code]` (missing where a code is -1), each distinct text once."""
    index: dict[str, int] = {}
    remap = np.array([index.setdefault(t, len(index)) for t in texts] + [-1], dtype=np.int32)
    cells = remap[codes]  # -1 takes the -1 after the texts: missing stays missing
    indices = pa.array(cells, mask=cells < 0)
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(index), pa.string()))


def _numbers(cells: pd.Series) -> pd.Series:
    """The cells as floats, NaN where a cell is not a number.

    pyarrow's parser when every cell is one (ten times faster), else pandas'.
    """
    try:
        parsed = pc.cast(pa.array(cells, type=pa.string()), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pd.to_numeric(cells, errors="coerce")
    return pd.Series(parsed.to_numpy(zero_copy_only=False), index=cells.index)


def _rounded(
    name: str,
    values: pd.Series,
    column: dict[str, Any] | None,
    whole: bool,
    sd: pd.Series | None,
) -> pd.Series:
    """`values` rounded by the module docstring's rules; `sd`: each row's noise sd, if known."""
    noise = sd if sd is not None else pd.Series(np.nan, index=values.index)
    if is_interval(name):
        step = np.floor if name.endswith("_lower") else np.ceil
        if whole:
            return _whole(_apply(step, values))
        up = name.endswith("_upper")
        return _each(values, noise, lambda v, s: round_outward(v, s, up))
    if is_count(name) or (column is None and _integral(values)):
        return _whole(values.round())
    if column is not None and (column.get("integer") or column.get("type") == "date"):
        return _whole(values.round())  # whole-number columns and date parts stay whole
    if column is not None and "decimals" in column:
        return values.round(int(column["decimals"]))  # the declared precision
    if column is not None and column.get("type") == "numeric":
        factor = 10.0 ** edge_decimals(column)
        return _apply(np.floor, values * factor) / factor
    return _each(values, noise, round_for_noise)


def _integral(values: pd.Series) -> bool:
    """Whether every value of a float column is a whole number that a float holds exactly."""
    finite = values.dropna()
    return bool((finite == finite.round()).all()) and bool((finite.abs() < 2**53).all())


def _each(values: pd.Series, sd: pd.Series, rule: Any) -> pd.Series:
    """`rule(value, sd)` on each non-empty value of a column."""
    rounded = [rule(v, s) if pd.notna(v) else v for v, s in zip(values, sd, strict=True)]
    return pd.Series(rounded, index=values.index, dtype=float)


def _apply(step: Any, values: pd.Series) -> pd.Series:
    """np.floor or np.ceil of a float column, as a column."""
    return pd.Series(step(values.to_numpy(dtype=float)), index=values.index)


def _whole(values: pd.Series) -> pd.Series:
    return values.astype("Int64")


def edge_decimals(column: dict[str, Any]) -> int:
    """Decimals needed to write every bin edge of a numeric schema column (at most 6)."""
    lower, upper, bins = float(column["lower"]), float(column["upper"]), column["bins"]
    if isinstance(bins, int):
        edges = [lower + (upper - lower) * k / bins for k in range(bins + 1)]
    else:
        edges = [float(e) for e in bins]
    for places in range(7):
        if all(abs(round(e, places) - e) < 1e-9 for e in edges):
            return places
    return 6


def _text(cell: str, columns: list[str]) -> str:
    if cell[:1] in "{[":
        try:
            value = json.loads(cell)
        except ValueError:
            return cell
        return readable(value, columns)
    return cell


def readable(value: Any, columns: list[str]) -> str:
    """A JSON value as plain text.

    A box {"lo": [...], "hi": [...]} over the release's columns reads "age 17 to 40; hours 20
    to 60", other objects "key value; key value".
    """
    if isinstance(value, dict):
        lo, hi = value.get("lo"), value.get("hi")
        if isinstance(lo, list) and isinstance(hi, list) and len(lo) == len(hi) == len(columns):
            return "; ".join(
                f"{c} {_short(a)} to {_short(b)}" for c, a, b in zip(columns, lo, hi, strict=True)
            )
        return "; ".join(f"{k} {readable(v, columns)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(readable(v, columns) for v in value)
    return _short(value)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{significant(value):g}"
    return str(value)


def _explain_negatives(table: Table) -> None:
    counts = [h for h in table.header if is_count(h)]
    if not counts or table.frame.empty:
        return
    negative = (table.frame[counts].fillna(0) < 0).any(axis=1)
    if not negative.any():
        return
    table.frame["note"] = np.where(negative, NEGATIVE_NOTE, "")
    table.notes.append(
        f"{int(negative.sum())} noisy counts are negative; each is kept and explained in the "
        "note column (read it as 0)."
    )


def csv_text(table: Table) -> bytes:
    """The table as UTF-8 CSV (RFC 4180, CRLF), every text cell escaped for spreadsheets.

    The header is written by the csv module; the rows as pyarrow's CSV writer wrote them
    (text cells quoted, numbers in their shortest form, an empty value an empty field), but
    not cell by cell: each column's field is written once per distinct value (`column_fields`
    of `Table.distinct`: a numeric column's values and codes as read_table kept them),
    neighbouring columns whose values make few combinations are joined once per combination
    (`joined_lines`), and each line is taken from those by index and joined by pyarrow. The
    writer formatted every number of a million synthetic rows anew, most of the CSV's time
    (benchmarks/package_build.py).
    """
    header = io.StringIO()
    writer = csv.writer(header, lineterminator="\r\n")
    writer.writerow([escape_cell(h) for h in table.header])
    if len(table.header) == 1:  # an empty value alone on its line is written "": readers skip
        (name,) = table.header  # a blank line
        values = table.frame[name]
        cells = (
            pa.array(values, from_pandas=True)
            if table.is_numeric(name)
            else per_value(values, escape_cell)
        )
        writer.writerows([[text or ""] for text in pc.cast(cells, pa.string()).to_pylist()])
        return header.getvalue().encode("utf-8")
    fields = [
        column_fields(table.distinct(name), table.is_numeric(name), _csv_numbers, _csv_text, "")
        for name in table.header
    ]
    lines = joined_lines(fields, ",", "", "\r\n")
    return b"".join([header.getvalue().encode("utf-8"), *lines])


COMBINATIONS = 1 << 16  # at most this many combinations of neighbouring columns' fields
BLOCK_ROWS = 1 << 20  # lines joined at a time, and at most BLOCK_BYTES of them
BLOCK_BYTES = 1 << 30  # (pyarrow's text holds at most 2 GB)


def column_fields(
    encoded: Encoded,
    numeric: bool,
    numbers: Callable[[pa.Array], pa.Array],
    text: Callable[[str], str],
    empty: str,
) -> tuple[pa.Array, np.ndarray]:
    """One column's fields as a file writes them, each distinct one once; each cell's index.

    `encoded`: the column's distinct values and each cell's index among them
    (`Table.distinct`). The fields are `numbers` of the distinct numbers, or `text` of each
    distinct text, `empty` for a missing (null) value; then `empty` again, the field of a
    cell whose index is -1.
    """
    values, codes = encoded
    if numeric:
        texts = numbers(values)
    else:
        texts = pa.array([text(value) for value in values.to_pylist()], pa.string())
    missing = len(texts)
    texts = pa.concat_arrays([texts.cast(pa.string()), pa.array([empty], pa.string())])
    return texts.fill_null(empty), np.where(codes < 0, missing, codes)


def joined_lines(
    fields: list[tuple[pa.Array, np.ndarray]], separator: str, before: str, after: str
) -> list[memoryview]:
    """Each row's fields (`column_fields`) joined by `separator`, between `before` and `after`.

    Returned as views of pyarrow's text, one per block of rows (not copied).
    Neighbouring columns whose fields make few combinations (at most COMBINATIONS, and no
    more than rows) are joined once per combination, each row's taken by index; then the
    groups are taken and joined by pyarrow, not cell by cell in Python.
    """
    if not fields:
        return []
    (first, at), *rest = fields
    fields = [(pc.binary_join_element_wise(before, first, ""), at), *rest]
    texts, codes = fields[-1]
    fields[-1] = (pc.binary_join_element_wise(texts, after, ""), codes)
    rows = len(codes)
    groups = _combined(fields, separator, min(COMBINATIONS, rows))
    longest = sum(pc.max(pc.binary_length(texts)).as_py() or 0 for texts, _ in groups)
    step = max(1, min(BLOCK_ROWS, BLOCK_BYTES // (longest + len(groups) * len(separator) + 1)))
    lines = []
    for start in range(0, rows, step):
        block = [texts.take(codes[start : start + step]) for texts, codes in groups]
        lines.append(text_data(pc.binary_join_element_wise(*block, separator)))
    return lines


def _combined(
    fields: list[tuple[pa.Array, np.ndarray]], separator: str, most: int
) -> list[tuple[pa.Array, np.ndarray]]:
    """The fields, neighbours joined by `separator` where they make at most `most` pairs.

    Every combination's text is made once, and each row's combination is its index.
    """
    groups: list[tuple[pa.Array, np.ndarray]] = []
    for texts, codes in fields:
        if groups and len(groups[-1][0]) * len(texts) <= most:
            before, at = groups[-1]
            size = len(texts)
            pairs = np.arange(len(before) * size)
            joined = pc.binary_join_element_wise(
                before.take(pairs // size), texts.take(pairs % size), separator
            )
            groups[-1] = (joined, at * size + codes)
        else:
            groups.append((texts, codes))
    return groups


def _csv_numbers(values: pa.Array) -> pa.Array:
    """Numbers as pyarrow's CSV writer writes them (its cast to text)."""
    return pc.cast(values, pa.string())


def _csv_text(text: str) -> str:
    """A text cell as pyarrow's CSV writer quoted it, escaped for spreadsheets first."""
    return _quoted(escape_cell(text))


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def text_data(texts: pa.Array) -> memoryview:
    """The UTF-8 text of a string array's values one after the other: a view of its data."""
    _, offsets, data = texts.buffers()
    if data is None:  # no value at all
        return memoryview(b"")
    width = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    ends = np.frombuffer(offsets, dtype=width)[texts.offset : texts.offset + len(texts) + 1]
    return memoryview(data)[int(ends[0]) : int(ends[-1])]
