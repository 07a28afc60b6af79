"""The content fingerprint: the budget belongs to the data, not to the file, so uploads with
the same fingerprint share one budget."""

import hashlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from pandas.util import hash_pandas_object

FINGERPRINT_HASH_KEYS = ("dpportal-rows-k1", "dpportal-rows-k2")  # two 64-bit row hashes
FINGERPRINT_BATCH_ROWS = 1 << 16


def content_fingerprint(parquet_path: Path) -> str:
    """A hash of the parsed table that does not depend on the file that carried it.

    The same rows give the same fingerprint whatever their order, the column order, the format
    (CSV, TSV, XLSX), the encoding, a byte-order mark, quoting or line endings: each row is
    hashed (columns in name order, numbers as float64 so that 1, 1.0 and 1e0 agree) and the row
    hashes are summed modulo 2^64, twice with independent keys (so duplicate rows count).
    It cannot catch a changed table: one row edited, added or removed, a column dropped,
    renamed or re-coded all give a new fingerprint (and a new budget). Streams in batches.
    """
    sums = np.zeros(len(FINGERPRINT_HASH_KEYS), dtype=np.uint64)
    with pq.ParquetFile(parquet_path) as parquet:
        names = sorted(parquet.schema_arrow.names)
        rows = parquet.metadata.num_rows
        for batch in parquet.iter_batches(batch_size=FINGERPRINT_BATCH_ROWS, columns=names):
            frame = batch.to_pandas()
            for name in names:
                if frame[name].dtype.kind in "iuf":
                    frame[name] = frame[name].astype("float64") + 0.0  # -0.0 becomes 0.0
            sums += np.array(
                [
                    hash_pandas_object(frame[names], index=False, hash_key=key)
                    .to_numpy()
                    .sum(dtype=np.uint64)
                    for key in FINGERPRINT_HASH_KEYS
                ],
                dtype=np.uint64,
            )  # arrays wrap around silently: sums modulo 2^64
    summary = "\x1f".join([*names, str(rows), *(str(int(total)) for total in sums)])
    return hashlib.sha256(summary.encode()).hexdigest()
