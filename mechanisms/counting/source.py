"""Where a table lives, for counting engines.

A Parquet file or folder (a local path or an s3:// URL), a table or view in a PostgreSQL
database (a postgresql:// URL and the table's name), or a table in the Spark catalog
(`spark-table:db.name`, counted by the Spark engine only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SPARK_TABLE_SCHEME = "spark-table:"  # spark-table:db.name, a table in the Spark catalog


@dataclass(frozen=True)
class TableSource:
    """A table that stays where it lives.

    `location`: a Parquet file or folder of Parquet files (local path or `s3://bucket/key`), or
    a `postgresql://` connection URL, or `spark-table:` and the table's name. `table`: the
    (optionally schema-qualified) table or view, for PostgreSQL and the Spark catalog only.
    `storage_options`: how to reach object storage (for example
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

    @property
    def is_spark_table(self) -> bool:
        return self.location.startswith(SPARK_TABLE_SCHEME)

    def describe(self) -> str:
        """Words for messages; never includes credentials."""
        if self.is_postgres:
            return f"PostgreSQL table {self.table!r}"
        if self.is_spark_table:
            return f"Spark catalog table {self.table!r}"
        return f"Parquet data at {self.location.rsplit('@', 1)[-1]!r}"
