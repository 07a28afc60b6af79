"""Tables that stay where they live: a Parquet file or folder (local, or in object storage), a
table or view in a PostgreSQL database the portal can read, or a table in the Spark catalog
(`spark-table:db.table`, counted by the Spark engine only).

What the portal learns at registration is the table's column names, their types and its row
count, from metadata (Parquet footers, the PostgreSQL or Spark catalogue, `count(*)`): never a
value. The
schema step proposes a type per column from those types only.

What a source may reach (checked at registration and again by `table_source` before each
release): local files inside the owner's folders only (`source_paths`); PostgreSQL servers and
object-storage endpoints the operator allows, with the custodian's own credentials only, never
the portal's own database or bucket (`source_reach`, `source_postgres`); Spark catalog tables
the operator lists for that custodian (`source_reach.listed_spark_table`).

Credentials: the location with its password or keys is kept only encrypted (Fernet, key
DPPORTAL_CREDENTIALS_KEY, else derived from SECRET_KEY for development); pages show the owner
`label`, the location with the password masked, and nobody else sees the location at all.
Identity: `key` names the data, whatever spells its location, so every registration of the same
data draws on one privacy budget (services.sources): for Parquet a digest of the files' footers
(so a file, its folder, a hard link or a copy, on disk or in a bucket, are one source), for
PostgreSQL the server's system identifier, the database's oid and the table's oid, for a Spark
catalog table its name (capitals aside: the catalog's own identity of it; docs/operating.md says
why the operator lists each table's data once).
"""

import base64
import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as pa_dataset
import pyarrow.fs as pa_fs
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

import mechanisms.counting
from dpportal.sources import postgres as source_postgres
from dpportal.sources.paths import vetted_files
from dpportal.sources.reach import (
    SourceError,
    check_not_the_portals_storage,
    listed_spark_table,
    s3_endpoint,
    uniform_failure,
)
from mechanisms.counting import TableSource, spark_engine
from mechanisms.counting.inprocess import s3_filesystem
from mechanisms.counting.source import POSTGRES_SCHEMES, SPARK_TABLE_SCHEME
from mechanisms.errors import MechanismError

__all__ = ["Found", "SourceError", "inspect", "seal", "table_source"]

POSTGRES_ENGINES = ("postgres", "inprocess")  # in-process: the rows come to the worker
PARQUET_ENGINES = ("inprocess", "duckdb", "dask", "spark")
# DuckDB reads local files only: its S3 reader is an extension it downloads, which the portal
# does not allow (mechanisms.counting.duckdb_engine)
OBJECT_STORAGE_ENGINES = tuple(name for name in PARQUET_ENGINES if name != "duckdb")
ENGINES_OF_KIND = {
    "postgres": POSTGRES_ENGINES,
    "parquet": PARQUET_ENGINES,
    "object-storage": OBJECT_STORAGE_ENGINES,
    "spark-table": ("spark",),
}
# a Spark column's kind (`spark_engine.kind`) as registration names types (`type_proposal`)
SPARK_TYPES = {"float": "number", "timestamp": "date", "timestamptz": "date"}
S3_OPTIONS = ("endpoint_url", "access_key", "secret_key")  # all a custodian may give


@dataclass
class Found:
    """What registration learnt of a source: metadata only, never a value."""

    source: TableSource
    key: str
    label: str
    columns: list[str]
    types: list[str]
    row_count: int
    kind: str  # "postgres", "parquet", "object-storage" or "spark-table" (ENGINES_OF_KIND)
    proposals: list[dict] = field(default_factory=list)
    legacy_key: str = ""  # the key this source had before keys named data (services.sources)


# ---------------------------------------------------------------- credentials at rest


def _fernet() -> Fernet:
    key = settings.DPPORTAL_CREDENTIALS_KEY
    if not key:  # development: derived from the secret key (see the README)
        digest = hashlib.sha256(b"dpportal-credentials\0" + settings.SECRET_KEY.encode()).digest()
        key = base64.urlsafe_b64encode(digest).decode()
    try:
        return Fernet(key)
    except ValueError:
        raise SourceError(
            "The portal's credentials key (DPPORTAL_CREDENTIALS_KEY) is not a valid Fernet key, "
            "so no credentials can be stored or read; ask the administrator to set it."
        ) from None


