"""Checks of a whole input table against its schema, before any release starts.

One rule for the command line and the portal: a value that a release would refuse or could not
place is found here, so that once a release has started, data content cannot make it fail:

- in a numeric or date column: text that is not a number (or not a date), an infinite value
  (inf, or a number too large to store such as 1e309), and, when the column's "missing" is
  "reject", a missing value (empty, or NaN, which counts as missing);
- in a categorical column: a value outside the categories when "unknown" is "reject", and a
  missing (empty) value when "missing" is "reject".

With "missing": "cell" (the default) a missing value is not a problem: it goes to the column's
"(missing)" cell. The command line refuses a file with problems before any noise is drawn; the
portal refuses to confirm such a schema.

The same pass counts, per column, the values that a release moves without refusing them:
numbers outside [lower, upper] (clamped to the nearest bound) and categories not listed (sent
to "(other)"), so the custodian learns that bounds or categories are probably wrong, and
why (`Clamping`: more than 5% of a column's values moved).

Privacy: the messages and counts describe the raw data (counts and row numbers, never a value
itself); they are for the custodian only and must never appear in a public artifact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.schema import CategoricalColumn, Column, NumericColumn, Schema, is_missing

CLAMPING_WARNING_SHARE = 0.05
NUMERIC_PROBLEMS = {
    "missing": "empty (missing) values",
    "missing_or_nan": "empty (missing) or NaN values",
    "nan": "NaN (not a number) values",
    "text": "values that are not numbers",
    "date": "values that are not dates (write them YYYY-MM-DD, optionally with a time)",
    "infinite": "infinite values (inf, -inf, or a number too large to store, such as 1e309)",
}
NUMERIC_FIX = "correct those values in the file, or mark the column ignored"
MISSING_FIX = (
    'fill them in, or declare "missing": "cell" (on the schema page: "Missing values: own '
    'cell") so they are released as a "(missing)" cell'
)
CATEGORY_FIX = (
    "add the missing categories to the schema, "
    'set "unknown" to "other" to group them as "(other)", or correct the file'
)


def refused_values(column: Column, values: pd.Series) -> dict[str, AnyArray]:
    """Boolean masks, by kind of problem, of the values a release of `column` would refuse."""
    if isinstance(column, CategoricalColumn):
        absent = is_missing(values)
        found = {}
        if column.unknown == "reject":  # the encoder's own rule
            found["category"] = (column._category_indices(values) < 0) & ~absent
        if column.missing == "reject":
            found["missing"] = absent
        return found
    found = _numeric_problems(column, values)
    if column.missing == "cell":
        for kind in ("missing", "missing_or_nan", "nan"):
            found.pop(kind, None)
    return found


def _numeric_problems(column: NumericColumn, values: pd.Series) -> dict[str, AnyArray]:
    if values.dtype.kind in "iufb":
        numbers = values.to_numpy(dtype=np.float64, na_value=np.nan)
        return {"missing_or_nan": np.isnan(numbers), "infinite": np.isinf(numbers)}
    text = values.astype("string").str.strip()
    missing = (text.isna() | (text == "")).to_numpy(dtype=bool)
    said_nan = text.str.lower().isin(["nan", "+nan", "-nan"]).to_numpy(dtype=bool, na_value=False)
    numbers = column.numbers(text)
    unreadable = np.isnan(numbers) & ~missing & ~said_nan
    return {
        "missing": missing,
        "nan": said_nan & ~missing,
        "date" if column.part else "text": unreadable,
        "infinite": np.isinf(numbers),
    }


def moved_values(column: Column, values: pd.Series) -> tuple[int, int]:
    """(values clamped to the bounds or sent to "(other)", values present) in one chunk."""
    absent = is_missing(values)
    if isinstance(column, CategoricalColumn):
        outside = (column._category_indices(values) < 0) & ~absent
    else:
        numbers = column.numbers(values)
        with np.errstate(invalid="ignore"):
            outside = (numbers < column.lower) | (numbers > column.upper)
        absent = absent | np.isnan(numbers)
    return int(outside.sum()), int((~absent).sum())


@dataclass(frozen=True)
class Clamping:
    """How many present values of a column a release moves (custodian-only)."""

    column: str
    kind: str  # "numeric" (clamped to the bounds) or "categorical" (sent to "(other)")
    moved: int
    present: int
    compared_exactly: bool = False  # a categorical column with "match": "exact"

    @property
    def share(self) -> float:
        return self.moved / self.present if self.present else 0.0

    @property
    def warn(self) -> bool:
        return self.share > CLAMPING_WARNING_SHARE

    def message(self) -> str:
        where = (
            "outside the declared bounds and are clamped to the nearest bound"
            if self.kind == "numeric"
            else 'not among the declared categories and are released as "(other)"'
        )
        text = (
            f"Column {self.column!r}: {self.moved:,} of {self.present:,} values "
            f"({self.share:.1%}) are {where}"
        )
        if self.warn:
            text += f"; that is more than {CLAMPING_WARNING_SHARE:.0%}. " + self.likely_cause()
        return text + "."

    def likely_cause(self) -> str:
        """What usually makes a large share move, and what to check (no value is quoted)."""
        if self.kind == "numeric":
            return (
                "Likely cause: the bounds are narrower than the data: a guess or a DP estimate "
                "that is too narrow, or another unit (cents for euros, months for years); "
                "check them against public knowledge such as the code book"
            )
        spelling = (
            "capitals or spaces (this column compares exactly: choose to ignore them), "
            if self.compared_exactly
            else ""
        )
        return (
            "Likely cause: the list writes the values differently from the data: "
            f"{spelling}another spelling or code (F and M for Female and Male, 1 and 0 for Yes "
            "and No), or common values missing from the list; check it against the code book"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "column": self.column,
            "kind": self.kind,
            "moved": self.moved,
            "present": self.present,
            "share": self.share,
            "warn": self.warn,
            "message": self.message(),
        }


class DataCheck:
    """Tally of refused and moved values over a table read in consecutive chunks."""

    def __init__(self, schema: Schema, columns: Sequence[str]) -> None:
        specs = [schema.columns.get(name) for name in columns]
        self.columns = [c for c in specs if isinstance(c, NumericColumn | CategoricalColumn)]
        self.rows_seen = 0
        self._found: dict[tuple[str, str], list[int]] = {}  # (column, kind) -> [count, first row]
        self._moved = {c.name: [0, 0] for c in self.columns}  # column -> [moved, present]

    def add(self, frame: pd.DataFrame) -> None:
        """Check the next chunk of rows (the rows after those already added)."""
        for column in self.columns:
            values = frame[column.name]
            for kind, mask in refused_values(column, values).items():
                if mask.any():
                    first = self.rows_seen + int(np.argmax(mask)) + 1
                    tally = self._found.setdefault((column.name, kind), [0, first])
                    tally[0] += int(mask.sum())
            moved, present = moved_values(column, values)
            self._moved[column.name][0] += moved
            self._moved[column.name][1] += present
        self.rows_seen += len(frame)

    def messages(self) -> list[str]:
        """One message per column and kind of problem; rows counted from 1 after the header."""
        return [_message(name, kind, *tally) for (name, kind), tally in self._found.items()]

    def clamping(self) -> list[Clamping]:
        """Per column, the present values a release clamps or sends to "(other)"."""
        return [
            Clamping(
                c.name,
                "categorical" if isinstance(c, CategoricalColumn) else "numeric",
                moved=self._moved[c.name][0],
                present=self._moved[c.name][1],
                compared_exactly=isinstance(c, CategoricalColumn) and c.match == "exact",
            )
            for c in self.columns
        ]


def check_data(data: pd.DataFrame, schema: Schema, columns: Sequence[str]) -> list[str]:
    """Every problem of `data` for a release of `columns` under `schema`; [] if none."""
    absent = [name for name in columns if name not in data.columns]
    check = DataCheck(schema, [name for name in columns if name in data.columns])
    check.add(data)
    return [
        f"column {name!r} is declared in the schema but not in the file" for name in absent
    ] + check.messages()


def clamping_report(data: pd.DataFrame, schema: Schema, columns: Sequence[str]) -> list[Clamping]:
    """Per column of `columns`, the values of `data` a release would clamp or call "(other)"."""
    check = DataCheck(schema, [name for name in columns if name in data.columns])
    check.add(data)
    return check.clamping()


def _message(name: str, kind: str, count: int, row: int) -> str:
    first = f"the first on data row {row:,}"
    if kind == "category":
        verb = "values are" if count > 1 else "value is"
        return (
            f"column {name!r}: {count:,} {verb} not among its declared categories ({first}), "
            f'and its "unknown" is "reject"; {CATEGORY_FIX}'
        )
    if kind in ("missing", "missing_or_nan", "nan"):
        what = NUMERIC_PROBLEMS.get(kind, "empty (missing) values")
        return (
            f'column {name!r} has {count:,} {what} ({first}), and its "missing" is '
            f'"reject"; {MISSING_FIX}'
        )
    noun = "a date" if kind == "date" else "numeric"
    return (
        f"column {name!r} cannot be {noun}: it has {count:,} {NUMERIC_PROBLEMS[kind]} "
        f"({first}); {NUMERIC_FIX}"
    )
