"""Counting rows into cells where the data lives, with interchangeable engines.

Every counting mechanism needs the raw rows only once, to count them into the cells of the
schema (`Schema.cell_counts`). This package is that one step as an interface: a `TableSource`
says where the table lives (a Parquet file or folder, local or in object storage, or a table in
PostgreSQL) and an engine counts it there.

The contract every engine keeps: `count_cells(source, schema, columns, engine)` returns exactly
the array `schema.cell_counts(rows, columns)` returns for the same rows (same shape, int64, same
clamping, missing cells and categories outside the declared list). Engines only count: noise is
added afterwards by the portal's mechanisms, never by an engine, so the privacy guarantee is the
mechanism's whatever engine counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mechanisms.counting.dask_engine import count_on_dask
from mechanisms.counting.inprocess import count_in_process
from mechanisms.counting.source import TableSource
from mechanisms.errors import MechanismError
from mechanisms.schema import Schema

__all__ = ["ENGINES", "CountFunction", "TableSource", "count_cells"]

CountFunction = Callable[[TableSource, Schema, list[str]], np.ndarray]

# One row per engine: name -> function counting a source into the schema's cells.
ENGINES: dict[str, CountFunction] = {
    "inprocess": count_in_process,
    "dask": count_on_dask,
}


def count_cells(
    source: TableSource, schema: Schema, columns: Sequence[str] | None, engine: str = "inprocess"
) -> np.ndarray:
    """Exact rows per cell of `columns`, counted by `engine` where `source` lives.

    Shape `schema.domain_shape(columns)`, int64. No noise: callers pass the counts to a
    mechanism.
    """
    if engine not in ENGINES:
        raise MechanismError(
            f"counting engine {engine!r} is unknown; choose one of {', '.join(ENGINES)}"
        )
    names = schema.resolve_columns(columns)
    counts = ENGINES[engine](source, schema, names)
    expected = tuple(schema.domain_shape(names))
    if counts.shape != expected:  # a broken engine must never reach a mechanism
        raise MechanismError(f"engine {engine!r} returned counts of shape {counts.shape}")
    return counts.astype(np.int64, copy=False)
