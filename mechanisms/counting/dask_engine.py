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
(`_bounded`): the persons' keys are merged in buckets of persons and kept there; only the tally
comes back.

The cluster is given by `scheduler` or the environment variable DPPORTAL_DASK_SCHEDULER (for
example `tcp://10.0.0.5:8786`). Every worker needs pyarrow, this package (`mechanisms`) at the
same version (the scheduler too: it unpacks the tasks), and access to the data at the same
location.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

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
PAUSED_SECONDS = 120.0  # every worker paused this long: the count is given up (`awaited`)
POLL_SECONDS = 5.0  # how often a count that has not finished asks after the workers
PIECE, ROW = "__dp_portal_piece__", "__dp_portal_row__"  # a row's piece and number in it
Result = TypeVar("Result")
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
    planned = client.submit(plan_pieces, source, tally.columns, pure=False)
    pieces, arrow_schema = awaited(client, planned)
    if not pieces:
        return np.zeros(tally.shape, dtype=np.int64)
    if isinstance(tally, BoundedTally):
        return _bounded(client, source, tally, pieces, arrow_schema)
    partial = client.map(
        tally_piece, pieces, source=source, tally=tally, arrow_schema=arrow_schema, pure=False
    )
    return awaited(client, _tree_sum(client, partial))


def awaited(client: Client, future: Future[Result]) -> Result:
    """The result of `future`; a MechanismError once every worker is paused PAUSED_SECONDS.

    Dask pauses a worker whose memory nears its limit, until spilling to disk frees some; when
    what fills it cannot be spilled, it stays paused and no task of the count runs again. The
    count would then wait for the release's time limit; this says what happened instead.
    """
    paused_since = None
    while True:
        try:
            return future.result(timeout=POLL_SECONDS)
        except TimeoutError:
            if not _all_paused(client):
                paused_since = None
                continue
            paused_since = paused_since or time.monotonic()
            if time.monotonic() - paused_since >= PAUSED_SECONDS:
                client.cancel(future)  # type: ignore[no-untyped-call]
                raise MechanismError(
                    f"every worker of the Dask cluster has been paused for lack of memory for "
                    f"{PAUSED_SECONDS:g} s, so the count cannot go on: give the workers more "
                    "memory (dask worker --memory-limit, about 2 GB per 10^7 rows counted at "
                    "person level), or more workers, and make the release again"
                ) from None


def _all_paused(client: Client) -> bool:
    """Whether the cluster has workers and every one of them is paused."""
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    return bool(workers) and all(worker.get("status") == "paused" for worker in workers)


def _tree_sum(client: Client, futures: list[Future[AnyArray]]) -> Future[AnyArray]:
    """One future holding the sum of `futures`, summed on the workers FAN_IN at a time."""
    return _tree(client, futures, add_counts)


