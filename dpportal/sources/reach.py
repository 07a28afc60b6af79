"""What a registered source may reach, and how the portal reaches it (`dpportal.sources.tables`).

- Hosts: only those the operator lists in DPPORTAL_SOURCE_HOSTS (none by default), for
  PostgreSQL servers and object-storage endpoints alike; an entry without a port allows the
  usual one (5432 for PostgreSQL, 443 for https, 80 for http). AWS S3 itself (no endpoint) is
  the entry `s3.amazonaws.com`. A PostgreSQL socket folder is listed by its path.
- Credentials: only those the custodian typed. A PostgreSQL connection is rebuilt from the
  URL's host, port, database, user, password and sslmode alone, with every other libpq option
  that could pick up the portal's own credentials (a password file, client certificates,
  Kerberos, PG* variables) pinned; object storage is read with the custodian's keys or
  anonymously, never through the AWS SDK's default chain (variables, ~/.aws, instance roles).
- Failures: every connection failure gets one message (FAILURE), after no less than
  FAILURE_SECONDS, so neither its words nor its timing tell a closed port from a wrong password.
- Tables in the Spark catalog: only those the operator lists for the custodian in
  DPPORTAL_SPARK_TABLES (none by default). The cluster reads its catalog with its own
  credentials, so the list is what stands between a custodian and every other table the
  cluster can read; a name not on it is never sent to Spark.
"""

import ipaddress
import re
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.core.checks import Warning, register
from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

CONNECT_SECONDS = 3  # libpq's connect timeout (its floor is 2 s)
FAILURE_SECONDS = 3.5  # every failed connection answers after this long, at least
AWS_HOST = "s3.amazonaws.com"
# Files that do not exist: libpq reads its password file and client certificate from them, so
# never the portal's own ~/.pgpass or ~/.postgresql/postgresql.{crt,key}.
NOWHERE = "/nonexistent/dpportal-source"
# The only authentication a source may ask for: what the custodian typed, or none (trust).
AUTH_METHODS = "password,md5,scram-sha-256,none"
SSL_MODES = {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}
URL_KEYS = {"host", "port", "dbname", "user", "password", "sslmode"}
FAILURE = (
    "Cannot read this source: the portal could not connect to it or sign in with what was "
    "given. Check the address, the port, the database or bucket, the user name and the "
    "password or keys."
)


# A catalog table's name as DPPORTAL_SPARK_TABLES lists it: `db.table` or `catalog.db.table`,
# plain identifiers only (no quoting, so a listed name is one table to Spark and never SQL).
SPARK_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){1,2}")


class SourceError(Exception):
    """The source cannot be registered or read; the message is shown to the custodian."""


# ---------------------------------------------------------------- the operator's allow-list


