"""Synthetic Parquet tables for the scale benchmarks (issue 19), cached under /tmp/dpportal-scale.

10 columns of small types: integer, float and text, some with missing values, some with values
outside the schema's bounds or categories. Written in files of at most 10^7 rows (row groups of
2^20 rows) to /tmp/dpportal-scale/<rows>/parquet/part-NNNN.parquet, with the schema beside
that folder (<rows>/schema.json). A folder already complete is reused.

Above 10^8 rows the table is the 10^8-row table repeated (its files hard-linked again under new
names): fresh rows would take about 17 GB and half an hour per 10^9 on this machine, and the
counting cost is the same, since every engine reads every byte of every file either way. The
counts are then exactly the 10^8-row counts times the repetition.

    nice -n 15 .venv/bin/python benchmarks/scale_data.py --rows 100000000
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path("/tmp/dpportal-scale")
FILE_ROWS = 10**7
REPEATED_ROWS = 10**8  # larger tables repeat this one
REGIONS = [f"R{j:02d}" for j in range(12)]  # R10 and R11 are not in the schema
SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
        {"name": "income", "type": "numeric", "lower": 0, "upper": 200000, "bins": 8},
        {"name": "score", "type": "numeric", "lower": -3, "upper": 3, "bins": 6},
        {"name": "hours", "type": "numeric", "lower": 0, "upper": 80, "bins": 8},
        {"name": "weight", "type": "numeric", "lower": 0, "upper": 1, "bins": 5},
        {"name": "region", "type": "categorical", "categories": REGIONS[:10]},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
        {"name": "education", "type": "categorical", "categories": list("ABCDEFG")},
        {"name": "year", "type": "categorical", "categories": [str(y) for y in range(2019, 2026)]},
        {"name": "flag", "type": "categorical", "categories": ["0", "1"]},
    ]
}
# The columns the counting benchmarks count: 11 x 9 x 12 x 12 = 14,256 cells.
COUNT_COLUMNS = ["age", "income", "region", "education"]


def text(draw, choices, rows, missing):
    """A text column from `choices`, a share `missing` of it empty."""
    indices = draw.integers(0, len(choices), rows, dtype=np.int8)
    mask = draw.random(rows) < missing if missing else None
    return pa.DictionaryArray.from_arrays(indices, pa.array(choices), mask=mask).cast(pa.string())


def block(rows, seed):
    """One file's rows (benchmark data only; the mechanisms never see this generator)."""
    draw = np.random.default_rng(seed)
    income = draw.lognormal(10.5, 0.8, rows).astype(np.float32)
    income[draw.random(rows) < 0.03] = np.nan
    hours = pa.array(draw.integers(0, 90, rows, dtype=np.int16), mask=draw.random(rows) < 0.02)
    return pa.table(
        {
            "age": draw.integers(-2, 105, rows, dtype=np.int16),
            "income": income,
            "score": draw.standard_normal(rows).astype(np.float32),
            "hours": hours,
            "weight": draw.random(rows, dtype=np.float32),
            "region": text(draw, REGIONS, rows, 0.01),
            "sex": text(draw, ["F", "M", "X"], rows, 0.0),
            "education": text(draw, list("ABCDEFG"), rows, 0.05),
            "year": draw.integers(2019, 2026, rows, dtype=np.int16),
            "flag": draw.integers(0, 2, rows, dtype=np.int8),
        }
    )


def table_folder(rows):
    """The Parquet folder of `rows` rows, generated unless a complete one is there."""
    folder = ROOT / str(rows) / "parquet"
    done = folder.parent / "schema.json"
    if done.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if rows > REPEATED_ROWS and rows % REPEATED_ROWS == 0:
        repeat(table_folder(REPEATED_ROWS), folder, rows // REPEATED_ROWS)
        done.write_text(json.dumps(SCHEMA, indent=1))
        return folder
    for number, start in enumerate(range(0, rows, FILE_ROWS)):
        size = min(FILE_ROWS, rows - start)
        began = time.perf_counter()
        pq.write_table(block(size, number), folder / f"part-{number:04d}.parquet")
        print(
            f"  {folder.name}: file {number} ({size:,} rows) in {time.perf_counter() - began:.1f} s",
            file=sys.stderr,
        )
    done.write_text(json.dumps(SCHEMA, indent=1))  # written last: marks the folder complete
    return folder


def repeat(source, folder, times):
    """`folder` as `times` copies of `source`'s files, hard-linked (no new bytes on disk)."""
    parts = sorted(source.glob("*.parquet"))
    for copy in range(times):
        for number, part in enumerate(parts):
            os.link(part, folder / f"part-{copy * len(parts) + number:04d}.parquet")


def folder_bytes(folder):
    return sum(p.stat().st_size for p in folder.glob("*.parquet"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10**6, 10**7])
    args = parser.parse_args()
    for rows in args.rows:
        folder = table_folder(rows)
        print(f"{rows:>13,} rows  {folder_bytes(folder) / 1e9:6.2f} GB  {folder}")


if __name__ == "__main__":
    main()
