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

Person-level bounding (`mechanisms.counting.bounding`) runs on the workers in rounds of
persons (`_bounded`): each round's keys are merged in buckets of persons, and the rows kept
are marked, a bit a row, where the rows are; only the tally comes back.

The cluster is given by `scheduler` or the environment variable DPPORTAL_DASK_SCHEDULER (for
example `tcp://10.0.0.5:8786`). Every worker needs pyarrow, this package (`mechanisms`) at the
same version (the scheduler too: it unpacks the tasks), and access to the data at the same
location.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq

from mechanisms.arrays import AnyArray
from mechanisms.counting.bounding import KEY, PERSON_ID, BoundedTally, person_texts, row_key
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
BUCKET = "__dp_portal_bucket__"  # its person's bucket
KEYED_ROWS = 1 << 16  # rows keyed at a time (a Python string each for the hash)
# Rows per worker whose keys one round of person-level bounding makes and merges, about
# (`_kept_bits`: a round is this many rows for each worker of the cluster). Measured on two
# workers (docs/scale.md, 2026-12-07): rounds of 2^22 rows a worker took about 0.3 GB a worker
# beyond the unbounded count, 2^21 about 0.15 GB but 1.3 times as long (each further round
# reads and hashes every piece's IDs again).
ROUND_ROWS = 1 << 22
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
    first_row: int  # the number of its first row in the file (rows' positions)
    rows: int


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
    """The result of `future`; a MechanismError once every worker is paused (`finished`)."""
    finished(client, [future])
    return future.result()


def finished(client: Client, futures: list[Future[Any]]) -> None:
    """Wait for `futures` to finish, without fetching them; raise the error of one that failed.

    A MechanismError once every worker has been paused PAUSED_SECONDS.

    Dask pauses a worker whose memory nears its limit, until spilling to disk frees some; when
    what fills it cannot be spilled, it stays paused and no task of the count runs again. The
    count would then wait for the release's time limit; this says what happened instead.
    """
    paused_since, waiting = None, list(futures)
    while waiting:
        try:
            failed = waiting[-1].exception(timeout=POLL_SECONDS)  # type: ignore[no-untyped-call]
        except TimeoutError:
            if not _all_paused(client):
                paused_since = None
                continue
            paused_since = paused_since or time.monotonic()
            if time.monotonic() - paused_since >= PAUSED_SECONDS:
                client.cancel(futures)  # type: ignore[no-untyped-call]
                raise MechanismError(
                    f"every worker of the Dask cluster has been paused for lack of memory for "
                    f"{PAUSED_SECONDS:g} s, so the count cannot go on: give the workers more "
                    "memory (dask worker --memory-limit, about 1 GB a worker for a count at "
                    "person level, whatever the table's size), or more workers, and make the "
                    "release again"
                ) from None
            continue
        if failed is not None:
            raise failed
        waiting.pop()


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
            yield Piece(path, tuple(groups), first, rows)
            groups, first, rows = [], first + rows, 0
        groups.append(group)
        rows += more
    if groups:
        yield Piece(path, tuple(groups), first, rows)


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
) -> Iterator[pd.DataFrame]:
    """The piece's record batches as the in-process engine reads them, one at a time."""
    for batch in piece_batches(piece, source, columns, arrow_schema):
        yield batch_frame(batch, columns)


