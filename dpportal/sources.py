"""Tables that stay where they live: a Parquet file or folder (local, or in object storage) or a
table or view in a PostgreSQL database the portal can read.

What the portal learns at registration is the table's column names, their types and its row
count, from metadata (Parquet footers, the PostgreSQL catalogue, `count(*)`): never a value. The
schema step proposes a type per column from those types only.

Credentials: the location with its password or keys is kept only encrypted (Fernet, key
DPPORTAL_CREDENTIALS_KEY, else derived from SECRET_KEY for development); pages show the owner
`label`, the location with the password masked, and nobody else sees the location at all.
Identity: `key` names the data without credentials (host, port, database and the resolved table;
a path's real path; an object-storage URL with its endpoint), so every registration of the same
data draws on one privacy budget (services.sources).
"""

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
import pyarrow as pa
import pyarrow.dataset as pa_dataset
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from psycopg import sql

import mechanisms.counting
from mechanisms.counting import TableSource
from mechanisms.counting.inprocess import s3_filesystem
from mechanisms.counting.source import POSTGRES_SCHEMES

# Each part of a table name: a plain SQL identifier (anything else is refused, never quoted in).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")
POSTGRES_ENGINES = ("postgres", "inprocess")  # in-process: the rows come to the worker
PARQUET_ENGINES = ("inprocess", "duckdb", "dask")
CONNECT_SECONDS = 5


class SourceError(Exception):
    """The source cannot be registered or read; the message is shown to the custodian."""


@dataclass
class Found:
    """What registration learnt of a source: metadata only, never a value."""

    source: TableSource
    key: str
    label: str
    columns: list[str]
    types: list[str]
    row_count: int
    kind: str  # "postgres" or "parquet"
    proposals: list[dict] = field(default_factory=list)


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
    """The external dataset's source, decrypted (worker side; never shown or logged)."""
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
    """The counting engines that can read a source of this kind, of those installed."""
    wanted = POSTGRES_ENGINES if kind == "postgres" else PARQUET_ENGINES
    return [name for name in wanted if name in mechanisms.counting.ENGINES]


def source_kind(dataset) -> str:
    return "postgres" if dataset.source_key.startswith("postgresql://") else "parquet"


# ---------------------------------------------------------------- registration


def inspect(location: str, table: str = "", storage_options: dict | None = None) -> Found:
    """Check that the source can be read and learn its columns, their types and its row count."""
    location = location.strip()
    if location.startswith(POSTGRES_SCHEMES):
        return _inspect_postgres(location, table.strip())
    if table.strip():
        raise SourceError("A table name is only for a PostgreSQL source; leave it empty.")
    if location.startswith("s3://"):
        return _inspect_s3(location, {k: v for k, v in (storage_options or {}).items() if v})
    return _inspect_path(location)


def _inspect_path(location: str) -> Found:
    """A local Parquet file or folder, inside one of DPPORTAL_SOURCE_ROOTS once resolved (so
    neither "..", nor a link, nor an absolute path reaches any other file of the server)."""
    roots = [Path(root).resolve() for root in settings.DPPORTAL_SOURCE_ROOTS]
    if not roots:
        raise SourceError(
            "This portal reads no local folders (the administrator has listed none in "
            "DPPORTAL_SOURCE_ROOTS); give an s3:// URL or a postgresql:// URL instead."
        )
    path = Path(location).expanduser()
    real = path.resolve() if path.is_absolute() else (roots[0] / path).resolve()
    if not any(real.is_relative_to(root) for root in roots):
        raise SourceError(
            f"{location!r} is outside the folders this portal may read "
            f"({', '.join(map(str, roots))}); nothing was registered."
        )
    if not real.exists():
        raise SourceError(f"There is no file or folder {location!r}; check the path.")
    source = TableSource(str(real))
    try:
        dataset = pa_dataset.dataset(str(real), format="parquet")
    except (OSError, pa.ArrowInvalid) as error:
        raise SourceError(f"Cannot read {location!r} as Parquet: {_first_line(error)}") from None
    found = _parquet_metadata(source, dataset)
    return _found(source, f"file://{real}", str(real), found, "parquet")