def seal(source: TableSource) -> str:
    """The source's location, table and storage options, encrypted for the database."""
    plain = {
        "location": source.location,
        "table": source.table,
        "storage_options": dict(source.storage_options),
    }
    return _fernet().encrypt(json.dumps(plain).encode()).decode()


def table_source(dataset) -> TableSource:
    """The external dataset's source as the counting engines read it (worker side; never shown
    or logged): decrypted, then checked again as at registration, since the operator's
    settings, the folder or the links in it may have changed since (`reach`)."""
    return reach(dataset.owner.get_username(), _unsealed(dataset))


def _unsealed(dataset) -> TableSource:
    fernet = _fernet()
    try:
        plain = json.loads(fernet.decrypt(dataset.source_secret.encode()))
    except (InvalidToken, ValueError):
        raise SourceError(
            "The stored connection details of this source cannot be decrypted (the portal's "
            "credentials key changed); register the source again."
        ) from None
    return TableSource(plain["location"], plain["table"], plain["storage_options"])


# ---------------------------------------------------------------- engines


def engine_choices(kind: str) -> list[str]:
    """The counting engines that can read a source of this kind, of those installed (Spark:
    when pyspark is installed and DPPORTAL_SPARK_REMOTE names a server)."""
    return [
        name
        for name in ENGINES_OF_KIND[kind]
        if name in mechanisms.counting.ENGINES and (name != "spark" or spark_engine.offered())
    ]


def source_kind(dataset) -> str:
    """The dataset's kind of source (ENGINES_OF_KIND), told by its key (object storage: by its
    label, which names the s3:// location; the key names the data, not where it is)."""
    if dataset.source_key.startswith("postgresql://"):
        return "postgres"
    if dataset.source_label.startswith("s3://"):
        return "object-storage"
    return "spark-table" if dataset.source_key.startswith(SPARK_TABLE_SCHEME) else "parquet"


# ---------------------------------------------------------------- registration


def inspect(owner, location: str, table: str = "", storage_options: dict | None = None) -> Found:
    """Check that `owner` may register the source and that it can be read; learn its columns,
    their types and its row count. `found.source` is what `seal` keeps (the location as given)."""
    location = location.strip()
    if location.startswith(POSTGRES_SCHEMES):
        return _inspect_postgres(location, table.strip())
    if table.strip():
        raise SourceError("A table name is only for a PostgreSQL source; leave it empty.")
    if location.startswith(SPARK_TABLE_SCHEME):
        return _inspect_spark_table(location, owner.get_username())
    if location.startswith("s3://"):
        return _inspect_s3(location, _s3_options(storage_options or {}))
    return _inspect_path(location, owner.get_username())


def reach(username: str, source: TableSource) -> TableSource:
    """`source` (as sealed) as the engines may read it, after the registration's checks: its
    local files vetted one by one; its PostgreSQL URL rebuilt with pinned options, connected to
    and its table found; its object-storage endpoint allowed, not the portal's own storage, and
    its Parquet files listed there with the source's keys; its Spark catalog table still listed
    for `username` and still in the catalog. No row is read: a source that is down, gone or
    refuses its credentials is a SourceError before a release marks it read."""
    if source.is_spark_table:
        return _reached_spark_table(username, source.table or "")
    if source.is_postgres:
        with source_postgres.checked_connection(source.location) as (connection, location, _id):
            qualified, _oid = source_postgres.resolve_table(connection, source.table or "")
        return TableSource(location, table=qualified)
    if source.location.startswith("s3://"):
        checked, path, _where = _s3_source(source.location, _s3_options(source.storage_options))
        _list_parquet_files(checked, path)
        return checked
    real, files = vetted_files(source.location, username)
    return TableSource(str(real), files=tuple(files))