def piece_batches(
    piece: Piece, source: TableSource, columns: list[str], arrow_schema: pa.Schema
) -> Iterator[pa.Table]:
    """The piece's record batches in the dataset's column types, one at a time."""
    filesystem, _ = _filesystem(source)
    with filesystem.open_input_file(piece.path) as handle:
        batches = pq.ParquetFile(handle).iter_batches(
            batch_size=CHUNK_ROWS, row_groups=list(piece.row_groups), columns=columns
        )
        for batch in batches:
            yield _conform(batch, arrow_schema)


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
    """`tally` on the cluster, at most k rows per person; the persons' keys never leave it.

    The rows kept are those with the k smallest keys of their person: exactly the rows the
    in-process engine keeps (the keys of distinct positions differ; `merge_keys` orders by
    their first 8 bytes and, where two of a person's share those, by the whole keys). The
    persons are taken in rounds (`_kept_bits`), each round's in as many buckets as the table
    has pieces per round, by a hash of their ID (`Round`):

    1. each piece's rows with an ID of the round's persons, as (person, key, piece, row of
       the piece), the k smallest keys of each person among them, split by bucket
       (`piece_keys`);
    2. each bucket's parts merged FAN_IN at a time into the k smallest keys of each of its
       persons in the whole table (`merge_keys`): the rows kept, as row numbers by piece
       (`rows_by_piece`), marked in the piece's bits of rows kept (`kept_bits`);
    3. once every round is done, each piece tallies the rows of it marked kept (`kept_piece`).

    A key is held as its first 8 bytes (a number) and an ID as Arrow text, not as Python
    strings, and the portal holds no reference to a step's results once it has asked for the
    next, so the workers free each piece's keys once its buckets have taken them and each
    bucket's keys once merged. Memory: a task holds one piece's rows, or one bucket's share of
    a round's keys; each worker holds about its share of one round's keys (ROUND_ROWS rows'
    worth, whatever the table's size) and a bit for each row of its pieces.
    """
    kept = _kept_bits(client, source, tally, pieces, arrow)
    partial = [
        client.submit(
            kept_piece, piece, bits, source=source, tally=tally, arrow_schema=arrow, pure=False
        )
        for piece, bits in zip(pieces, kept, strict=True)
    ]
    return awaited(client, _tree_sum(client, partial))


