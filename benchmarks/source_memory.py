"""The process that runs a release on a source never holds the rows (issue 45 item 4).

For every release kind on a source (perturbed histogram, MWEM, range counts, statistics, and a
person-level histogram) and each engine (duckdb on a folder of Parquet files, postgres on the
same rows in a PostgreSQL table, dask when DPPORTAL_DASK_SCHEDULER names a running cluster),
the release runs in a fresh Python process, as the worker runs it (`mechanisms.run_release`
on the engine's table: only aggregates come back, the mechanism adds the noise there). That
process reports its peak resident memory (VmHWM of /proc/self/status) and its peak after the
imports, before the release; the table prints seconds, peak MB, and the peak's ratio to
the same kind and engine at the smallest size. Flat ratios mean the worker's memory does not
grow with the table.

DuckDB is embedded: its buffers are inside the worker process, so its peak is part of the
peak printed (each query opens DuckDB in memory and closes it; `duckdb_memory()` could only be
read inside the engine's connection); it is held to DPPORTAL_DUCKDB_MEMORY_LIMIT (512MB
unless set in the environment), and a release that needs more is printed as failed.
PostgreSQL's and Dask's memory is in their own processes, not measured here.

The histograms release SYNTHETIC rows at every size: by default they release as many
synthetic rows as the table holds, an output (not the table) that grows with it.

The synthetic table: a numeric column x (normal, 1% NaN, values beyond its bounds), a whole
number n (2% missing), a category c (one value outside the declared list) and a person ID pid
(1 to 9 rows per person), written as 8 Parquet files and copied into PostgreSQL.

    nice -n 15 .venv/bin/python benchmarks/source_memory.py --rows 1000000 10000000
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PG_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TABLE = "bench_source_memory"
PARTS = 8
SYNTHETIC = 100_000  # synthetic rows the histograms release (their output, not the table)
COLUMNS = [
    {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
    {"name": "n", "type": "numeric", "lower": 0, "upper": 50, "integer": True},
    {"name": "c", "type": "categorical", "categories": ["a", "b", "c"]},
]
KINDS = {  # kind: (mechanism, columns, params, person level)
    "histogram": ("perturbed_histogram", ["x", "c"], {"rows": SYNTHETIC}, False),
    "mwem": ("mwem", ["x", "c"], {}, False),
    "range count": ("range_count", ["x", "n"], {"grid": [32, 16], "random_boxes": 50}, False),
    "statistics": (
        "statistics",
        ["x", "n", "c"],
        {"stat": ["count", "mean:x", "variance:n", "median:x"], "by": ["c"]},
        False,
    ),
    "person hist.": ("perturbed_histogram", ["x", "c"], {"rows": SYNTHETIC}, True),
}


def schema_dict(person: bool) -> dict:
    if not person:
        return {"columns": COLUMNS}
    return {"columns": [*COLUMNS, {"name": "pid", "role": "person_id"}], "max_rows_per_person": 2}


def part_frame(rows: int, seed: int, first_person: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(50, 30, rows)
    x[rng.random(rows) < 0.01] = np.nan
    n = pd.array(rng.integers(-5, 60, rows), dtype="Int64")
    n[rng.random(rows) < 0.02] = pd.NA
    person = first_person + np.repeat(np.arange(rows), rng.integers(1, 10, rows))[:rows]
    return pd.DataFrame(
        {"x": x, "n": n, "c": rng.choice(["a", "b", "c", "d"], rows), "pid": person}
    )


def write_table(rows: int, folder: Path, postgres: bool) -> None:
    """PARTS Parquet files of `rows` rows in all, and the same rows in PostgreSQL."""
    if postgres:
        with psycopg.connect(PG_URL, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(TABLE)))
            connection.execute(
                sql.SQL(
                    "CREATE TABLE {} (x double precision, n bigint, c text, pid bigint)"
                ).format(sql.Identifier(TABLE))
            )
    for part in range(PARTS):
        size = rows // PARTS + (part < rows % PARTS)
        frame = part_frame(size, part, part * rows)
        pq.write_table(
            pa.Table.from_pandas(frame, preserve_index=False), folder / f"part-{part}.parquet"
        )
        if postgres:
            copy_into_postgres(frame)


def copy_into_postgres(frame: pd.DataFrame) -> None:
    text = frame.to_csv(index=False, header=False, na_rep="")
    with psycopg.connect(PG_URL, autocommit=True) as connection:
        query = sql.SQL("COPY {} FROM STDIN (FORMAT csv)").format(sql.Identifier(TABLE))
        with connection.cursor().copy(query) as copy:
            copy.write(text)
        connection.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(TABLE)))


def child(kind: str, engine: str, location: str) -> None:
    """One release in this (fresh) process; prints its seconds and memory as JSON."""
    import mechanisms
    from mechanisms.counting import TableSource, engine_table

    mechanism, columns, params, person = KINDS[kind]
    schema = mechanisms.Schema.from_dict(schema_dict(person))
    if engine == "postgres":
        source = TableSource(location, table=f"public.{TABLE}")
    else:
        source = TableSource(location)
    before = high_water_mb()
    started = time.perf_counter()
    mechanisms.run_release(
        mechanism,
        engine_table(source, engine),
        schema,
        columns=columns,
        params=params,
        epsilon=1.0,
        neighbouring="add-remove",
    )
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "imports_mb": before, "peak_mb": high_water_mb()}))


def high_water_mb() -> float:
    """This process's peak resident memory (VmHWM), in MiB.

    Not getrusage's ru_maxrss: Linux carries that over from the parent at fork, so a child of
    a parent that once held the generated table would report the parent's peak.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("no VmHWM in /proc/self/status (this benchmark reads Linux's)")