def _inspect_s3(location: str, options: dict) -> Found:
    """A Parquet file or folder in object storage (S3 or compatible, e.g. MinIO)."""
    parts = urlsplit(location)
    if not parts.netloc or not parts.path.strip("/"):
        raise SourceError(f"{location!r} is not an s3://bucket/path URL.")
    endpoint = options.get("endpoint_url", "")
    filesystem = s3_filesystem(options)  # the one the counting engines read with
    path = f"{parts.netloc}/{parts.path.strip('/')}"
    try:
        dataset = pa_dataset.dataset(path, format="parquet", filesystem=filesystem)
    except (OSError, pa.ArrowInvalid) as error:
        raise SourceError(f"Cannot read {location!r}: {_first_line(error)}") from None
    source = TableSource(f"s3://{path}", storage_options=options)
    found = _parquet_metadata(source, dataset)
    where = f" at {urlsplit(endpoint).netloc or endpoint}" if endpoint else ""
    key = f"s3://{path}@{urlsplit(endpoint).netloc or 'aws'}"
    return _found(source, key, f"s3://{path}{where}", found, "parquet")


def _parquet_metadata(source: TableSource, dataset) -> tuple[list[str], list[str], int]:
    try:
        rows = dataset.count_rows()  # from the files' footers
    except (OSError, pa.ArrowInvalid) as error:
        raise SourceError(f"Cannot read {source.describe()}: {_first_line(error)}") from None
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
    """A PostgreSQL table or view. Its key names the server, port and database the connection
    actually reached (`connection.info`: options in the URL's query cannot make one table look
    like another), and the table as the catalogue resolves it."""
    parts = _check_table_name(table)
    address = urlsplit(url)
    password = unquote(address.password or "")
    try:
        where = f"{address.hostname or 'localhost'}:{address.port or 5432}"
    except ValueError:
        raise SourceError("The PostgreSQL URL's port is not a number.") from None
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_SECONDS) as connection:
            connection.read_only = True  # and only the catalogue and count(*) are asked
            connection.execute("SET statement_timeout = '30s'")  # registration waits no longer
            qualified, columns, types, rows = _catalogue(connection, ".".join(parts), table)
            info = connection.info
            server = f"{info.host.lower()}:{info.port}/{info.dbname}"
            user = f"{info.user}{':•••' if info.password else ''}@"
    except psycopg.Error as error:
        reason = _first_line(error).replace(password, "•••") if password else _first_line(error)
        raise SourceError(f"Cannot read {table!r} in the database at {where}: {reason}") from None
    source = TableSource(url, table=qualified)
    key = f"postgresql://{server}#{qualified}"
    label = f"postgresql://{user}{server}, table {qualified}"
    return _found(source, key, label, (columns, types, rows), "postgres")


def _check_table_name(table: str) -> list[str]:
    """`table` or `schema.table`, each a plain identifier: anything else is refused."""
    parts = table.split(".")
    if not table or len(parts) > 2 or not all(IDENTIFIER.fullmatch(p) for p in parts):
        raise SourceError(
            f"The table name {table!r} is not a plain name: give it as table or schema.table, "
            "letters, digits and underscores only, starting with a letter (a view is fine)."
        )
    return parts


def _catalogue(connection, name: str, asked: str) -> tuple[str, list[str], list[str], int]:
    """The resolved `schema.table`, its columns and their types (from the catalogue), and its
    row count; the table name travels as a parameter, then as a resolved identifier."""
    found = connection.execute(
        "SELECT n.nspname, c.relname, has_table_privilege(c.oid, 'SELECT') FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
        [name],
    ).fetchone()
    if found is None:
        raise SourceError(f"There is no table or view {asked!r} in that database.")
    schema, relation, readable = found
    if not readable:
        raise SourceError(f"The portal's database user may not read {asked!r}; grant it SELECT.")
    qualified = sql.Identifier(schema, relation)
    described = connection.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        [qualified.as_string(connection)],
    ).fetchall()
    if not described:
        raise SourceError(f"{asked!r} has no columns; nothing was registered.")
    count = sql.SQL("SELECT count(*) FROM {}").format(qualified)
    rows = connection.execute(count).fetchone()[0]
    columns = [name for name, _type in described]
    return f"{schema}.{relation}", columns, [_postgres_type(t) for _n, t in described], rows


def _postgres_type(name: str) -> str:
    base = name.split("(")[0].strip()
    if base in ("smallint", "integer", "bigint"):
        return "integer"
    if base in ("numeric", "real", "double precision"):
        return "number"
    if base in ("text", "character varying", "character", "varchar", "char"):
        return "text"
    if base.startswith(("date", "timestamp")):
        return "date"
    return base


def _found(source, key, label, found, kind) -> Found:
    columns, types, rows = found
    if not columns:
        raise SourceError(f"{label} has no columns; nothing was registered.")
    proposals = [type_proposal(name, kind) for name, kind in zip(columns, types, strict=True)]
    return Found(source, key, label, columns, types, rows, kind, proposals)


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


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