def _kept_bits(
    client: Client, source: TableSource, tally: BoundedTally, pieces: list[Piece], arrow: pa.Schema
) -> list[Future[AnyArray]]:
    """Steps 1 and 2 of `_bounded`, a round at a time: each piece's rows kept, a bit a row.

    A round's keys are about ROUND_ROWS rows' worth for each worker of the cluster (the
    persons are shared among the rounds by a hash of their ID), so a larger cluster takes a
    table in fewer rounds; the next round is asked for once this one's bits are done, so the
    cluster holds one round's keys at a time. Each person's rows are all in one round.
    """
    per_round = ROUND_ROWS * max(1, len(client.scheduler_info(n_workers=-1)["workers"]))
    rounds = max(1, -(-sum(piece.rows for piece in pieces) // per_round))
    buckets = max(1, -(-len(pieces) // rounds))
    kept: list[Future[AnyArray]] = []
    for number in range(rounds):
        rows = _kept_rows(client, source, tally, pieces, arrow, Round(number, rounds, buckets))
        before: list[Future[AnyArray] | None] = [*kept] or [None] * len(pieces)
        kept = [
            client.submit(
                kept_bits,
                piece.rows,
                *(client.submit(part_of, bucket, index, pure=False) for bucket in rows),
                before=bits,
                pure=False,
            )
            for index, (piece, bits) in enumerate(zip(pieces, before, strict=True))
        ]
        finished(client, kept)
    return kept


def _kept_rows(
    client: Client,
    source: TableSource,
    tally: BoundedTally,
    pieces: list[Piece],
    arrow: pa.Schema,
    round: Round,
) -> list[Future[list[AnyArray]]]:
    """The rows each bucket of `round` kept, by piece (futures)."""
    every = tuple(pieces)
    split = [
        client.submit(
            piece_keys,
            every,
            index,
            round,
            source=source,
            tally=tally,
            arrow_schema=arrow,
            pure=False,
        )
        for index in range(len(every))
    ]
    kept = []
    for bucket in range(round.buckets):
        parts = [client.submit(part_of, keys, bucket, pure=False) for keys in split]
        merged = _tree(client, parts, merge_keys, k=tally.k, secret=tally.secret, pieces=every)
        kept.append(client.submit(rows_by_piece, merged, len(every), pure=False))
    return kept


@dataclass(frozen=True)
class Round:
    """The persons of one round of `rounds`, in `buckets` buckets, by their ID's hash.

    A person is the round's if the hash is `number` modulo `rounds`, and in the bucket the
    hash's quotient by `rounds` is modulo `buckets`.
    """

    number: int
    rounds: int
    buckets: int

    def place(self, hashes: AnyArray) -> tuple[AnyArray, AnyArray]:
        """Which of the IDs of `hashes` (`id_hashes`) are the round's, and their buckets."""
        mine = hashes % np.uint64(self.rounds) == np.uint64(self.number)
        buckets = hashes[mine] // np.uint64(self.rounds) % np.uint64(self.buckets)
        return mine, buckets.astype(np.uint32)


def piece_keys(
    pieces: tuple[Piece, ...],
    index: int,
    round: Round,
    *,
    source: TableSource,
    tally: BoundedTally,
    arrow_schema: pa.Schema,
) -> list[pa.Table]:
    """Piece `index`'s k smallest keys of each person of `round`, split by bucket (a worker).

    Each key with its row's piece and number in the piece, in one part per bucket of the round.
    """
    piece, person = pieces[index], pa.schema([arrow_schema.field(tally.person)])
    with _reading(piece):
        keyed, first = [], 0
        for batch in piece_batches(piece, source, [tally.person], person):
            for start in range(0, batch.num_rows, KEYED_ROWS):
                part = batch.slice(start, KEYED_ROWS)
                keyed.append(batch_keys(part, tally, index, piece, first, round))
                first += part.num_rows
    keyed = keyed or [batch_keys(person.empty_table(), tally, index, piece, 0, round)]
    keys = merge_keys(*keyed, k=tally.k, secret=tally.secret, pieces=pieces)
    buckets = _groups(keys.column(BUCKET).to_numpy(), round.buckets)
    keys = keys.drop_columns([BUCKET])
    return [keys.take(rows) for rows in buckets]


def batch_keys(
    batch: pa.Table, tally: BoundedTally, index: int, piece: Piece, first: int, round: Round
) -> pa.Table:
    """The batch's rows whose ID is `round`'s: the ID as text, its bucket, key, piece, number.

    Numbers count from the piece's first row (the batch's first is `first`); the ID's text and
    the key are those of `BoundedTally.keyed` for the row's position "path#row", its row counted
    from the file's first (`row_key`'s sha256, of which the key keeps the first 8 bytes as a
    number, in the order of its hex), without a Python string per row for whole-number or text
    IDs. Only the round's rows are hashed with sha256.
    """
    ids = batch.column(tally.person)
    if pa.types.is_integer(ids.type) or pa.types.is_string(ids.type):
        present = ids.is_valid().to_numpy()
        ids = ids.filter(pa.array(present)).combine_chunks()
    else:  # other types as the reference writes them, a string at a time
        present, listed = person_texts(batch_frame(batch, [tally.person])[tally.person])
        ids = pa.array(listed, type=pa.string())
    mine, buckets = round.place(id_hashes(ids))
    rows = np.flatnonzero(present)[mine] + first
    prefix = hashlib.sha256(f"{tally.secret}|{piece.path}#".encode())
    starts = bytearray()
    for row in (rows + piece.first_row).tolist():
        starts += _digest(prefix, row)[:8]
    return pa.table(
        {
            PERSON_ID: pc.cast(ids.filter(pa.array(mine)), pa.string()),
            BUCKET: buckets,
            KEY: np.frombuffer(bytes(starts), dtype=">u8").astype(np.uint64),
            PIECE: np.full(len(rows), index, dtype=np.int32),
            ROW: rows,
        }
    )


def id_hashes(ids: pa.Array) -> AnyArray:
    """A 64-bit hash of each ID (whole numbers or texts, none missing).

    Equal IDs of one type hash alike, so a person's rows in every piece; no Python object per
    row is made.
    """
    if pa.types.is_integer(ids.type):
        return _mixed(ids.to_numpy().astype(np.int64).view(np.uint64))
    texts = pc.cast(ids, pa.large_string())
    bounds = np.frombuffer(texts.buffers()[1], dtype=np.int64)[
        texts.offset : texts.offset + len(texts) + 1
    ]
    data = np.frombuffer(texts.buffers()[2] or b"", dtype=np.uint8)[bounds[0] : bounds[-1]]
    bounds = bounds - bounds[0]
    lengths = np.diff(bounds).astype(np.uint64)
    places = np.arange(len(data), dtype=np.int64) - np.repeat(bounds[:-1], np.diff(bounds))
    each = _mixed(data.astype(np.uint64) | (places.astype(np.uint64) << np.uint64(8)))
    sums = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(each, dtype=np.uint64)])
    return _mixed(sums[bounds[1:]] - sums[bounds[:-1]] + lengths)


def _mixed(values: AnyArray) -> AnyArray:
    """SplitMix64's finalizer of unsigned 64-bit numbers: every bit moves every bit."""
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    mixed: AnyArray = values ^ (values >> np.uint64(31))
    return mixed


def _digest(prefix: Any, row: int) -> bytes:
    """sha256 of `prefix`'s text followed by the row's number."""
    digest = prefix.copy()
    digest.update(str(row).encode())
    return bytes(digest.digest())


def part_of(parts: list[Any], index: int) -> Any:
    """One part of a task's parts: a bucket's keys of a piece, a piece's rows of a bucket."""
    return parts[index]


def merge_keys(*tables: pa.Table, k: int, secret: str, pieces: tuple[Piece, ...]) -> pa.Table:
    """The rows of `tables` with the k smallest keys of each person (runs on a worker).

    Sorted by the keys' first 8 bytes (KEY); only if two keys of a person share them (about
    1 in 2^64 for each pair of their rows) by the whole keys (`whole_keys`).
    """
    keys = pa.concat_tables(tables).combine_chunks()
    if not keys.num_rows:
        return keys
    ids = keys.column(PERSON_ID).combine_chunks()
    persons = pc.dictionary_encode(ids).indices.to_numpy()
    first = keys.column(KEY).to_numpy()
    order = np.lexsort((first, persons))
    if _shared(persons[order], first[order]):
        words = whole_keys(keys, secret, pieces)
        order = np.lexsort((words[:, 3], words[:, 2], words[:, 1], words[:, 0], persons))
    sorted_persons = persons[order]
    index = np.arange(len(order))
    starts = np.r_[True, sorted_persons[1:] != sorted_persons[:-1]]
    rank = index - np.maximum.accumulate(np.where(starts, index, 0))
    return keys.take(order[rank < k])


def _shared(persons: AnyArray, first: AnyArray) -> bool:
    """Whether two neighbours of a sorted order are one person's with the same KEY."""
    return bool(np.any((persons[1:] == persons[:-1]) & (first[1:] == first[:-1])))


def whole_keys(keys: pa.Table, secret: str, pieces: tuple[Piece, ...]) -> AnyArray:
    """The rows' whole keys (`row_key`, of their positions) as 4 numbers each, in their order."""
    places = zip(keys.column(PIECE).to_pylist(), keys.column(ROW).to_pylist(), strict=True)
    hexes = "".join(
        row_key(secret, f"{pieces[p].path}#{pieces[p].first_row + row}") for p, row in places
    )
    words: AnyArray = np.frombuffer(bytes.fromhex(hexes), dtype=">u8").reshape(-1, 4)
    return words.astype(np.uint64)


def rows_by_piece(kept: pa.Table, pieces: int) -> list[AnyArray]:
    """The numbers of the rows a bucket kept, in each of `pieces` pieces (runs on a worker)."""
    rows = kept.column(ROW).to_numpy()
    return [rows[of_piece] for of_piece in _groups(kept.column(PIECE).to_numpy(), pieces)]


def _groups(labels: AnyArray, count: int) -> list[AnyArray]:
    """The positions of the labels 0, 1, ... count - 1 in `labels`, for each label."""
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(count + 1))
    return [order[bounds[label] : bounds[label + 1]] for label in range(count)]


def kept_bits(rows: int, *kept: AnyArray, before: AnyArray | None) -> AnyArray:
    """A piece's rows kept, a bit a row (`np.packbits`; runs on a worker).

    The rows of `before` (the bits of the earlier rounds, None for the first) and the rows
    numbered in `kept`.
    """
    bits = np.zeros(rows, dtype=bool) if before is None else _unpacked(before, rows)
    bits[np.concatenate(kept)] = True
    return np.packbits(bits)


def _unpacked(bits: AnyArray, rows: int) -> AnyArray:
    """Bits packed by `np.packbits` as `rows` booleans."""
    return np.unpackbits(bits, count=rows).view(bool)


def kept_piece(
    piece: Piece,
    kept: AnyArray,
    *,
    source: TableSource,
    tally: BoundedTally,
    arrow_schema: pa.Schema,
) -> AnyArray:
    """The inner tally of the piece's rows marked in `kept` (`kept_bits`; runs on a worker)."""
    columns = [*tally.inner.columns, tally.person]
    marked = _unpacked(kept, piece.rows)

    def kept_frames() -> Iterator[pd.DataFrame]:
        first = 0
        for frame in piece_frames(piece, source, columns, arrow_schema):
            chosen = marked[first : first + len(frame)]
            first += len(frame)
            yield frame[chosen].drop(columns=[tally.person])

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
