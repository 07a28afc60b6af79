"""The Spark engine: a Spark cluster tallies a Parquet table with one SQL query, via Spark Connect.

The portal's process is a Spark Connect client (`DPPORTAL_SPARK_REMOTE`, a URL such as
`sc://spark-connect:15002`): it names the files, Spark's executors read them, and the query's
GROUP BY result, one row of aggregates per occupied cell, is all that comes back (`collect` of
the aggregate query; the rows are never collected or cached). The query is the one every SQL
engine runs (`mechanisms.counting.tally`), built by `mechanisms.counting.sql` in Spark's
dialect (`sql.SPARK`), so the binning arithmetic is numpy's, as on DuckDB and PostgreSQL.

Inputs: a local Parquet file or folder (the same files the in-process engine reads, listed
here; every executor must see them at the same path, e.g. a shared filesystem), Parquet in
object storage (`s3://bucket/key`, read by the cluster through Hadoop's S3A connector with the
source's own keys, `s3a_options`), or a table in the Spark catalog (`spark-table:db.name`,
`mechanisms.counting.source`).

Column names never appear in the SQL: the table's columns are renamed by position (`c0`, `c1`,
...; `DataFrame.toDF`), so a hostile name is never parsed, and texts are written as UTF-8 hex
(`sql.utf8_literal`). Each query runs in a session whose time zone is UTC (the parts of
timestamps, as in process) and whose names are compared with their capitals; its table is
the renamed frame, passed with the query (`SparkSession.sql(..., table=frame)`): no view
outlives it.

Person-level bounding (`mechanisms.counting.bounding`) runs inside Spark with the same key,
sha256(secret | position) in hex, a row's position "file#row" built from Spark's file metadata
(`_metadata.file_path`, percent-decoded, and `_metadata.row_index`): the rows the in-process
engine keeps, so the guarantee of `mechanisms.counting.bounding` holds as it is (every person
at most k rows, a uniformly random k-subset chosen by the secret). The secret travels in the
query's text, as to PostgreSQL and DuckDB: the cluster and its logs belong inside the
custodian's trust boundary, as the data does.

Privacy: Spark returns exact aggregates only; the portal's mechanism adds the noise afterwards.
pyspark is optional (requirements-spark.txt); without it, or without a reachable server, the
engine refuses with a message saying what to do.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow as pa

from mechanisms.arrays import AnyArray
from mechanisms.counting.bounding import whole
from mechanisms.counting.inprocess import open_parquet
from mechanisms.counting.source import TableSource
from mechanisms.counting.sql import SPARK
from mechanisms.counting.tally import Tally, sql_tally
from mechanisms.errors import MechanismError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.connect.session import SparkSession

REMOTE_VARIABLE = "DPPORTAL_SPARK_REMOTE"
INSTALL_HINT = "Spark is not installed: pip install -r requirements-spark.txt"
START_HINT = (
    "start a Spark Connect server beside the cluster (docs/operating.md, 'Spark') and set "
    f"{REMOTE_VARIABLE}=sc://HOST:15002"
)
RETRIES = 3  # after 0.05, 0.2 and 0.8 s; Spark Connect's default retries for about 10 minutes
# How long one connection attempt may wait for the server's first answer (gRPC's minimum
# connect timeout, 20 s by default): a server that accepts and never answers is refused after
# about 4 s with the retries (4.1 s measured), not 21 (the registration page waits on it).
CONNECT_OPTIONS = [("grpc.min_reconnect_backoff_ms", 3000)]
FILE, ROW = "dp_portal_file", "dp_portal_row"  # each row's file and row number (bounding)
# "file#row" as the in-process engine writes it: the path percent-decoded ("+" kept as it is;
# url_decode alone reads it as a space) without its scheme (file:, s3a://)
POSITION_SQL = (
    f"concat(regexp_replace(url_decode(replace({FILE}, '+', '%2B')), '^[a-z0-9]+:(//)?', ''), "
    f"'#', CAST({ROW} AS STRING))"
)
TOKEN = re.compile(r"((?:token|password|secret)[^=;]*=)[^;/\s'\"]*", re.IGNORECASE)  # in messages
GLOB = str.maketrans({c: "\\" + c for c in "\\*?[]{}"})  # Hadoop reads these as a pattern
KINDS = {
    "tinyint": "integer",
    "smallint": "integer",
    "int": "integer",
    "bigint": "integer",
    "float": "float",
    "double": "float",
    "string": "text",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamptz",  # an instant, read in the session's zone (UTC)
    "timestamp_ntz": "timestamp",
    "void": "null",
}
SESSION_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",  # timestamps' parts in UTC, as in process
    "spark.sql.caseSensitive": "true",  # column names compared as pandas compares them
}
# A GROUP BY of public cells shuffles only partial aggregates (at most one row per cell and
# input split), so a few partitions carry it; Spark's default of 200 tasks made each small
# query about 1.5 times slower. Bounding per person shuffles rows: the cluster's setting.
SHUFFLE, AGGREGATE_PARTITIONS = "spark.sql.shuffle.partitions", "8"
QUIET_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")  # pyspark's
_sessions: dict[str, SparkSession] = {}  # one Spark Connect session per server, reused
_partitions: dict[str, str | None] = {}  # the shuffle partitions each session was given last
TABLE = "dp_portal_source_table"  # the query's table, named when it is sent (`fetch`)


def tally_on_spark(source: TableSource, tally: Tally, *, remote: str | None = None) -> AnyArray:
    """`tally` of `source`, computed by the Spark cluster behind a Spark Connect server.

    Equal to `tally_in_process` for the same Parquet files. Only the query's aggregate rows
    come back.
    """
    if source.is_postgres:
        raise MechanismError(
            "the Spark engine reads Parquet or a Spark catalog table; count a PostgreSQL table "
            "with --engine postgres"
        )
    address = remote_address(remote)
    with _session(address) as session:
        frame, untyped = _relation(session, source)
        fields = frame.schema.fields  # one request: the files' footers, read by Spark
        names = [str(f.name) for f in fields]
        stored = {str(f.name): f.dataType.simpleString() for f in fields}
        missing = [c for c in tally.columns if c not in stored]
        if missing:
            raise MechanismError(
                f"column ({missing[0]!r}) is in the schema but not in {source.describe()}; "
                f"its columns: {', '.join(names)}"
            )
        kinds = {c: "null" if c in untyped else kind(stored[c]) for c in tally.columns}
        alias = {name: f"c{i}" for i, name in reversed(list(enumerate(names)))}  # the first
        dialect = replace(SPARK, identifier=lambda name: alias[name])
        if whole(tally):
            frame = _positioned(frame, source, names)
            dialect = replace(dialect, position=POSITION_SQL)
        positions = [FILE, ROW] if whole(tally) else []
        renamed = frame.toDF(*[f"c{i}" for i in range(len(names))], *positions)
        # the window shuffles the rows: the cluster's own partitioning
        _shuffle_partitions(session, address, None if whole(tally) else AGGREGATE_PARTITIONS)

        def fetch(query: str) -> list[tuple[Any, ...]]:
            """The query's rows, its table the renamed frame (a view of this query alone)."""
            text = query.replace("{", "{{").replace("}", "}}").replace(TABLE, "{table}")
            return [tuple(row) for row in session.sql(text, table=renamed).collect()]

        return sql_tally(tally, dialect, kinds, TABLE, fetch)


