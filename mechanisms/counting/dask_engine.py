"""The Dask engine: tallying a Parquet table on a Dask cluster, for tables beyond one machine.

The work is split into pieces of consecutive row groups of one Parquet file. A worker reads a
piece's needed columns with pyarrow, one record batch at a time, and tallies it with the same
code the in-process engine runs (`Tally.of_frame`: for cell counts `Schema.cell_counts`, for a
range-count grid `Support.counts`), so the answers are equal by construction. Partial arrays
are summed by a tree of tasks on the workers; only the final array (one int64 per cell) comes
back. The table is never gathered anywhere, and listing the pieces runs on
a worker too, so the machine asking needs the scheduler's address, not the data.

Engines only tally: workers see raw rows and return exact aggregates, never noise. The noise is
added afterwards, on the machine that asked, by the portal's mechanisms.

Person-level bounding (`mechanisms.counting.bounding`) runs in two passes on the workers
(`_bounded`): the persons' keys are merged and kept there; only the tally comes back.

The cluster is given by `scheduler` or the environment variable DPPORTAL_DASK_SCHEDULER (for
example `tcp://10.0.0.5:8786`). Every worker needs pyarrow, this package (`mechanisms`) at the
same version (the scheduler too: it unpacks the tasks), and access to the data at the same
location.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq

from mechanisms.arrays import AnyArray
from mechanisms.counting.bounding import KEY, PERSON_ID, POSITION, BoundedTally
from mechanisms.counting.inprocess import batch_frame, open_parquet, s3_filesystem
from mechanisms.counting.source import TableSource
from mechanisms.counting.tally import CellTally, Tally, frames_tally
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
    first_row: int = 0  # the number of its first row in the file (rows' positions)


def count_on_dask(
    source: TableSource,
    schema: Schema,
    columns: list[str],
    *,
    scheduler: str | None = None,
    timeout: float = CONNECT_SECONDS,
) -> AnyArray:
    """Exact rows per cell of `columns` (`Schema.cell_counts` of the accepting schema)."""
    tally = CellTally(schema.accepting(), tuple(columns))
    return tally_on_dask(source, tally, scheduler=scheduler, timeout=timeout)


def tally_on_dask(
    source: TableSource,
    tally: Tally,
    *,
    scheduler: str | None = None,
    timeout: float = CONNECT_SECONDS,
) -> AnyArray:
    """`tally` of `source` (Parquet), computed by the workers of a Dask cluster.

    Equal to `tally_in_process` for the same table: each worker runs `Tally.of_frame` on its
    pieces' record batches. Only the summed aggregate leaves the cluster.
    """
    if source.is_postgres:
        raise MechanismError(
            "the dask engine reads Parquet; count a PostgreSQL table with --engine postgres"
        )
    address = _address(scheduler)
    with _connect(address, timeout) as client:
        try:
            return _tally(client, source, tally)
        except (ModuleNotFoundError, RuntimeError) as error:
            module = _missing_module(error)
            if module is None:
                raise
            raise MechanismError(
                f"the Dask cluster at {address} cannot import {module!r}: install pyarrow and "
                "this package (mechanisms, same version) on the scheduler and every worker"
            ) from error


def check_reachable(scheduler: str | None = None, timeout: float = CONNECT_SECONDS) -> None:
    """Raise the MechanismError `tally_on_dask` raises for a scheduler that does not answer.

    Reads no row: a release asks this before its data is marked read.
    """
    with _connect(_address(scheduler), timeout):
        pass


def _address(scheduler: str | None) -> str:
    """The scheduler's address: the one given, else DPPORTAL_DASK_SCHEDULER's."""
    address = scheduler or os.environ.get(SCHEDULER_VARIABLE, "").strip()
    if not address:
        raise MechanismError(f"the dask engine needs a Dask cluster: {START_HINT}")
    return address


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


def _tally(client: Client, source: TableSource, tally: Tally) -> AnyArray:
    pieces, arrow_schema = client.submit(plan_pieces, source, tally.columns, pure=False).result()
    if not pieces:
        return np.zeros(tally.shape, dtype=np.int64)
    if isinstance(tally, BoundedTally):
        return _bounded(client, source, tally, pieces, arrow_schema)
    partial = client.map(
        tally_piece, pieces, source=source, tally=tally, arrow_schema=arrow_schema, pure=False
    )
    return _tree_sum(client, partial).result()


def _tree_sum(client: Client, futures: list[Future[AnyArray]]) -> Future[AnyArray]:
    """One future holding the sum of `futures`, summed on the workers FAN_IN at a time."""
    while len(futures) > 1:
        futures = [
            client.submit(add_counts, *futures[start : start + FAN_IN], pure=False)
            for start in range(0, len(futures), FAN_IN)
        ]
    return futures[0]


def add_counts(*counts: AnyArray) -> AnyArray:
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
    rows = first = 0
    for group in range(metadata.num_row_groups):
        more = metadata.row_group(group).num_rows
        if groups and rows + more > CHUNK_ROWS:
            yield Piece(path, tuple(groups), first)
            groups, first, rows = [], first + rows, 0
        groups.append(group)
        rows += more
    if groups:
        yield Piece(path, tuple(groups), first)


def tally_piece(
    piece: Piece, *, source: TableSource, tally: Tally, arrow_schema: pa.Schema
) -> AnyArray:
    """`tally` of one piece (runs on a worker; memory: one record batch)."""
    with _reading(piece):
        return frames_tally(tally, piece_frames(piece, source, tally.columns, arrow_schema))


def piece_frames(
    piece: Piece,
    source: TableSource,
    columns: list[str],
    arrow_schema: pa.Schema,
    positions: bool = False,
) -> Iterator[pd.DataFrame]:
    """The piece's record batches as the in-process engine reads them, one at a time.

    With `positions`, each row's "file#row" in POSITION, as the in-process engine writes it.
    """
    filesystem, _ = _filesystem(source)
    with filesystem.open_input_file(piece.path) as handle:
        batches = pq.ParquetFile(handle).iter_batches(
            batch_size=CHUNK_ROWS, row_groups=list(piece.row_groups), columns=columns
        )
        row = piece.first_row
        for batch in batches:
            frame = batch_frame(_conform(batch, arrow_schema), columns)
            if positions:
                frame[POSITION] = [f"{piece.path}#{row + i}" for i in range(len(frame))]
            row += len(frame)
            yield frame


@contextmanager
def _reading(piece: Piece) -> Iterator[None]:
    """Errors of reading one piece, in words that name it."""
    try:
        yield
    except MechanismError as error:
        raise MechanismError(
            f"{error} [rows counted from row group {piece.row_groups[0]} of {piece.path}]"
        ) from error
    except (OSError, pa.ArrowInvalid) as error:
        raise MechanismError(f"a Dask worker cannot read {piece.path!r}: {error}") from error


# ---------------------------------------------------------------- person-level bounding


def _bounded(
    client: Client, source: TableSource, tally: BoundedTally, pieces: list[Piece], arrow: pa.Schema
) -> AnyArray:
    """`tally` on the cluster in two passes; the persons' keys never leave the workers.

    First each piece's k smallest keys per person, merged FAN_IN at a time into the k smallest
    of the whole table (`smallest_keys`, `merge_keys`), and from them each person's largest
    kept key; then every piece tallies its rows whose key is at most their person's
    (`kept_piece`): exactly the rows the in-process engine keeps.
    """
    found = client.map(
        smallest_keys, pieces, source=source, tally=tally, arrow_schema=arrow, pure=False
    )
    while len(found) > 1:
        found = [
            client.submit(merge_keys, *found[start : start + FAN_IN], k=tally.k, pure=False)
            for start in range(0, len(found), FAN_IN)
        ]
    limits = client.submit(largest_kept, found[0], pure=False)
    partial = client.map(
        kept_piece, pieces, source=source, tally=tally, arrow_schema=arrow, limits=limits,
        pure=False,
    )  # fmt: skip
    return _tree_sum(client, partial).result()


def smallest_keys(
    piece: Piece, *, source: TableSource, tally: BoundedTally, arrow_schema: pa.Schema
) -> pd.DataFrame:
    """(person, key) of the k smallest keys of each person among the piece's rows (a worker)."""
    with _reading(piece):
        person = pa.schema([arrow_schema.field(tally.person)])
        frames = piece_frames(piece, source, [tally.person], person, positions=True)
        keyed = [tally.keyed(frame)[[PERSON_ID, KEY]] for frame in frames]
    return merge_keys(*keyed, k=tally.k)