def _host_port(entry: str, default_port: int) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` as a lower-case host and a port."""
    parts = urlsplit(f"//{entry.strip()}")
    try:
        port = parts.port or default_port
    except ValueError:
        raise SourceError(f"{entry!r} has a port that is not a number.") from None
    return (parts.hostname or "").rstrip("."), port


def check_allowed(host: str, port: int, default_port: int) -> None:
    """Refuse a host and port the operator has not listed in DPPORTAL_SOURCE_HOSTS."""
    if host.startswith("/"):
        allowed = any(
            entry.startswith("/") and Path(entry).resolve() == Path(host).resolve()
            for entry in settings.DPPORTAL_SOURCE_HOSTS
        )
    else:
        wanted = (host.lower().rstrip("."), port)
        allowed = any(
            not entry.startswith("/") and _host_port(entry, default_port) == wanted
            for entry in settings.DPPORTAL_SOURCE_HOSTS
        )
    if not allowed:
        shown = host if host.startswith("/") else f"{host}:{port}"
        raise SourceError(
            f"This portal may not connect to {shown}: the administrator allows sources only on "
            "the hosts listed in DPPORTAL_SOURCE_HOSTS (none by default). Ask them to add it."
        )


# ---------------------------------------------------------------- the Spark catalog


def _spark_entries() -> list[tuple[str, str]]:
    """DPPORTAL_SPARK_TABLES as (custodian, table) pairs, of the well-formed entries only."""
    pairs = [entry.partition("=")[::2] for entry in settings.DPPORTAL_SPARK_TABLES]
    return [(user.strip(), table.strip()) for user, table in pairs if _listable(table.strip())]


def _listable(table: str) -> bool:
    return SPARK_TABLE_NAME.fullmatch(table) is not None


def spark_tables_of(username: str) -> list[str]:
    """The catalog tables the operator lists for `username`, as the operator spells them."""
    return [table for user, table in _spark_entries() if user == username]


def listed_spark_table(username: str, name: str) -> str:
    """The catalog table `name` as DPPORTAL_SPARK_TABLES lists it for `username`, compared
    without regard to capitals (Spark is then asked for the operator's spelling); else a
    SourceError naming the tables that custodian may register. Nothing is sent to Spark before
    this check."""
    wanted = name.strip().lower()
    for table in spark_tables_of(username):
        if table.lower() == wanted:
            return table
    mine = ", ".join(f"spark-table:{table}" for table in spark_tables_of(username))
    raise SourceError(
        "This Spark catalog table is not one the administrator lists for you in "
        f"DPPORTAL_SPARK_TABLES ({f'yours: {mine}' if mine else 'none is listed for you'}). "
        "Ask them to add it."
    )


@register()
def check_spark_tables_are_well_formed(app_configs=None, **kwargs):
    """dpportal.W011: an entry of DPPORTAL_SPARK_TABLES that is not `NAME=db.table`, which no
    custodian can register (a typo would otherwise fail silently)."""
    return [
        Warning(
            f"DPPORTAL_SPARK_TABLES: {entry!r} is not NAME=db.table, so nobody can register it.",
            hint="Write each entry as the custodian's user name, '=', and the table's plain "
            "name (db.table or catalog.db.table: letters, digits and _ only), separated by ','.",
            id="dpportal.W011",
        )
        for entry in settings.DPPORTAL_SPARK_TABLES
        if not entry.partition("=")[0].strip() or not _listable(entry.partition("=")[2].strip())
    ]


# ---------------------------------------------------------------- uniform failures


@contextmanager
def uniform_failure(*errors: type[BaseException]):
    """Turn any of `errors` into FAILURE, answered no sooner than FAILURE_SECONDS after the
    attempt began (a closed port answers at once, a silent one after the timeout)."""
    started = time.monotonic()
    try:
        yield
    except errors:
        time.sleep(max(0.0, FAILURE_SECONDS - (time.monotonic() - started)))
        raise SourceError(FAILURE) from None


# ---------------------------------------------------------------- PostgreSQL


def postgres_location(url: str) -> tuple[str, dict[str, str]]:
    """The connection URL the portal uses for a custodian's PostgreSQL URL, and its parts.

    Only host, port, database, user, password and sslmode are taken from the URL (its query
    included: libpq reads `?host=` too, so the check sees what libpq would); anything else is
    refused. The host must be allowed. Every option through which libpq could use the portal's
    own credentials is pinned in the returned URL, which the counting engines connect with.
    """
    try:
        given = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    except ProgrammingError:
        raise SourceError(
            "The PostgreSQL URL cannot be read: write it as postgresql://user@host:5432/database."
        ) from None
    extra = sorted(set(given) - URL_KEYS)
    if extra:
        raise SourceError(
            f"The PostgreSQL URL sets {', '.join(extra)}: only the host, port, database, user, "
            "password and sslmode may be given."
        )
    host, port = given.get("host", ""), given.get("port") or "5432"
    if not host or "," in host or "," in port:
        raise SourceError("Give the PostgreSQL URL one host, e.g. postgresql://user@host/db.")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise SourceError("The PostgreSQL URL's port is not a number.")
    if not given.get("user"):
        raise SourceError("Give the database user in the URL: postgresql://user@host/db.")
    if given.get("sslmode", "prefer") not in SSL_MODES:
        raise SourceError(f"sslmode must be one of {', '.join(sorted(SSL_MODES))}.")
    check_allowed(host, int(port), 5432)
    parts = {
        "host": host,
        "port": port,
        "dbname": given.get("dbname") or given["user"],
        "user": given["user"],
        "password": given.get("password", ""),
        "sslmode": given.get("sslmode", "prefer"),
    }
    pinned = {
        "hostaddr": "",  # not PGHOSTADDR
        "passfile": NOWHERE,
        "sslcert": NOWHERE,
        "sslkey": NOWHERE,
        "gssencmode": "disable",
        "require_auth": AUTH_METHODS,
        "options": "",  # not PGOPTIONS
        "connect_timeout": str(CONNECT_SECONDS),
    }
    return f"postgresql://?{urlencode(parts | pinned)}", parts


# ---------------------------------------------------------------- object storage


def s3_endpoint(endpoint: str) -> tuple[str, str, int]:
    """A custodian's endpoint as (scheme, host, port), once allowed; "" means AWS S3."""
    if not endpoint:
        check_allowed(AWS_HOST, 443, 443)
        return "https", AWS_HOST, 443
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or port == -1
        or parts.username
        or parts.path.strip("/")
        or parts.query
    ):
        raise SourceError(
            "The object storage endpoint must be an address such as https://minio.example.org "
            "or http://10.0.0.5:9000, with nothing after the port."
        )
    default = 443 if parts.scheme == "https" else 80
    host = parts.hostname.rstrip(".")
    check_allowed(host, port or default, default)
    return parts.scheme, host, port or default


def check_not_the_portals_storage(bucket: str, scheme: str, host: str, port: int) -> None:
    """Refuse the portal's own bucket (on any endpoint) and its own endpoint (by any name of
    its addresses): what the portal stores there belongs to other custodians."""
    own_endpoint = settings.DPPORTAL_S3_ENDPOINT_URL
    if settings.DPPORTAL_S3_BUCKET and bucket == settings.DPPORTAL_S3_BUCKET:
        raise SourceError(_OWN_STORAGE)
    if not own_endpoint:
        return
    own = urlsplit(own_endpoint if "://" in own_endpoint else f"https://{own_endpoint}")
    own_port = own.port or (443 if own.scheme == "https" else 80)
    if own_port == port and _addresses(own.hostname or "") & _addresses(host):
        raise SourceError(_OWN_STORAGE)


_OWN_STORAGE = (
    "This is where the portal keeps its own files: it cannot be registered as a source. "
    "Register a bucket of your own."
)


def _addresses(host: str) -> set[str]:
    """Every address `host` names (itself, if it is one), so spellings compare equal."""
    try:
        return {str(ipaddress.ip_address(host))}
    except ValueError:
        pass
    try:
        return {str(ipaddress.ip_address(info[4][0])) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return {host.lower()}