def _shuffle_partitions(session: SparkSession, address: str, partitions: str | None) -> None:
    """Set (None: unset, the cluster's own) the session's shuffle partitions, if not so yet."""
    if _partitions.get(address, "") == partitions:
        return
    if partitions is None:
        session.conf.unset(SHUFFLE)
    else:
        session.conf.set(SHUFFLE, partitions)
    _partitions[address] = partitions


def remote_address(remote: str | None = None) -> str:
    """The Spark Connect URL to use: `remote`, else DPPORTAL_SPARK_REMOTE, else a refusal."""
    address = (remote or os.environ.get(REMOTE_VARIABLE, "")).strip()
    if not address:
        raise MechanismError(f"the Spark engine needs a Spark Connect server: {START_HINT}")
    if not address.startswith("sc://"):
        raise MechanismError(
            f"{REMOTE_VARIABLE} must be a Spark Connect URL, sc://HOST:PORT (e.g. "
            "sc://spark-connect:15002)"
        )
    return address


def offered() -> bool:
    """Whether this process can use the engine: pyspark installed and a server named."""
    return bool(os.environ.get(REMOTE_VARIABLE, "").strip()) and bool(find_spec("pyspark"))


def check_reachable(remote: str | None = None) -> None:
    """Raise the engine's MechanismError unless the Spark Connect server answers (reads no row).

    A reused session the server no longer knows (it restarted, or closed the session after an
    idle hour) fails once and is forgotten: the check then asks again with a new one.
    """
    address = remote_address(remote)
    for attempt in (1, 2):
        try:
            with _session(address) as session:
                session.sql("SELECT 1").collect()
            return
        except MechanismError:
            if attempt == 2:
                raise


