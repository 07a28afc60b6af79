"""Where a table lives, for counting engines.

A Parquet file or folder (a local path or an s3:// URL), or a table or view in a PostgreSQL
database (a postgresql:// URL and the table's name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class TableSource:
    """A table that stays where it lives.

    `location`: a Parquet file or folder of Parquet files (local path or `s3://bucket/key`), or
    a `postgresql://` connection URL. `table`: the (optionally schema-qualified) table or view,
    for PostgreSQL only. `storage_options`: how to reach object storage (for example
    `endpoint_url`, `access_key`, `secret_key`, `region`); empty for local files. `files`:
    when given, exactly the Parquet files to read (a caller that has checked each one, such
    as the portal); else every file of the folder, as pyarrow lists it.
    """

    location: str
    table: str | None = None
    storage_options: Mapping[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()

    @property
    def is_postgres(self) -> bool:
        return self.location.startswith(POSTGRES_SCHEMES)

    def describe(self) -> str:
        """Words for messages; never includes credentials."""
        if self.is_postgres:
            return f"PostgreSQL table {self.table!r}"
        return f"Parquet data at {self.location.rsplit('@', 1)[-1]!r}"