def _inspect_path(location: str, username: str) -> Found:
    """A local Parquet file or folder of the owner's: every file in it vetted (`source_paths`)."""
    real, files = vetted_files(location, username)
    source = TableSource(str(real), files=tuple(files))
    try:
        key = _footers_key(pa_fs.LocalFileSystem(), files, repr)
        found = _parquet_metadata(pa_dataset.dataset(files, format="parquet"))
    except (OSError, pa.ArrowInvalid):
        raise SourceError(f"{location!r} cannot be read as one Parquet table.") from None
    return _found(source, key, str(real), found, "parquet", f"file://{real}")


def _inspect_spark_table(location: str, username: str) -> Found:
    """A table in the Spark catalog that the operator lists for `username`: its columns, their
    types and its row count, as the cluster describes them (`spark_engine.describe_table`)."""
    name = listed_spark_table(username, location.removeprefix(SPARK_TABLE_SCHEME))
    if not spark_engine.offered():
        raise SourceError(
            "This portal has no Spark cluster to count a catalog table with (the administrator "
            "sets DPPORTAL_SPARK_REMOTE and installs requirements-spark.txt)."
        )
    columns, kinds, rows = _describe_spark_table(name, count_rows=True)
    types = [SPARK_TYPES.get(k, k) for k in kinds]
    source = TableSource(SPARK_TABLE_SCHEME + name, table=name)
    key = SPARK_TABLE_SCHEME + name.lower()
    return _found(
        source, key, f"Spark catalog table {name}", (columns, types, rows), "spark-table", ""
    )


def _reached_spark_table(username: str, name: str) -> TableSource:
    """The catalog table `name`, still listed for `username` and still in the catalog (its
    columns asked for, no row)."""
    name = listed_spark_table(username, name)
    _describe_spark_table(name, count_rows=False)
    return TableSource(SPARK_TABLE_SCHEME + name, table=name)


def _describe_spark_table(name: str, *, count_rows: bool) -> tuple[list[str], list[str], int]:
    """`spark_engine.describe_table`, its failures in the portal's words (never Spark's)."""
    try:
        columns, kinds, rows = spark_engine.describe_table(name, count_rows=count_rows)
    except MechanismError as exc:
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc):
            raise SourceError(
                f"The Spark catalog has no table {name}: ask the administrator whether it was "
                "renamed or dropped."
            ) from None
        raise SourceError(
            "The Spark cluster did not answer (DPPORTAL_SPARK_REMOTE): try again later, or ask "
            "the administrator whether it is running."
        ) from None
    return columns, kinds, rows or 0


def _s3_options(options) -> dict:
    """Of a source's storage options, only what a custodian may give (never `credentials`)."""
    return {k: v for k, v in options.items() if k in S3_OPTIONS and v}


def _s3_source(location: str, options: dict) -> tuple[TableSource, str, str]:
    """The source for the engines, its bucket path and where it is, once the endpoint is allowed
    and is not the portal's own storage."""
    parts = urlsplit(location)
    path = f"{parts.netloc}/{parts.path.strip('/')}"
    if not parts.netloc or not parts.path.strip("/"):
        raise SourceError(f"{location!r} is not an s3://bucket/path URL.")
    scheme, host, port = s3_endpoint(options.get("endpoint_url", ""))
    check_not_the_portals_storage(parts.netloc, scheme, host, port)
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if options.get("endpoint_url"):
        options = options | {"endpoint_url": f"{scheme}://{where}"}
    return TableSource(f"s3://{path}", storage_options=options), path, where


def _inspect_s3(location: str, options: dict) -> Found:
    """A Parquet file or folder in object storage (S3 or compatible, e.g. MinIO), read with the
    custodian's keys or anonymously; no message names an object or repeats the store's words."""
    source, path, where = _s3_source(location, options)
    # the one the counting engines read with, but asking once: a store that never answers is
    # refused after 3 s (the SDK's timeout), not after three tries (10.6 s)
    filesystem = s3_filesystem(source.storage_options, attempts=1)
    with _store_failures(location):
        dataset = pa_dataset.dataset(path, format="parquet", filesystem=filesystem)
        key = _footers_key(filesystem, dataset.files, lambda _f: "A file there")
        found = _parquet_metadata(dataset)
    legacy = f"s3://{path}@{urlsplit(options.get('endpoint_url', '')).netloc or 'aws'}"
    return _found(source, key, f"s3://{path} at {where}", found, "object-storage", legacy)