def _tree(client: Client, futures: list[Future[Any]], combine: Any, **options: Any) -> Future[Any]:
    """One future holding `combine` of `futures`, combined on the workers FAN_IN at a time."""
    while len(futures) > 1:
        futures = [
            client.submit(combine, *futures[start : start + FAN_IN], **options, pure=False)
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

    The persons are split into as many buckets as there are pieces, by a hash of their ID, so
    that no task holds more than about one piece's keys, whatever the table's size:

    1. each piece's rows with an ID, as (person, key, piece, row of the piece), the k smallest
       keys of each person among them, split by bucket (`piece_keys`);
    2. each bucket's parts merged FAN_IN at a time into the k smallest keys of each of its
       persons in the whole table (`merge_keys`): the rows kept;
    3. each piece tallies the rows of it that some bucket kept (`kept_piece`, given their row
       numbers in it by every bucket, `rows_of_piece`).

    The rows kept are those with the k smallest keys of their person: exactly the rows the
    in-process engine keeps (the keys of distinct positions differ). Memory: a task holds one
    piece's rows, or one bucket's share of the keys (about one piece's); the cluster holds the
    pieces' keys (step 1) until the buckets have merged them, spread over its workers.
    """
    buckets = len(pieces)
    split = [
        client.submit(
            piece_keys,
            piece,
            index,
            source=source,
            tally=tally,
            arrow_schema=arrow,
            buckets=buckets,
            pure=False,
        )
        for index, piece in enumerate(pieces)
    ]
    kept = []
    for bucket in range(buckets):
        parts = [client.submit(bucket_of, keys, bucket, pure=False) for keys in split]
        kept.append(_tree(client, parts, merge_keys, k=tally.k))
    partial = [
        client.submit(
            kept_piece,
            piece,
            *(client.submit(rows_of_piece, rows, index, pure=False) for rows in kept),
            source=source,
            tally=tally,
            arrow_schema=arrow,
            pure=False,
        )
        for index, piece in enumerate(pieces)
    ]
    return awaited(client, _tree_sum(client, partial))


def piece_keys(
    piece: Piece,
    index: int,
    *,
    source: TableSource,
    tally: BoundedTally,
    arrow_schema: pa.Schema,
    buckets: int,
) -> list[pd.DataFrame]:
    """The piece's k smallest keys of each person, split by a hash of their ID (a worker).

    Each key with its row's piece (`index`) and number in the piece, in one of `buckets` parts.
    """
    with _reading(piece):
        person = pa.schema([arrow_schema.field(tally.person)])
        keyed, first = [], 0
        for frame in piece_frames(piece, source, [tally.person], person, positions=True):
            frame[ROW] = np.arange(first, first + len(frame), dtype=np.int64)
            first += len(frame)
            keyed.append(tally.keyed(frame)[[PERSON_ID, KEY, ROW]])
    keys = merge_keys(*keyed, k=tally.k).assign(**{PIECE: index})
    hashes = pd.util.hash_pandas_object(keys[PERSON_ID], index=False).to_numpy()
    bucket = hashes % np.uint64(buckets)
    return [keys[bucket == b] for b in range(buckets)]


def bucket_of(parts: list[pd.DataFrame], bucket: int) -> pd.DataFrame:
    """One bucket's part of a piece's keys (`piece_keys`; runs on a worker)."""
    return parts[bucket]


def merge_keys(*frames: pd.DataFrame, k: int) -> pd.DataFrame:
    """The rows of `frames` with the k smallest keys of each person (runs on a worker)."""
    if not frames:  # a piece without batches
        return pd.DataFrame(
            {
                PERSON_ID: pd.Series(dtype=object),
                KEY: pd.Series(dtype=object),
                ROW: pd.Series(dtype=np.int64),
            }
        )
    keys = pd.concat(frames, ignore_index=True).sort_values(KEY, kind="stable")
    return keys.groupby(PERSON_ID, sort=False).head(k)


def rows_of_piece(kept: pd.DataFrame, index: int) -> AnyArray:
    """The row numbers in piece `index` of the rows a bucket kept (runs on a worker)."""
    rows: AnyArray = kept.loc[kept[PIECE] == index, ROW].to_numpy(dtype=np.int64)
    return rows


def kept_piece(
    piece: Piece,
    *kept: AnyArray,
    source: TableSource,
    tally: BoundedTally,
    arrow_schema: pa.Schema,
) -> AnyArray:
    """The inner tally of the piece's rows whose numbers are in `kept` (runs on a worker)."""
    columns = [*tally.inner.columns, tally.person]
    rows = np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)

    def kept_frames() -> Iterator[pd.DataFrame]:
        first = 0
        for frame in piece_frames(piece, source, columns, arrow_schema):
            numbers = np.arange(first, first + len(frame), dtype=np.int64)
            first += len(frame)
            yield frame[np.isin(numbers, rows, assume_unique=True)].drop(columns=[tally.person])

    with _reading(piece):
        return frames_tally(tally.inner, kept_frames())


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