def merge_keys(*frames: pd.DataFrame, k: int) -> pd.DataFrame:
    """The k smallest keys of each person among `frames` (runs on a worker)."""
    if not frames:  # a piece without batches
        return pd.DataFrame({PERSON_ID: pd.Series(dtype=object), KEY: pd.Series(dtype=object)})
    keys = pd.concat(frames, ignore_index=True).sort_values(KEY, kind="stable")
    return keys.groupby(PERSON_ID, sort=False).head(k)


def largest_kept(keys: pd.DataFrame) -> dict[str, str]:
    """Each person's largest kept key (runs on a worker; stays there)."""
    return {str(p): str(v) for p, v in keys.groupby(PERSON_ID)[KEY].max().items()}


def kept_piece(
    piece: Piece,
    *,
    source: TableSource,
    tally: BoundedTally,
    arrow_schema: pa.Schema,
    limits: dict[str, str],
) -> AnyArray:
    """The inner tally of the piece's rows kept by bounding (runs on a worker)."""
    columns = [*tally.inner.columns, tally.person]

    def kept() -> Iterator[pd.DataFrame]:
        for frame in piece_frames(piece, source, columns, arrow_schema, positions=True):
            keyed = tally.keyed(frame)
            limit = keyed[PERSON_ID].map(limits)
            yield keyed[keyed[KEY] <= limit].drop(columns=[PERSON_ID, KEY, POSITION])

    with _reading(piece):
        return frames_tally(tally.inner, kept())


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