def _list_parquet_files(source: TableSource, path: str) -> None:
    """Ask the store, with the source's own keys (`s3_filesystem`), for the Parquet files the
    engines would read at `path` (their names, and the first one's footer for the schema: as
    pyarrow opens a dataset; never a row). A store that does not answer, objects that are gone
    and keys it refuses are all the one uniform FAILURE (`uniform_failure`)."""
    filesystem = s3_filesystem(source.storage_options)
    with _store_failures(source.location):
        files = pa_dataset.dataset(path, format="parquet", filesystem=filesystem).files
    if not files:
        raise SourceError("There is no Parquet file there.")


@contextmanager
def _store_failures(location: str):
    """The store's errors as SourceErrors that name no object and repeat none of its words."""
    try:
        with uniform_failure(OSError):
            yield
    except pa.ArrowInvalid:
        raise SourceError(
            f"{location!r} cannot be read as one Parquet table: a file in it is not Parquet, "
            "or its files' columns differ."
        ) from None


def _footers_key(filesystem, files, shown) -> str:
    """The identity of Parquet data: a digest of its files' footers (schema, row groups, their
    sizes and statistics), in any order, whatever path or link names them."""
    digests = sorted(_footer_digest(filesystem, name, shown(name)) for name in files)
    if not digests:
        raise SourceError("There is no Parquet file there.")
    return "parquet:" + hashlib.sha256(b"".join(digests)).hexdigest()


def _footer_digest(filesystem, name: str, shown: str) -> bytes:
    """SHA-256 of a Parquet file's footer (read by byte range: 8 bytes, then the footer)."""
    with filesystem.open_input_file(name) as handle:
        size = handle.size()
        handle.seek(max(0, size - 8))
        tail = handle.read(8)
        length = int.from_bytes(tail[:4], "little")
        if size < 12 or tail[4:] != b"PAR1" or length > size - 12:
            raise SourceError(f"{shown} is not a Parquet file (or is damaged).")
        handle.seek(size - 8 - length)
        digest = hashlib.sha256()
        while length > 0:  # by pieces: a footer's claimed length never sizes one allocation
            piece = handle.read(min(length, 1 << 20))
            digest.update(piece)
            length -= len(piece) or length
        return digest.digest()


def _parquet_metadata(dataset) -> tuple[list[str], list[str], int]:
    rows = dataset.count_rows()  # from the files' footers
    types = [_arrow_type(t) for t in dataset.schema.types]
    return list(dataset.schema.names), types, rows


def _arrow_type(data_type) -> str:
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    if pa.types.is_integer(data_type):
        return "integer"
    if pa.types.is_floating(data_type) or pa.types.is_decimal(data_type):
        return "number"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "text"
    if pa.types.is_temporal(data_type):
        return "date"
    return str(data_type)


def _inspect_postgres(url: str, table: str) -> Found:
    """A PostgreSQL table or view (`source_postgres`), keyed by the data's identity."""
    location, qualified, key, legacy, found = source_postgres.inspect_table(url, table)
    source = TableSource(url, table=qualified)  # sealed as given; `reach` rebuilds `location`
    label = source_postgres.label(url, qualified)
    return _found(source, key, label, found, "postgres", legacy)


def _found(source, key, label, found, kind, legacy_key) -> Found:
    columns, types, rows = found
    if not columns:
        raise SourceError(f"{label} has no columns.")
    proposals = [type_proposal(name, kind) for name, kind in zip(columns, types, strict=True)]
    return Found(source, key, label, columns, types, rows, kind, proposals, legacy_key)


def type_proposal(name: str, column_type: str) -> dict:
    """A schema entry proposed from a column's type alone (no bound, bin or category)."""
    proposals: dict[str, dict] = {
        "integer": {"type": "numeric", "integer": True},
        "number": {"type": "numeric", "bins": 10},
        "text": {"type": "categorical", "unknown": "other"},
        "date": {"type": "date"},
    }
    proposed = proposals.get(column_type, {"type": "ignored"})
    return {"name": name, **proposed}
