"""The data check at schema confirmation: once a schema is confirmed, data content can no longer
make a release fail.

The stored Parquet copy is read in batches, turned into the frames the release engine builds
(`mechanisms.counting.inprocess.batch_frame`) and checked by the mechanisms' own rule
(`mechanisms.validation`), the one the command line applies before any noise. The same pass
counts the values a release would clamp to the bounds or send to "(other)" (`clamping_lines`).
The custodian sees their own data on this page, so the messages say which column, how many
values and the first data row; they never quote a value, so nothing from the data reaches a
message, a log line or an error page. The counts are owner-only, like the profile they are
stored in.
"""

from __future__ import annotations

import pyarrow.parquet as pq

import mechanisms
from mechanisms.counting.inprocess import batch_frame
from mechanisms.schema import CHUNK_ROWS
from mechanisms.validation import DataCheck


def check_stored(parquet_path, schema: mechanisms.Schema) -> DataCheck:
    """The whole stored table checked against `schema`, in one pass."""
    check = DataCheck(schema, list(schema.columns))
    names = [column.name for column in check.columns]
    if not names:
        return check
    with pq.ParquetFile(parquet_path, pre_buffer=False) as parquet:
        for batch in parquet.iter_batches(batch_size=CHUNK_ROWS, columns=names):
            check.add(batch_frame(batch, names))
    return check


def problems(check: DataCheck) -> list[str]:
    """One message per column and kind of value that a release of this schema would refuse."""
    return [message[0].upper() + message[1:] for message in check.messages()]


def data_problems(parquet_path, schema: mechanisms.Schema) -> list[str]:
    """`problems` of the stored table."""
    return problems(check_stored(parquet_path, schema))


def clamping_lines(check: DataCheck) -> list[dict]:
    """Per column with any moved value: counts, share, whether to warn, and the message."""
    return [c.to_dict() for c in check.clamping() if c.moved]
