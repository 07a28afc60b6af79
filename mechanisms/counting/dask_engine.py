"""The Dask engine: counting a Parquet table on a Dask cluster, for tables beyond one machine.

The work is split into pieces of consecutive row groups of one Parquet file. A worker reads a
piece's needed columns with pyarrow, one record batch at a time, and counts it with the same
`Schema.cell_counts` code the in-process engine runs, so the counts are equal by construction.
Partial count arrays are summed by a tree of tasks on the workers; only the final array (one
int64 per cell) comes back. The table is never gathered anywhere, and listing the pieces runs on
a worker too, so the machine asking needs the scheduler's address, not the data.

Engines only count: workers see raw rows and return exact counts, never noise. The noise is
added afterwards, on the machine that asked, by the portal's mechanisms.

The cluster is given by `scheduler` or the environment variable DPPORTAL_DASK_SCHEDULER (for
example `tcp://10.0.0.5:8786`). Every worker needs pyarrow, this package (`mechanisms`) at the
same version (the scheduler too: it unpacks the tasks), and access to the data at the same
location.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq

from mechanisms.chunks import ChunkedTable
from mechanisms.counting.inprocess import batch_frame, open_parquet, s3_filesystem
from mechanisms.counting.source import TableSource
from mechanisms.errors import MechanismError
from mechanisms.schema import CHUNK_ROWS, Schema

if TYPE_CHECKING:
    from distributed import Client, Future

SCHEDULER_VARIABLE = "DPPORTAL_DASK_SCHEDULER"
CONNECT_SECONDS = 10.0
FAN_IN = 8  # partial count arrays summed per reduction task
START_HINT = (
    "start one with `dask scheduler` (it listens on tcp://HOST:8786) and `dask worker "
    "tcp://HOST:8786` on each machine holding the data, then set "
    f"{SCHEDULER_VARIABLE}=tcp://HOST:8786"
)


@dataclass(frozen=True)
class Piece:
    """Consecutive row groups of one Parquet file: what one task reads and counts."""

    path: str
    row_groups: tuple[int, ...]


def count_on_dask(
    source: TableSource,
    schema: Schema,
    columns: list[str],
    *,
    scheduler: str | None = None,
    timeout: float = CONNECT_SECONDS,
) -> np.ndarray:
    """Exact rows per cell of `source` (Parquet), counted by the workers of a Dask cluster.

    Equal to `count_in_process` for the same table: each worker counts its pieces with
    `Schema.cell_counts`. Only the summed counts leave the cluster.
    """
    if source.is_postgres:
        raise MechanismError(
            "the dask engine reads Parquet; count a PostgreSQL table with --engine postgres"
        )
    address = scheduler or os.environ.get(SCHEDULER_VARIABLE, "").strip()
    if not address:
        raise MechanismError(f"the dask engine needs a Dask cluster: {START_HINT}")
    with _connect(address, timeout) as client:
        try:
            return _count(client, source, schema, columns)
        except (ModuleNotFoundError, RuntimeError) as error:
            module = _missing_module(error)
            if module is None:
                raise
            raise MechanismError(
                f"the Dask cluster at {address} cannot import {module!r}: install pyarrow and "
                "this package (mechanisms, same version) on the scheduler and every worker"
            ) from error


def _missing_module(error: BaseException | None) -> str | None:
    """The module a cluster failed to import, from an error or the errors behind it."""
    while error is not None:
        if isinstance(error, ModuleNotFoundError):
            return error.name or "?"
        error = error.__cause__
    return None


def _connect(address: str, timeout: float) -> Client:
    try:
        from distributed import Client
    except ImportError as error:
        raise MechanismError(
            "the dask engine needs the `distributed` package: pip install -r requirements.txt"
        ) from error
    try:
        return Client(address, timeout=timeout, set_as_default=False)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as error:
        raise MechanismError(
            f"cannot reach the Dask scheduler at {address!r} within {timeout:g} s ({error}); "
            f"check that it runs, or {START_HINT}"
        ) from error


def _count(client: Client, source: TableSource, schema: Schema, columns: list[str]) -> np.ndarray:
    pieces, arrow_schema = client.submit(plan_pieces, source, columns, pure=False).result()
    if not pieces:
        return np.zeros(schema.domain_shape(columns), dtype=np.int64)
    partial = client.map(
        count_piece,
        pieces,
        source=source,
        schema=schema,
        columns=columns,
        arrow_schema=arrow_schema,
        pure=False,
    )
    return _tree_sum(client, partial).result()


def _tree_sum(client: Client, futures: list[Future[np.ndarray]]) -> Future[np.ndarray]:
    """One future holding the sum of `futures`, summed on the workers FAN_IN at a time."""
    while len(futures) > 1:
        futures = [
            client.submit(add_counts, *futures[start : start + FAN_IN], pure=False)
            for start in range(0, len(futures), FAN_IN)
        ]
    return futures[0]


def add_counts(*counts: np.ndarray) -> np.ndarray:
    """Sum of partial count arrays (runs on a worker)."""
    total = counts[0].copy()
    for more in counts[1:]:
        total += more
    return total


def plan_pieces(source: TableSource, columns: list[str]) -> tuple[list[Piece], pa.Schema]:
    """The pieces of `source` (in the in-process engine's file order) and the columns' types.

    Runs on a worker, which reads only the files' footers. A piece holds consecutive row
    groups of one file: as many as fit in CHUNK_ROWS rows, or one larger row group.
    """
    dataset = open_parquet(source, columns)  # the in-process engine's files, in its order
    filesystem = dataset.filesystem
    pieces = [piece for name in dataset.files for piece in _file_pieces(filesystem, name)]
    return pieces, pa.schema([dataset.schema.field(c) for c in columns])


def _file_pieces(filesystem: pa_fs.FileSystem, path: str) -> Iterator[Piece]:
    with filesystem.open_input_file(path) as handle:
        metadata = pq.ParquetFile(handle).metadata
    groups: list[int] = []
    rows = 0
    for group in range(metadata.num_row_groups):
        more = metadata.row_group(group).num_rows
        if groups and rows + more > CHUNK_ROWS:
            yield Piece(path, tuple(groups))
            groups, rows = [], 0
        groups.append(group)
        rows += more
    if groups:
        yield Piece(path, tuple(groups))


def count_piece(
    piece: Piece,
    *,
    source: TableSource,
    schema: Schema,
    columns: list[str],
    arrow_schema: pa.Schema,
) -> np.ndarray:
    """Exact rows per cell of one piece (runs on a worker; memory: one record batch)."""
    filesystem, _ = _filesystem(source)
    try:
        with filesystem.open_input_file(piece.path) as handle:
            batches = pq.ParquetFile(handle).iter_batches(
                batch_size=CHUNK_ROWS, row_groups=list(piece.row_groups), columns=columns
            )
            frames = (batch_frame(_conform(b, arrow_schema), columns) for b in batches)
            return schema.cell_counts(ChunkedTable(frames), columns)
    except MechanismError as error:
        raise MechanismError(
            f"{error} [rows counted from row group {piece.row_groups[0]} of {piece.path}]"
        ) from error
    except (OSError, pa.ArrowInvalid) as error:
        raise MechanismError(f"a Dask worker cannot read {piece.path!r}: {error}") from error


def _conform(batch: pa.RecordBatch, arrow_schema: pa.Schema) -> pa.Table:
    """The batch with the dataset's column types, as the in-process scanner gives it."""
    table = pa.Table.from_batches([batch])
    return table if table.schema.equals(arrow_schema) else table.cast(arrow_schema)


def _filesystem(source: TableSource) -> tuple[pa_fs.FileSystem, str]:
    """The pyarrow filesystem and path of a local or s3:// location (as the in-process engine)."""
    if source.location.startswith("s3://"):
        return s3_filesystem(source.storage_options), source.location.removeprefix("s3://")
    try:
        filesystem, path = pa_fs.FileSystem.from_uri(source.location)
    except (pa.ArrowInvalid, OSError):  # a plain local path
        return pa_fs.LocalFileSystem(), os.path.abspath(source.location)
    return filesystem, path