def describe_table(
    name: str, *, count_rows: bool, remote: str | None = None
) -> tuple[list[str], list[str], int | None]:
    """A catalog table's column names, their kinds (`kind`) and, if asked, its row count.

    Metadata and one `count(*)` only, never a value: what registering the table as a source
    learns, and (without the count) what checks that it is still there before a release.
    """
    with _session(remote_address(remote)) as session:
        frame = session.read.table(name)
        fields = frame.schema.fields
        rows = frame.count() if count_rows else None
    return [f.name for f in fields], [kind(f.dataType.simpleString()) for f in fields], rows


def _where(address: str) -> str:
    """The server's host and port, for messages (a URL's parameters may hold a token)."""
    return address.removeprefix("sc://").split("/")[0].split(";")[0].rsplit("@", 1)[-1]


@contextmanager
def _session(address: str) -> Iterator[SparkSession]:
    """The reused session for `address`; Spark's errors as MechanismErrors.

    A session whose server failed is forgotten, so the next tally connects afresh.
    """
    try:
        from pyspark.errors import PySparkException
        from pyspark.sql.connect.client.core import DefaultChannelBuilder
        from pyspark.sql.connect.client.retries import DefaultPolicy
        from pyspark.sql.connect.session import SparkSession
    except ImportError as error:
        raise MechanismError(INSTALL_HINT) from error
    for name in QUIET_LOGGERS:  # they log a failed query's words, which may quote a value
        logging.getLogger(name).disabled = True
    try:
        if address not in _sessions:
            channel = DefaultChannelBuilder(address, channelOptions=CONNECT_OPTIONS)
            session = SparkSession.builder.channelBuilder(channel).create()
            session.client.set_retry_policies([DefaultPolicy(max_retries=RETRIES)])
            for key, value in SESSION_SETTINGS.items():
                session.conf.set(key, value)
            _sessions[address] = session
        yield _sessions[address]
    except MechanismError:
        raise
    except (PySparkException, ValueError, OSError) as error:
        _sessions.pop(address, None)
        _partitions.pop(address, None)
        raise MechanismError(_spark_message(error, address)) from None


