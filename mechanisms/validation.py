"""Checks of a whole input table against its schema, before any release starts.

One rule for the command line and the portal: a value that a release would refuse or could not
place (a missing, non-numeric, NaN or infinite value such as 1e309 in a numeric column; a value
outside the categories of a categorical column whose "unknown" is "reject", missing values
included) is found here, so that once a release has started, data content cannot make it fail.
The command line refuses such a file before any noise is drawn; the portal refuses to confirm
such a schema.

Privacy: the messages describe the raw data (counts and row numbers of refused values, never a
value itself); they are for the custodian only and must never appear in a public artifact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.schema import CategoricalColumn, Column, NumericColumn, Schema

NUMERIC_PROBLEMS = {
    "missing": "empty (missing) values",
    "missing_or_nan": "empty (missing) or NaN values",
    "nan": "NaN (not a number) values",
    "text": "values that are not numbers",
    "infinite": "infinite values (inf, -inf, or a number too large to store, such as 1e309)",
}
NUMERIC_FIX = "fill in or correct those values in the file, or mark the column ignored"
CATEGORY_FIX = (
    "add the missing categories to the schema (an empty value counts as one not listed), "
    'set "unknown" to "other" to group them as "(other)", or correct the file'
)


def refused_values(column: Column, values: pd.Series) -> dict[str, AnyArray]:
    """Boolean masks, by kind of problem, of the values a release of `column` would refuse."""
    if isinstance(column, CategoricalColumn):
        if column.unknown != "reject":
            return {}
        return {"category": column._category_indices(values) < 0}  # the encoder's own rule
    if values.dtype.kind in "iufb":
        numbers = values.to_numpy(dtype=np.float64, na_value=np.nan)
        return {"missing_or_nan": np.isnan(numbers), "infinite": np.isinf(numbers)}
    text = values.astype("string").str.strip()
    missing = (text.isna() | (text == "")).to_numpy(dtype=bool)
    numbers = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    said_nan = text.str.lower().isin(["nan", "+nan", "-nan"]).to_numpy(dtype=bool, na_value=False)
    return {
        "missing": missing,
        "nan": said_nan & ~missing,
        "text": np.isnan(numbers) & ~missing & ~said_nan,
        "infinite": np.isinf(numbers),
    }


class DataCheck:
    """Tally of refused values over a table read in consecutive chunks (or in one piece)."""

    def __init__(self, schema: Schema, columns: Sequence[str]) -> None:
        specs = [schema.columns.get(name) for name in columns]
        self.columns = [c for c in specs if isinstance(c, NumericColumn | CategoricalColumn)]
        self.rows_seen = 0
        self._found: dict[tuple[str, str], list[int]] = {}  # (column, kind) -> [count, first row]

    def add(self, frame: pd.DataFrame) -> None:
        """Check the next chunk of rows (the rows after those already added)."""
        for column in self.columns:
            for kind, mask in refused_values(column, frame[column.name]).items():
                if mask.any():
                    first = self.rows_seen + int(np.argmax(mask)) + 1
                    tally = self._found.setdefault((column.name, kind), [0, first])
                    tally[0] += int(mask.sum())
        self.rows_seen += len(frame)

    def messages(self) -> list[str]:
        """One message per column and kind of problem; rows counted from 1 after the header."""
        return [_message(name, kind, *tally) for (name, kind), tally in self._found.items()]


def check_data(data: pd.DataFrame, schema: Schema, columns: Sequence[str]) -> list[str]:
    """Every problem of `data` for a release of `columns` under `schema`; [] if none."""
    absent = [name for name in columns if name not in data.columns]
    check = DataCheck(schema, [name for name in columns if name in data.columns])
    check.add(data)
    return [
        f"column {name!r} is declared in the schema but not in the file" for name in absent
    ] + check.messages()


def _message(name: str, kind: str, count: int, row: int) -> str:
    first = f"the first on data row {row:,}"
    if kind == "category":
        verb = "values are" if count > 1 else "value is"
        return (
            f"column {name!r}: {count:,} {verb} not among its declared categories ({first}), "
            f'and its "unknown" is "reject"; {CATEGORY_FIX}'
        )
    return (
        f"column {name!r} cannot be numeric: it has {count:,} {NUMERIC_PROBLEMS[kind]} "
        f"({first}); {NUMERIC_FIX}"
    )
