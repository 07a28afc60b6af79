"""A PostgreSQL table or view as a source (`dpportal.sources.tables`): what registration learns of
it, and the checks every connection to it passes first.

Reach (`source_reach.postgres_location`): an allowed host, the custodian's credentials only,
one message for every connection failure. Then, before the catalogue is asked anything:
- the portal's own database is refused, whatever names it (same server, by its system
  identifier, and same database, by its oid, as Django's DATABASES);
- system catalogues (pg_catalog, information_schema, any pg_* schema) are refused.
Identity: the server's system identifier, the database's oid and the table's oid, so every
spelling of the server (`localhost`, `127.0.0.1`, its socket) names the same data.
"""

import re
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import DatabaseError, transaction
from django.db import connection as portal_connection
from psycopg import sql

from dpportal.sources.reach import SourceError, postgres_location, uniform_failure

# Each part of a table name: a plain SQL identifier (anything else is refused, never quoted in).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")
IDENTITY = (
    "SELECT (SELECT system_identifier FROM pg_control_system()), "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)


@contextmanager
def checked_connection(url: str) -> Iterator[tuple[psycopg.Connection, str, tuple[int, int]]]:
    """A read-only connection to the custodian's database, the URL the engines use for it, and
    the database's identity (system identifier, database oid); never the portal's own."""
    location, _parts = postgres_location(url)
    with uniform_failure(psycopg.OperationalError):
        connection = psycopg.connect(location)
    with connection:
        connection.read_only = True  # and only the catalogue and count(*) are asked
        try:
            connection.execute("SET statement_timeout = '30s'")  # registration waits no longer
            system, database = connection.execute(IDENTITY).fetchone() or (0, 0)
        except psycopg.Error:
            raise SourceError(
                "The portal cannot tell which server this is: grant its database user EXECUTE "
                "on the function pg_control_system(), which recognises the server."
            ) from None
        if (system, database) == _portal_identity():
            raise SourceError(
                "This is the portal's own database: it cannot be registered as a source."
            )
        try:
            yield connection, location, (system, database)
        except psycopg.Error:
            raise SourceError(
                "The database could not describe the table (it took more than 30 s, or refused "
                "the portal's questions about its catalogue); nothing was read."
            ) from None


def _portal_identity() -> tuple[int, int] | None:
    """The identity of the portal's own database, if it is a PostgreSQL one. Fails closed: a
    portal that cannot tell its own server registers no PostgreSQL source."""
    if portal_connection.vendor != "postgresql":
        return None
    try:
        with transaction.atomic(), portal_connection.cursor() as cursor:
            cursor.execute(IDENTITY)
            system, database = cursor.fetchone()
    except DatabaseError:
        raise SourceError(
            "The portal cannot recognise its own database server (its database user may not "
            "call pg_control_system()), so it registers no PostgreSQL source; ask the "
            "administrator."
        ) from None
    return system, database


def check_table_name(table: str) -> str:
    """`table` or `schema.table`, each a plain identifier: anything else is refused."""
    parts = table.split(".")
    if not table or len(parts) > 2 or not all(IDENTIFIER.fullmatch(p) for p in parts):
        raise SourceError(
            f"The table name {table!r} is not a plain name: give it as table or schema.table, "
            "letters, digits and underscores only, starting with a letter (a view is fine)."
        )
    return table


def resolve_table(connection, name: str) -> tuple[str, int]:
    """The readable, non-system table or view `name` resolves to: `schema.table` and its oid."""
    found = connection.execute(
        "SELECT n.nspname, c.relname, c.oid::bigint, has_table_privilege(c.oid, 'SELECT') "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = to_regclass(%s)",
        [name],
    ).fetchone()
    if found is None:
        raise SourceError(f"There is no table or view {name!r} in that database.")
    schema, relation, oid, readable = found
    if schema in SYSTEM_SCHEMAS or schema.startswith("pg_"):
        raise SourceError(
            f"{name!r} is one of the database's system catalogues ({schema}), which hold no "
            "one's data to release: register a table of your own."
        )
    if not readable:
        raise SourceError(f"The database user may not read {name!r}; grant it SELECT.")
    return f"{schema}.{relation}", oid


def catalogue(connection, qualified: str) -> tuple[list[str], list[str], int]:
    """The columns of `schema.table`, their types (from the catalogue), and its row count."""
    identifier = sql.Identifier(*qualified.split(".", 1))
    described = connection.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        [identifier.as_string(connection)],
    ).fetchall()
    if not described:
        raise SourceError(f"{qualified!r} has no columns.")
    rows = connection.execute(sql.SQL("SELECT count(*) FROM {}").format(identifier)).fetchone()[0]
    return [n for n, _t in described], [postgres_type(t) for _n, t in described], rows


def inspect_table(url: str, table: str) -> tuple[str, str, str, str, tuple]:
    """(engine URL, resolved table, key, legacy key, (columns, types, rows)) of a table.

    The legacy key is the identity registrations had before keys named the server by its
    system identifier (host, port and database as the connection reached them), so a budget
    kept under it is found again (`services.sources`)."""
    name = check_table_name(table)
    with checked_connection(url) as (connection, location, (system, database)):
        qualified, oid = resolve_table(connection, name)
        found = catalogue(connection, qualified)
        info = connection.info
        legacy = f"postgresql://{info.host.lower()}:{info.port}/{info.dbname}#{qualified}"
    key = f"postgresql://{system}/{database}/{oid}"
    return location, qualified, key, legacy, found


def label(url: str, qualified: str) -> str:
    """The owner's words for the source: the location without its password."""
    _location, parts = postgres_location(url)
    user = f"{parts['user']}{':•••' if parts['password'] else ''}@"
    server = f"{parts['host']}:{parts['port']}/{parts['dbname']}"
    return f"postgresql://{user}{server}, table {qualified}"


def postgres_type(name: str) -> str:
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