def _spark_message(error: BaseException, address: str) -> str:
    """One line for a Spark error: what failed, without the JVM's stack or the URL's token."""
    full = str(error).strip()
    details = re.search(r'details = "([^"\n]*)"', full)  # gRPC's own words, if it failed
    text = details.group(1) if details else (full.splitlines() or [type(error).__name__])[0]
    text = TOKEN.sub(r"\1…", text.replace(address, _where(address)))[:300]
    lowered = full.lower()
    if isinstance(error, ValueError) and not isinstance(error, OSError):
        return (
            f"{REMOTE_VARIABLE} cannot be read as a Spark Connect URL ({text}); write it "
            "sc://HOST:PORT, with parameters after a slash: sc://HOST:PORT/;token=…"
        )
    if any(word in lowered for word in ("unavailable", "connection refused", "failed to connect")):
        return (
            f"cannot reach the Spark Connect server at {_where(address)} ({text}); "
            f"check that it runs, or {START_HINT}"
        )
    if "s3a" in lowered and ("classnotfound" in lowered or "no filesystem" in lowered):
        return (
            "the Spark cluster cannot read s3:// data: add Hadoop's S3A connector (hadoop-aws "
            "and the AWS SDK bundle) to its classpath, or count with --engine inprocess"
        )
    return f"the Spark engine failed: {text}"


def _relation(session: SparkSession, source: TableSource) -> tuple[DataFrame, set[str]]:
    """The source as a Spark DataFrame, and its columns of no type (only NULLs).

    Parquet: the files the in-process engine reads (listed from their footers here); Spark
    reads a column of no type, as Arrow writes an empty column of texts, as whole numbers, so
    the footers tell which columns are all missing. A catalog table: as Spark describes it.
    """
    if source.is_spark_table:
        return session.read.table(source.table or ""), set()
    dataset = open_parquet(source, [])
    untyped = {f.name for f in dataset.schema if pa.types.is_null(f.type)}
    files = list(dataset.files)  # absolute local paths, or bucket/key
    if not files:
        raise MechanismError(f"{source.describe()} holds no Parquet file")
    reader = session.read
    if source.location.startswith("s3://"):
        files = ["s3a://" + f for f in files]
        reader = reader.options(**s3a_options(source.location, source.storage_options))
    return reader.parquet(*[f.translate(GLOB) for f in files]), untyped


def _positioned(frame: DataFrame, source: TableSource, names: list[str]) -> DataFrame:
    """The frame with each row's file (FILE) and row number in its file (ROW) after its columns."""
    if "_metadata" in names:
        raise MechanismError(
            f"{source.describe()} has a column named _metadata, which hides the file metadata "
            "the Spark engine bounds rows per person by: use --engine inprocess"
        )
    from pyspark.sql.connect.functions import col

    return frame.select(
        "*", col("_metadata.file_path").alias(FILE), col("_metadata.row_index").alias(ROW)
    )


def s3a_options(location: str, options: Mapping[str, str]) -> dict[str, str]:
    """Hadoop S3A settings for reading `location`'s bucket with the source's own keys only.

    Per bucket (`fs.s3a.bucket.NAME.*`), as options of this read alone: the source's keys, or
    anonymous access without keys; never the cluster's own credentials (its provider chain is
    replaced), unless the source's `credentials` is "ambient" (the command line's input,
    whose user runs the cluster). No cached filesystem is shared with another read.
    """
    bucket = urlsplit(location).netloc
    prefix = f"fs.s3a.bucket.{bucket}."
    found: dict[str, Any] = {"fs.s3a.impl.disable.cache": "true"}
    endpoint = options.get("endpoint_url", "")
    if endpoint:
        found[prefix + "endpoint"] = endpoint
        found[prefix + "path.style.access"] = "true"
        found[prefix + "connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    if options.get("region"):
        found[prefix + "endpoint.region"] = options["region"]
    if options.get("credentials") == "ambient":
        return found
    access, secret = options.get("access_key"), options.get("secret_key")
    if access and secret:
        found[prefix + "aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        )
        found[prefix + "access.key"], found[prefix + "secret.key"] = access, secret
    else:
        found[prefix + "aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
        )
    return found


def kind(type_name: str) -> str:
    """A Spark type (`simpleString`) as one of the kinds `mechanisms.counting.sql` reads."""
    if type_name.startswith("decimal"):
        return "float"
    if type_name.startswith(("varchar", "char")):
        return "text"
    return KINDS.get(type_name, type_name)
