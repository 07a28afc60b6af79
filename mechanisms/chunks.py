"""Tables read chunk by chunk, so counting mechanisms need memory for one chunk, not the table.

Histograms and range counts only add up counts per cell, so they accept a `ChunkedTable` (for
example the record batches of a Parquet file) in place of a DataFrame and read it once, in
order. The counts, and so the noise and the guarantee, are the same as from the whole table.

An `EngineTable` goes further: a table that stays where it lives and is counted there by a
counting engine (`mechanisms.counting.engine_table`). Mechanisms that need only the schema's
cell counts accept it; `Schema.cell_counts` asks the engine for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.errors import MechanismError

# (schema, column names) -> exact int64 counts of shape schema.domain_shape(columns)
CountCells = Callable[[Any, list[str]], AnyArray]
# a tally (mechanisms.counting.tally) -> its exact int64 answer, computed by the engine
Aggregate = Callable[[Any], AnyArray]


class ChunkedTable:
    """A table given as DataFrames of consecutive rows, with the same columns; readable once."""

    def __init__(self, chunks: Iterable[pd.DataFrame]):
        self._chunks = iter(chunks)
        self._read = False

    def __iter__(self) -> Iterator[pd.DataFrame]:
        if self._read:
            raise RuntimeError("a ChunkedTable can be read only once")
        self._read = True
        return self._chunks


class EngineTable:
    """A table tallied where it lives by the engine `engine`; only its aggregates are read.

    `count(schema, columns)` returns exactly what `Schema.cell_counts` would from the rows;
    `aggregate(tally)` exactly `tally.of_frame` of all the rows (a tally of
    `mechanisms.counting.tally`, such as a range-count grid); no noise: the mechanism adds it.
    `description` names the source in words (no credentials).
    """

    def __init__(
        self,
        engine: str,
        description: str,
        count: CountCells,
        aggregate: Aggregate,
        bound: Callable[[str, int, str], EngineTable] | None = None,
    ):
        self.engine = engine
        self.description = description
        self._count = count
        self._aggregate = aggregate
        self._bound = bound

    def bounded(self, person: str, max_rows: int, secret: str) -> EngineTable:
        """The same table with at most `max_rows` rows per `person` kept inside the engine.

        The rows are chosen by `secret` (mechanisms.counting.bounding); every tally and count of
        the returned table is computed over the rows kept, where the table lives.
        """
        if self._bound is None:
            raise MechanismError(f"the {self.engine!r} engine cannot bound rows per person")
        return self._bound(person, max_rows, secret)

    def cell_counts(self, schema: Any, columns: list[str]) -> AnyArray:
        return self._count(schema, columns)

    def tally(self, tally: Any) -> AnyArray:
        return self._aggregate(tally)

    def __repr__(self) -> str:
        return f"EngineTable({self.engine!r}, {self.description!r})"


def table_chunks(
    data: pd.DataFrame | ChunkedTable, chunk_rows: int
) -> Iterator[tuple[int, pd.DataFrame]]:
    """(first row, rows) pieces of a DataFrame (`chunk_rows` at a time) or of a ChunkedTable.

    A DataFrame always yields at least one piece, so an empty table still has its columns.
    """
    if isinstance(data, ChunkedTable):
        start = 0
        for chunk in data:
            yield start, chunk
            start += len(chunk)
        return
    if isinstance(data, EngineTable):
        raise MechanismError(
            f"{data.description} is counted by the {data.engine!r} engine: only mechanisms that "
            "need cell counts alone can read it"
        )
    if not isinstance(data, pd.DataFrame):
        raise MechanismError(
            f"data ({type(data).__name__}) must be a pandas DataFrame or a ChunkedTable"
        )
    for start in range(0, max(len(data), 1), chunk_rows):
        yield start, data.iloc[start : start + chunk_rows]
