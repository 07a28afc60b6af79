"""Counting rows into cells where the data lives, with interchangeable engines.

Every counting mechanism needs the raw rows only once, to count them into the cells of the
schema (`Schema.cell_counts`) or of a range-count grid. This package is that one step as an
interface: a `TableSource` says where the table lives (a Parquet file or folder, local or in
object storage, or a table in PostgreSQL) and an engine computes a tally there
(`mechanisms.counting.tally`: exact counts per public cell; `tally_table`).

The contract every engine keeps: `count_cells(source, schema, columns, engine)` returns exactly
the array `schema.accepting().cell_counts(rows, columns)` returns for the same rows (same shape,
int64, same clamping, missing cells and categories outside the declared list). A source may
change after any check, so its "reject" rules are read as "other" and "cell"
(`Schema.accepting`): no value makes counting fail. Engines only count: noise is added
afterwards by the portal's mechanisms, never by an engine, so the privacy guarantee is the
mechanism's whatever engine counted.

Engines (ENGINES): "inprocess" (the reference: Parquet record batches or a PostgreSQL cursor
counted here), "duckdb" (embedded DuckDB over local Parquet), "postgres" (one GROUP BY inside
the database; only (cell, count) pairs come back), "dask" (Parquet pieces on a Dask cluster),
"spark" (one query on a Spark cluster through Spark Connect; pyspark is optional).
`engine_table(source, engine)` wraps a source for `run_release`; `table_source(text)` reads
the command line's --input. See docs/counting.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from mechanisms.arrays import AnyArray
from mechanisms.chunks import EngineTable
from mechanisms.counting.bounding import BoundedTally
from mechanisms.counting.dask_engine import check_reachable as dask_reachable
from mechanisms.counting.dask_engine import tally_on_dask
from mechanisms.counting.duckdb_engine import tally_duckdb
from mechanisms.counting.inprocess import tally_in_process
from mechanisms.counting.postgres_engine import tally_postgres
from mechanisms.counting.source import POSTGRES_SCHEMES, SPARK_TABLE_SCHEME, TableSource
from mechanisms.counting.spark_engine import check_reachable as spark_reachable
from mechanisms.counting.spark_engine import tally_on_spark
from mechanisms.counting.sql import DUCKDB
from mechanisms.counting.tally import CellTally, Tally, checked
from mechanisms.errors import MechanismError
from mechanisms.schema import Schema

__all__ = [
    "ENGINES",
    "EngineTable",
    "TableSource",
    "TallyFunction",
    "check_reachable",
    "check_tally",
    "count_cells",
    "engine_table",
    "table_source",
    "tally_table",
]

TallyFunction = Callable[[TableSource, Tally], AnyArray]

# One row per engine: name -> function computing a tally of a source where it lives. A SQL
# engine runs `tally.sql_tally` with its own dialect and fetch; a Python one `frames_tally`.
ENGINES: dict[str, TallyFunction] = {
    "inprocess": tally_in_process,  # Parquet record batches or a PostgreSQL cursor, here
    "duckdb": tally_duckdb,  # embedded DuckDB over local Parquet files
    "postgres": tally_postgres,  # one GROUP BY inside PostgreSQL
    "dask": tally_on_dask,  # Parquet pieces tallied on the workers of a Dask cluster
    "spark": tally_on_spark,  # one query on a Spark cluster, through Spark Connect
}


# The engines that build one SQL query per tally, by the name their refusals give the database.
SQL_ENGINES = {"duckdb": "DuckDB", "postgres": "PostgreSQL", "spark": "Spark"}


def check_tally(tally: Tally, engine: str) -> None:
    """Raise the MechanismError `engine` would raise building its query for `tally`, at once.

    Reads no row and connects to nothing: the SQL engines' limits (explicit edges and grid
    cells per column, categories matched ignoring capitals, statistics bounds too far from 1)
    hold whatever the table stores, so a release can be refused before any budget is spent.
    The query is built in the SQL engines' shared arithmetic with every column standing in as
    a whole number (a kind every column type reads); how the table really stores a column is
    checked by the engine when it runs. Python engines (inprocess, dask) build no query.
    """
    check_engine(engine)
    if engine in SQL_ENGINES:
        dialect = replace(DUCKDB, name=SQL_ENGINES[engine], position="0", digest=lambda text: text)
        tally.query(dialect, defaultdict(lambda: "integer"), "t")


# Engines on a cluster that a release can ask, before it reads anything, whether it answers.
PROBES: dict[str, Callable[[], None]] = {"dask": dask_reachable, "spark": spark_reachable}


def check_reachable(engine: str) -> None:
    """Raise the MechanismError `engine` would raise for a cluster that does not answer.

    Reads no row: a release that checks this before the data is marked read fails with its
    budget refunded when the cluster is down, instead of spending it on nothing. Engines
    without a probe (in this process, or reached per query) pass.
    """
    probe = PROBES.get(check_engine(engine))
    if probe is not None:
        probe()


def count_cells(
    source: TableSource, schema: Schema, columns: Sequence[str] | None, engine: str = "inprocess"
) -> AnyArray:
    """Exact rows per cell of `columns`, counted by `engine` where `source` lives.

    The cells of `schema.accepting()` (shape `domain_shape(columns)`), int64: every row lands
    in exactly one cell, whatever the data now holds, on every engine. No noise: callers pass
    the counts to a mechanism (`run_release` reads an EngineTable with the same schema).
    """
    schema = schema.accepting()
    return tally_table(source, CellTally(schema, tuple(schema.resolve_columns(columns))), engine)


def tally_table(source: TableSource, tally: Tally, engine: str = "inprocess") -> AnyArray:
    """`tally` of `source`, computed by `engine` where the source lives (exact, int64).

    Equal to `tally.of_frame` of all the rows on every engine. No noise: callers pass the
    answer to a mechanism.
    """
    check_engine(engine)
    if source.is_spark_table and engine != "spark":
        raise MechanismError(f"{source.describe()} is counted by Spark only: use --engine spark")
    return checked(tally, ENGINES[engine](source, tally), engine)


def check_engine(engine: str) -> str:
    """`engine` if it is registered, else a MechanismError naming the registered ones."""
    if engine not in ENGINES:
        raise MechanismError(
            f"counting engine ({engine!r}) is unknown; choose one of {', '.join(ENGINES)}"
        )
    return engine


def engine_table(source: TableSource, engine: str = "inprocess") -> EngineTable:
    """`source` as data for `run_release`: counted by `engine` where it lives, when asked.

    Privacy: the engine returns exact counts only; the mechanism adds the noise. At person
    level `EngineTable.bounded` keeps at most k rows per person inside the engine
    (`mechanisms.counting.bounding`).
    """
    return _engine_table(source, check_engine(engine), None)


def _engine_table(
    source: TableSource, engine: str, person: tuple[str, int, str] | None
) -> EngineTable:
    """`engine_table`; with `person` = (column, k, secret), every tally bounded per person."""

    def tally(inner: Tally) -> AnyArray:
        wrapped = inner if person is None else BoundedTally(inner, *person)
        return tally_table(source, wrapped, engine)

    def cells(schema: Schema, columns: Sequence[str] | None) -> AnyArray:
        accepting = schema.accepting()
        return tally(CellTally(accepting, tuple(accepting.resolve_columns(columns))))

    return EngineTable(
        engine,
        source.describe(),
        cells,
        tally,
        lambda column, k, secret: _engine_table(source, engine, (column, k, secret)),
    )


def table_source(text: str) -> TableSource:
    """The source an --input names: a Parquet file or folder, a PostgreSQL or Spark table.

    PostgreSQL: ``postgresql://user@host:port/db?table=schema.name`` (the ``table`` key is
    taken out of the URL; any other key, such as ``sslmode``, stays for libpq). An ``s3://``
    input is read with the credentials of whoever runs the command (the AWS SDK's sources; on
    Spark, the cluster's). A table in the Spark catalog: ``spark-table:db.name``.
    """
    if text.startswith(SPARK_TABLE_SCHEME):
        name = text.removeprefix(SPARK_TABLE_SCHEME).strip()
        if not name:
            raise MechanismError("a Spark catalog input names its table: spark-table:db.name")
        return TableSource(text, table=name)
    if text.startswith("s3://"):
        return TableSource(text, storage_options={"credentials": "ambient"})
    if not text.startswith(POSTGRES_SCHEMES):
        return TableSource(text)
    try:
        parts = urlsplit(text)
        keys = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as error:
        raise MechanismError(f"PostgreSQL URL cannot be read: {error}") from None
    tables = [v for k, v in keys if k == "table"]
    if len(tables) != 1 or not tables[0]:
        raise MechanismError(
            "a PostgreSQL input names one table: postgresql://user@host:5432/db?table=schema.name"
        )
    if not parts.hostname or not parts.path.strip("/"):
        raise MechanismError(
            "a PostgreSQL URL names a host and a database: "
            "postgresql://user@host:5432/db?table=schema.name"
        )
    rest = urlencode([(k, v) for k, v in keys if k != "table"])
    return TableSource(urlunsplit(parts._replace(query=rest)), table=tables[0])
