"""The in-process engine: today's streaming path, and the reference every other engine matches.

Reads the needed columns of a Parquet file or folder one record batch at a time, or of a
PostgreSQL table through a server-side cursor (CHUNK_ROWS rows at a time, in a READ ONLY
transaction), and tallies each batch with the tally's own Python code (`Tally.of_frame`, for
cell counts `Schema.cell_counts`), so memory holds one batch whatever the row count.
PostgreSQL rows become Arrow batches as Parquet's would (`real` and `numeric` read as double
precision), so both sources are read alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pa_dataset
import pyarrow.fs as pa_fs
from psycopg import sql

from mechanisms.arrays import AnyArray
from mechanisms.chunks import ChunkedTable
from mechanisms.counting.bounding import POSITION, positioned, whole
from mechanisms.counting.postgres_engine import POSITION_SQL, column_types, read_only, relation
from mechanisms.counting.source import TableSource
from mechanisms.counting.tally import Tally, frames_tally
from mechanisms.errors import MechanismError
from mechanisms.schema import CHUNK_ROWS


def tally_in_process(source: TableSource, tally: Tally) -> AnyArray:
    """`tally` computed here from record batches of `source` (Parquet or PostgreSQL rows)."""
    columns = tally.columns
    if whole(tally):  # person-level bounding: every row with its position, at once
        frames = (
            _postgres_frames(source, columns, positions=True)
            if source.is_postgres
            else _positioned_frames(open_parquet(source, columns), columns)
        )
        return tally.of_frame(positioned(frames, tally))
    chunks = (
        postgres_chunks(source, columns) if source.is_postgres else parquet_chunks(source, columns)
    )
    return frames_tally(tally, chunks)


def parquet_chunks(source: TableSource, columns: list[str]) -> ChunkedTable:
    """The `columns` of a Parquet file or folder as DataFrames of at most CHUNK_ROWS rows."""
    return ChunkedTable(_frames(open_parquet(source, columns), columns))


def open_parquet(source: TableSource, columns: list[str]) -> pa_dataset.FileSystemDataset:
    """The Parquet file or folder as a pyarrow dataset holding `columns`, or a clear refusal."""
    try:
        dataset = _open_dataset(source)
    except (OSError, pa.ArrowInvalid) as error:
        raise MechanismError(f"cannot read {source.describe()}: {error}") from error
    missing = [c for c in columns if c not in dataset.schema.names]
    if missing:
        raise MechanismError(
            f"column ({missing[0]!r}) is in the schema but not in {source.describe()}; "
            f"its columns: {', '.join(dataset.schema.names)}"
        )
    return dataset


def _open_dataset(source: TableSource) -> pa_dataset.FileSystemDataset:
    """The Parquet file or folder, read through an S3 filesystem for an `s3://` location.

    A local path is made absolute, so the file names it lists name the same files anywhere.
    With `source.files`, exactly those files are read.
    """
    if not source.location.startswith("s3://"):
        local = [os.path.abspath(f) for f in source.files] or os.path.abspath(source.location)
        return pa_dataset.dataset(local, format="parquet")
    filesystem = s3_filesystem(source.storage_options)
    paths = list(source.files) or source.location[5:]
    return pa_dataset.dataset(paths, format="parquet", filesystem=filesystem)


def s3_filesystem(options: Mapping[str, str], attempts: int = 3) -> pa_fs.S3FileSystem:
    """pyarrow's S3 filesystem from storage options, trying each request up to `attempts` times.

    `endpoint_url` (an S3-compatible server; empty for AWS), `region`, `access_key` and
    `secret_key`. Without keys the objects are read anonymously; the AWS SDK's usual sources
    of credentials (AWS_ACCESS_KEY_ID, ~/.aws, an instance role) are used only when
    `credentials` is "ambient": by the command line and for the portal's own bucket, never for
    a source a user registered. It reads objects by byte range, so a record batch at a time
    never needs the whole object in memory.
    """
    endpoint = options.get("endpoint_url", "")
    access_key, secret_key = options.get("access_key"), options.get("secret_key")
    ambient = options.get("credentials") == "ambient"
    return pa_fs.S3FileSystem(
        access_key=access_key or None,
        secret_key=secret_key or None,
        anonymous=not (access_key and secret_key) and not ambient,
        region=options.get("region") or None,
        endpoint_override=endpoint or None,
        scheme="http" if endpoint.startswith("http://") else "https",
        retry_strategy=pa_fs.AwsStandardS3RetryStrategy(max_attempts=attempts),
    )


def postgres_chunks(source: TableSource, columns: list[str]) -> ChunkedTable:
    """The `columns` of a PostgreSQL table as DataFrames of at most CHUNK_ROWS rows."""
    return ChunkedTable(_postgres_frames(source, columns))


def _postgres_frames(
    source: TableSource, columns: list[str], positions: bool = False
) -> Iterator[pd.DataFrame]:
    """Chunks of the table; with `positions`, each row's ctid as text in POSITION too."""
    with read_only(source) as connection:
        types = column_types(connection, source, columns)
        selected = sql.SQL(", ").join(
            sql.SQL("CAST({} AS double precision)").format(sql.Identifier(c))
            if types[c] in ("real", "numeric")
            else sql.Identifier(c)
            for c in columns
        )
        if positions:
            selected = sql.SQL("{}, {}").format(selected, sql.SQL(POSITION_SQL))
        query = sql.SQL("SELECT {} FROM {}").format(selected, relation(source))
        with connection.cursor(name="dp_portal_count") as cursor:
            cursor.execute(query)
            while rows := cursor.fetchmany(CHUNK_ROWS):
                batch = pa.table(
                    {c: pa.array([row[j] for row in rows]) for j, c in enumerate(columns)}
                )
                frame = batch_frame(batch, columns)
                if positions:
                    frame[POSITION] = [row[-1] for row in rows]
                yield frame


def _frames(dataset: pa_dataset.Dataset, columns: list[str]) -> Iterator[pd.DataFrame]:
    """The dataset's batches, one at a time.

    No read-ahead of further files or batches (pyarrow's defaults read several ahead, which
    took 2.6 GB at 10^8 rows), so memory stays that of one batch.
    """
    batches = dataset.to_batches(
        columns=columns, batch_size=CHUNK_ROWS, batch_readahead=0, fragment_readahead=0
    )
    for batch in batches:
        yield batch_frame(batch, columns)


def _positioned_frames(
    dataset: pa_dataset.FileSystemDataset, columns: list[str]
) -> Iterator[pd.DataFrame]:
    """The dataset's batches, file by file, each row's "file#row" in POSITION."""
    for fragment in dataset.get_fragments():
        start = 0
        for batch in fragment.to_batches(columns=columns, batch_size=CHUNK_ROWS):
            frame = batch_frame(batch, columns)
            frame[POSITION] = [f"{fragment.path}#{start + i}" for i in range(len(frame))]
            start += len(frame)
            yield frame


def batch_frame(batch: pa.RecordBatch | pa.Table, columns: list[str]) -> pd.DataFrame:
    """A batch as pandas, whole numbers with gaps read as text ("1", not 1.0).

    So they match declared categories; a batch without gaps keeps integers, which encode to the
    same cells.
    """
    frame: pd.DataFrame = batch.to_pandas()
    for name in columns:
        column = batch.column(name)
        if pa.types.is_integer(column.type) and column.null_count:
            frame[name] = column.cast(pa.string()).to_pandas()
    return frame
