"""Tables read chunk by chunk, so counting mechanisms need memory for one chunk, not the table.

Histograms and range counts only add up counts per cell, so they accept a `ChunkedTable` (for
example the record batches of a Parquet file) in place of a DataFrame and read it once, in
order. The counts, and so the noise and the guarantee, are the same as from the whole table.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pandas as pd

from mechanisms.errors import MechanismError


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
    if not isinstance(data, pd.DataFrame):
        raise MechanismError(
            f"data ({type(data).__name__}) must be a pandas DataFrame or a ChunkedTable"
        )
    for start in range(0, max(len(data), 1), chunk_rows):
        yield start, data.iloc[start : start + chunk_rows]
