"""A release's CSV files as spreadsheet-friendly tables (the package's CSVs and release.xlsx).

Post-processing of public mechanism output only (no privacy cost, nothing read from the data):

- cells holding JSON (range-count query definitions) become plain text ("age 17 to 40");
- numbers are numbers, rounded to a declared precision (PRECISION_NOTES): counts and count
  estimates to whole numbers; interval bounds outward (lower down, upper up), so an interval
  never gets narrower; synthetic numeric values cut to the decimals of their column's bin edges,
  so every value stays in its bin; other numbers to 4 significant digits;
- interval columns (`ci_lower`, `ci_upper`, or any `*_lower` / `*_upper`) sit right after the
  estimate they belong to;
- a negative noisy count is kept (so sums over cells stay unbiased) and explained in a `note`
  column on its row.

Columns are recognised by name, so a new mechanism's columns flow through without a special case.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from typing import Any

from mechanisms.csv_safety import escape_cell

Cell = str | int | float | None
ESTIMATE_NAMES = ("noisy_count", "synthetic_count", "count", "answer", "estimate")
NEGATIVE_NOTE = (
    "negative because of the added noise: the true count is 0 or more (read it as 0; "
    "the value is kept so that sums over cells stay unbiased)"
)
PRECISION_NOTES = (
    "Counts and count estimates are rounded to whole numbers.",
    "Interval bounds are rounded outward (lower bounds down, upper bounds up), so no interval "
    "is narrower than computed.",
    "Synthetic numeric values are cut to the decimals of their column's bin edges, so every "
    "value stays in its bin.",
    "Other numbers are rounded to 4 significant digits.",
)


@dataclass
class Table:
    """One released CSV as typed cells: its file name, header, rows and what was done to it."""

    name: str
    header: list[str]
    rows: list[list[Cell]]
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        """The sheet and chart title: the file name without .csv, words spaced."""
        return self.name.removesuffix(".csv").replace("_", " ")

    def column(self, name: str) -> list[Cell]:
        """The cells of one column."""
        index = self.header.index(name)
        return [row[index] for row in self.rows]


def is_estimate(name: str) -> bool:
    """Whether a column holds a count or estimate (intervals go beside it)."""
    return name in ESTIMATE_NAMES or name.endswith("_count") or name.endswith("_estimate")


def is_count(name: str) -> bool:
    """Whether a column holds counts (rounded to whole numbers; negatives explained)."""
    return name in ("noisy_count", "synthetic_count", "count", "answer") or name.endswith("_count")


def is_interval(name: str) -> bool:
    """Whether a column is one bound of an interval (ci_lower, ci_upper, *_lower, *_upper)."""
    return name.endswith("_lower") or name.endswith("_upper")


def read_table(name: str, content: bytes, manifest: dict[str, Any]) -> Table:
    """A released CSV file as a typed, rounded, reordered Table (see the module docstring)."""
    reader = csv.reader(io.StringIO(content.decode("utf-8-sig"), newline=""))
    header = next(reader, [])
    raw = list(reader)
    schema = {c["name"]: c for c in manifest.get("schema", {}).get("columns", [])}
    columns = manifest.get("parameters", {}).get("columns") or list(schema)
    whole = any(is_count(h) for h in header)  # intervals of counts: whole numbers too
    typed = [
        _typed_column(h, [r[i] if i < len(r) else "" for r in raw], schema.get(h), columns, whole)
        for i, h in enumerate(header)
    ]
    order = _order(header)
    rows = [list(r) for r in zip(*[typed[i] for i in order], strict=True)]
    table = Table(name, [header[i] for i in order], rows)
    _explain_negatives(table)
    return table


def _order(header: list[str]) -> list[int]:
    """Column order with each interval bound right after the first estimate column."""
    intervals = [i for i, h in enumerate(header) if is_interval(h)]
    estimates = [i for i, h in enumerate(header) if is_estimate(h)]
    if not intervals or not estimates:
        return list(range(len(header)))
    rest = [i for i in range(len(header)) if i not in intervals]
    at = rest.index(estimates[0]) + 1
    return rest[:at] + intervals + rest[at:]


def _typed_column(
    name: str, cells: list[str], column: dict[str, Any] | None, columns: list[str], whole: bool
) -> list[Cell]:
    numbers = [_number(c) for c in cells]
    if cells and all(n is not None or c == "" for n, c in zip(numbers, cells, strict=True)):
        return [_rounded(name, n, column, whole) for n in numbers]
    return [_text(c, columns) for c in cells]


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _rounded(name: str, value: float | None, column: dict[str, Any] | None, whole: bool) -> Cell:
    if value is None:
        return None
    if is_interval(name):
        return _outward(name, value, 0 if whole else _decimals_for_digits(value, 4))
    if is_count(name) or (value.is_integer() and abs(value) < 2**53 and column is None):
        return round(value)
    if column is not None and column.get("type") == "numeric":
        places = edge_decimals(column)
        return math.floor(value * 10**places) / 10**places if places else math.floor(value)
    return _significant(value, 4)


def _outward(name: str, value: float, places: int) -> int | float:
    scale = 10**places
    step = math.floor if name.endswith("_lower") else math.ceil
    out = step(value * scale) / scale
    return int(out) if places == 0 else out


def _decimals_for_digits(value: float, digits: int) -> int:
    if value == 0:
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(value))))


def _significant(value: float, digits: int) -> int | float:
    rounded = round(value, _decimals_for_digits(value, digits))
    return int(rounded) if float(rounded).is_integer() else rounded


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


def _text(cell: str, columns: list[str]) -> Cell:
    if cell[:1] in "{[":
        try:
            value = json.loads(cell)
        except ValueError:
            return cell
        return readable(value, columns)
    return cell


def readable(value: Any, columns: list[str]) -> str:
    """A JSON value as plain text.

    A box {"lo": [...], "hi": [...]} over the release's columns
    as "age 17 to 40; hours 20 to 60", other objects as "key value; key value".
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
        return f"{_significant(value, 4):g}"
    return str(value)


def _explain_negatives(table: Table) -> None:
    counts = [i for i, h in enumerate(table.header) if is_count(h)]
    flagged = [
        any(isinstance(row[i], int | float) and row[i] < 0 for i in counts)  # type: ignore[operator]
        for row in table.rows
    ]
    if not any(flagged):
        return
    table.header.append("note")
    for row, negative in zip(table.rows, flagged, strict=True):
        row.append(NEGATIVE_NOTE if negative else "")
    table.notes.append(
        f"{sum(flagged)} noisy counts are negative; each is kept and explained in the note "
        "column (read it as 0)."
    )


def csv_text(table: Table) -> bytes:
    """The table as UTF-8 CSV (RFC 4180, CRLF), every text cell escaped for spreadsheets."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([escape_cell(h) for h in table.header])
    for row in table.rows:
        writer.writerow(
            ["" if c is None else escape_cell(c) if isinstance(c, str) else c for c in row]
        )
    return out.getvalue().encode("utf-8")
