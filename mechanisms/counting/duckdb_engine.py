"""The DuckDB engine: an embedded database tallies a Parquet file or folder with one GROUP BY.

DuckDB reads the Parquet files itself (only the needed columns, in parallel) and returns one
row of aggregates per occupied cell (`mechanisms.counting.tally`), so memory holds the
aggregates, not the rows. The files are
the ones the in-process engine reads (pyarrow's listing of the folder), the cell expressions
those of `mechanisms.counting.sql`. Local files only, and no extension is fetched.

DuckDB's statistics propagation is switched off: it folds expressions to constants from the
row groups' min/max statistics, which Parquet writers (pyarrow among them) compute without NaN,
so `v = NaN` inside the cell's CASE became false and NaN was clamped into the top bin whenever
a file held no +inf (issue 41: one added row moved 101 counts). Without it every row is
evaluated as written, as the in-process engine does.

DuckDB runs inside the worker, so its buffers are the worker's memory: each query's connection
gets a memory limit (DPPORTAL_DUCKDB_MEMORY_LIMIT, default 512MB, DuckDB's units) and spills
what does not fit (the sort of person-level bounding, large hash tables) to a folder made for
that query alone, readable by this user only (0700, under TMPDIR), and deleted when the query
ends, whether it succeeded or failed: the spilled pages hold raw rows. Row order is not kept
(`preserve_insertion_order`): every query is a GROUP BY whose rows are read by their keys.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pa_dataset

from mechanisms.arrays import AnyArray
from mechanisms.counting.bounding import whole
from mechanisms.counting.source import TableSource
from mechanisms.counting.sql import DUCKDB, Dialect, single_quoted
from mechanisms.counting.tally import Fetch, Tally, sql_tally
from mechanisms.errors import MechanismError

MEMORY_VARIABLE = "DPPORTAL_DUCKDB_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "512MB"
INTEGER_TYPES = re.compile(r"U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)")
SAMPLE_ROWS = 100_000  # rows whose distinct texts `distinct_texts` counts
# the groups that values outside a range count's bounds add to the unclamped keys' grouping,
# as a share of its first rows, above which each row is clamped instead (`unclamped_dialect`)
OUTSIDE_SHARE = 0.01
POSITION_SQL = "filename || '#' || CAST(file_row_number AS VARCHAR)"  # as in process
KINDS = {
    "FLOAT": "float",
    "DOUBLE": "float",
    "VARCHAR": "text",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP_S": "timestamp",
    "TIMESTAMP_MS": "timestamp",
    "TIMESTAMP_NS": "timestamp",
    "TIMESTAMP WITH TIME ZONE": "timestamptz",
    '"NULL"': "null",
}


def tally_duckdb(source: TableSource, tally: Tally) -> AnyArray:
    """`tally` of Parquet files, computed by DuckDB inside this process (one query)."""
    if source.is_postgres or "://" in source.location:
        raise MechanismError(
            f"the DuckDB engine reads local Parquet files, not {source.describe()}; use "
            "--engine postgres for a PostgreSQL table"
        )
    files = parquet_files(source)
    quoted = ", ".join(single_quoted(f) for f in files)
    options = "hive_partitioning = false"  # pyarrow's reading
    dialect = DUCKDB
    if whole(tally):  # person-level bounding: each row's file and row number
        options += ", filename = true, file_row_number = true"
        dialect = replace(DUCKDB, position=POSITION_SQL, digest=sha256_order)
    table = f"read_parquet([{quoted}], {options})"
    with spilling_connection() as connection:

        def fetch(query: str) -> list[tuple[Any, ...]]:
            try:
                return connection.execute(query).fetchall()
            except duckdb.OutOfMemoryException as error:  # an operator that cannot spill
                first = str(error).splitlines()[0]  # the rest: DuckDB's tuning advice
                raise MechanismError(
                    f"DuckDB needed more memory than {MEMORY_VARIABLE} allows ({first}); "
                    "raise it, or count this source with --engine postgres or dask"
                ) from error

        kinds = stored_kinds(connection, files, source, tally.columns)
        texts = [c for c in tally.columns if kinds[c] == "text"]
        dialect = replace(dialect, distinct_texts=distinct_texts(connection, table, texts))
        dialect = unclamped_dialect(fetch, table, tally, kinds, dialect)
        if whole(tally) and {"filename", "file_row_number"} & set(all_columns(connection, files)):
            raise MechanismError(
                f"{source.describe()} has a column named filename or file_row_number, which "
                "the DuckDB engine uses to bound rows per person: use --engine inprocess"
            )
        return sql_tally(tally, dialect, kinds, table, fetch)


def distinct_texts(
    connection: duckdb.DuckDBPyConnection, table: str, columns: list[str]
) -> tuple[tuple[str, float], ...]:
    """Each text column's distinct texts in the first SAMPLE_ROWS rows (`Dialect.distinct_texts`).

    A Parquet file holds no count of its distinct texts, so DuckDB counts them
    (`approx_count_distinct`) in the rows it reads first (a few milliseconds). Only the
    statistics' speed depends on it (`aggregates.grouped_first`), never an answer: a column
    whose first rows repeat few texts and whose later rows hold many is grouped by its raw
    texts first, and is slower for it.
    """
    if not columns:
        return ()
    found = connection.execute(distinct_texts_query(table, columns)).fetchone()
    assert found is not None  # an aggregate without GROUP BY returns one row
    return tuple(sorted((c, float(n)) for c, n in zip(columns, found, strict=True)))


def unclamped_dialect(
    fetch: Fetch,
    table: str,
    tally: Tally,
    kinds: dict[str, str],
    dialect: Dialect,
) -> Dialect:
    """`dialect`, with `unclamped_keys` off for a table of many values outside its bounds.

    Off where the values outside the bounds of `tally`'s unclamped keys (a range count's grid,
    a histogram's equal-width bins), in its first SAMPLE_ROWS rows, would add more groups
    than OUTSIDE_SHARE of those rows (`outside_query`). Unclamped keys spare each row its
    clamps, but each value far outside the bounds may make a group of its own (every row at
    10^7 rows: 1.4 against 0.25-0.30 s, docs/scale.md); values just outside share a few. Only
    the speed depends on the choice, never an answer.
    """
    inner = getattr(tally, "inner", tally)  # a person-level count's grid is its inner tally
    outside_query = getattr(inner, "outside_query", None)
    query = None if outside_query is None else outside_query(dialect, kinds, table, SAMPLE_ROWS)
    if query is None:
        return dialect
    ((share,),) = fetch(query)  # an aggregate without GROUP BY returns one row
    share = float(share or 0.0)
    return replace(dialect, unclamped_keys=share <= OUTSIDE_SHARE)


def distinct_texts_query(table: str, columns: list[str]) -> str:
    """The SQL of `distinct_texts`, its column names quoted.

    Each column's approximate count of distinct texts in the first SAMPLE_ROWS rows of
    `table` (the engine's own table expression).
    """
    names = [DUCKDB.identifier(c) for c in columns]
    counts = ", ".join(f"approx_count_distinct({n})" for n in names)
    first = f"SELECT {', '.join(names)} FROM {table} LIMIT {SAMPLE_ROWS}"  # noqa: S608  # nosec B608: quoted
    return f"SELECT {counts} FROM ({first}) AS f"  # noqa: S608  # nosec B608: quoted


def sha256_order(text: str) -> str:
    """An ORDER BY list ordering texts as their hex sha256 text does: its four 64-bit quarters.

    Equal to ordering by the 64-character text (fixed length, lowercase hex: bytewise order
    is numeric order, quarter by quarter), but fixed-width keys, which DuckDB's window sort
    spills to disk; a text key kept every row in memory (10^7 rows: 2.2 GB; issue 45).
    Privacy: each person keeps the same rows as under the text order, so the guarantee of
    `mechanisms.counting.bounding` (at most k rows, a uniformly random k-subset) is unchanged.
    """
    quarters = (
        f"('0x' || substr(sha256({text}), {start}, 16))::UBIGINT" for start in (1, 17, 33, 49)
    )
    return ", ".join(quarters)


@contextmanager
def spilling_connection() -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection held to the memory limit, spilling to a private folder.

    The folder (mode 0700) is removed with everything DuckDB spilled into it when the block
    ends, after the connection is closed: raw rows never outlive the query on disk.
    """
    limit = os.environ.get(MEMORY_VARIABLE, "").strip() or DEFAULT_MEMORY_LIMIT
    with tempfile.TemporaryDirectory(prefix="dpportal-duckdb-") as spill:
        config: dict[str, str | bool | int | float | list[str]] = {
            "autoinstall_known_extensions": False,  # offline: no extension is fetched
            "autoload_known_extensions": False,
            "disabled_optimizers": "statistics_propagation",  # statistics leave NaN out
            "memory_limit": limit,
            "temp_directory": spill,
            "preserve_insertion_order": False,  # GROUP BY rows are read by their keys
        }
        try:
            connection = duckdb.connect(":memory:", config=config)
        except duckdb.Error as error:
            raise MechanismError(
                f"{MEMORY_VARIABLE}={limit!r} is not a memory size DuckDB reads ({error}); "
                "give a number and a unit, e.g. 512MB or 2GB"
            ) from error
        with connection:
            yield connection


def parquet_files(source: TableSource) -> list[str]:
    """The Parquet files of a file or folder, as the in-process engine reads them.

    Exactly `source.files` when given, else pyarrow's listing of the folder.
    """
    if source.files:
        return [os.path.abspath(f) for f in source.files]
    try:
        location = os.path.abspath(source.location)  # as the in-process engine names files
        files = list(pa_dataset.dataset(location, format="parquet").files)
    except (OSError, pa.ArrowInvalid) as error:
        raise MechanismError(f"cannot read {source.describe()}: {error}") from error
    if not files:
        raise MechanismError(f"{source.describe()} holds no Parquet file")
    return files


def all_columns(connection: duckdb.DuckDBPyConnection, files: list[str]) -> list[str]:
    """The names of the files' columns."""
    return [str(c) for c in connection.read_parquet(files, hive_partitioning=False).columns]


def stored_kinds(
    connection: duckdb.DuckDBPyConnection, files: list[str], source: TableSource, columns: list[str]
) -> dict[str, str]:
    """How each needed column is stored (see `mechanisms.counting.sql`), or a clear refusal."""
    try:
        relation = connection.read_parquet(files, hive_partitioning=False)
    except duckdb.Error as error:
        raise MechanismError(f"cannot read {source.describe()}: {error}") from error
    types = {
        str(name): str(kind) for name, kind in zip(relation.columns, relation.dtypes, strict=True)
    }
    missing = [c for c in columns if c not in types]
    if missing:
        raise MechanismError(
            f"column ({missing[0]!r}) is in the schema but not in {source.describe()}; "
            f"its columns: {', '.join(types)}"
        )
    return {c: kind(types[c]) for c in columns}


def kind(type_name: str) -> str:
    """A DuckDB type as one of the kinds `mechanisms.counting.sql` reads, else its name."""
    if INTEGER_TYPES.fullmatch(type_name):
        return "integer"
    if type_name.startswith("DECIMAL"):
        return "float"
    return KINDS.get(type_name, type_name)
