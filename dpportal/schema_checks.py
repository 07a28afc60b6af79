"""The data check at schema confirmation: once a schema is confirmed, data content can no longer
make a release fail.

Every value a release would refuse (a missing value, text, NaN or an infinite value such as
1e309 in a numeric column; a value outside the categories of a categorical column whose
unlisted values stop the release) is found here, in the stored Parquet copy, before any release
exists. The custodian sees their own data on this page, so the messages say which column, how
many values and the first data row (counted from 1 after the header); they never quote a value,
so nothing from the data reaches a message, a log line or an error page.

The columns are read in batches and turned into the same frames the release engine builds
(`release_engine._to_frame`); categories are matched and text parsed by the mechanisms' own
rules, so what passes here encodes there.
(The command-line interface has a similar check; the two should become one.)
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import mechanisms
from mechanisms.schema import CHUNK_ROWS, CategoricalColumn, NumericColumn

NUMERIC_PROBLEMS = {
    "missing": "empty (missing) values",
    "text": "values that are not numbers",
    "nan": "NaN (not a number) values",
    "infinite": "infinite values (inf, -inf, or a number too large to store, such as 1e309)",
}
NUMERIC_FIX = (
    "Fill in or correct those values in the file and upload it again, or make the column ignored."
)
CATEGORY_FIX = (
    "Add the missing categories (empty values count as one that is not listed), "
    'set "Values not listed" to group them as "(other)", or correct the file.'
)


def data_problems(parquet_path, schema: mechanisms.Schema) -> list[str]:
    """One message per column and kind of value that a release of this schema would refuse."""
    checked = [
        c
        for c in schema.columns.values()
        if isinstance(c, NumericColumn)
        or (isinstance(c, CategoricalColumn) and c.unknown == "reject")
    ]
    if not checked:
        return []
    from .release_engine import _to_frame

    names = [c.name for c in checked]
    found: dict[tuple[str, str], list[int]] = {}  # (column, kind) -> [count, first row]
    start = 0
    with pq.ParquetFile(parquet_path, pre_buffer=False) as parquet:
        for batch in parquet.iter_batches(batch_size=CHUNK_ROWS, columns=names):
            frame = _to_frame(batch, names)
            for column in checked:
                for kind, mask in _refused(column, batch.column(column.name), frame[column.name]):
                    if mask.any():
                        tally = found.setdefault((column.name, kind), [0, start + _first(mask) + 1])
                        tally[0] += int(mask.sum())
            start += batch.num_rows
    return [_message(name, kind, count, row) for (name, kind), (count, row) in found.items()]


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _refused(column, stored: pa.Array, values: pd.Series):
    """(kind, boolean mask) pairs: the values of this batch a release would refuse."""
    if isinstance(column, CategoricalColumn):
        yield "category", column._category_indices(values) < 0  # the encoder's own rule
        return
    if pa.types.is_integer(stored.type) or pa.types.is_floating(stored.type):
        missing = _mask(stored.is_null())
        numbers = pc.fill_null(pc.cast(stored, pa.float64()), 0.0).to_numpy()
        yield "missing", missing
        yield "nan", np.isnan(numbers)
    else:  # text: parsed the way the mechanisms parse it
        text = values.astype("string")
        missing = (text.isna() | (text.str.strip() == "")).to_numpy(dtype=bool)
        numbers = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        said_nan = text.str.strip().str.lower().isin(["nan", "+nan", "-nan"]).to_numpy(dtype=bool)
        yield "missing", missing
        yield "nan", said_nan & ~missing
        yield "text", np.isnan(numbers) & ~missing & ~said_nan
    yield "infinite", np.isinf(numbers)


def _message(name: str, kind: str, count: int, row: int) -> str:
    first = f"the first on data row {row:,}"
    if kind == "category":
        return (
            f"Column {name!r}: {count:,} value{'s are' if count > 1 else ' is'} not among "
            f"its categories ({first}), and values not listed are set to stop the release. "
            f"{CATEGORY_FIX}"
        )
    return (
        f"Column {name!r} cannot be numeric: it has {count:,} {NUMERIC_PROBLEMS[kind]} "
        f"({first}). {NUMERIC_FIX}"
    )


def _mask(array: pa.Array) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False).astype(bool)