def measure(kind: str, engine: str, location: str, timeout: float) -> dict | None:
    """The child's figures; None on timeout; {"error": its last line} when the release fails."""
    command = [sys.executable, __file__, "--child", kind, engine, location]
    try:
        done = subprocess.run(  # noqa: S603  # this script, with our own arguments
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:  # e.g. DuckDB refusing to pass its memory limit: a row, not a stop
        lines = done.stderr.strip().splitlines() or ["no message"]
        return {"error": lines[-1][:300]}
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--timeout", type=float, default=600, help="seconds per release")
    parser.add_argument("--engines", nargs="+", default=["duckdb", "postgres", "dask"])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    engines = [e for e in args.engines if e != "dask"]
    if "dask" in args.engines and os.environ.get("DPPORTAL_DASK_SCHEDULER"):
        engines.append("dask")
    elif "dask" in args.engines:
        print("dask: skipped (DPPORTAL_DASK_SCHEDULER names no cluster)")
    if max(args.rows) < 10**8:
        print("10^8 rows: not run (give --rows 100000000: minutes to write, 2 GB of Parquet)")
    first: dict[tuple[str, str], float] = {}
    print(
        f"{'kind':<13} {'engine':<9} {'rows':>11} {'seconds':>8} {'imports MB':>10} "
        f"{'peak MB':>8} {'ratio':>6}"
    )
    for rows in args.rows:
        with tempfile.TemporaryDirectory(prefix="source_memory_") as folder:
            write_table(rows, Path(folder), "postgres" in engines)
            for kind in args.kinds:
                for engine in engines:
                    location = PG_URL if engine == "postgres" else folder
                    got = measure(kind, engine, location, args.timeout)
                    if got is None:
                        print(f"{kind:<13} {engine:<9} {rows:>11,} {'> ' + str(args.timeout):>8}")
                        continue
                    if "error" in got:
                        print(f"{kind:<13} {engine:<9} {rows:>11,} failed: {got['error']}")
                        continue
                    base = first.setdefault((kind, engine), got["peak_mb"])
                    print(
                        f"{kind:<13} {engine:<9} {rows:>11,} {got['seconds']:>8.1f} "
                        f"{got['imports_mb']:>10.0f} {got['peak_mb']:>8.0f} "
                        f"{got['peak_mb'] / base:>6.2f}",
                        flush=True,
                    )
    with psycopg.connect(PG_URL, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(TABLE)))


if __name__ == "__main__":
    main()
