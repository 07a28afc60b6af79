"""Counting rows into cells at scale, per counting engine (issue 19): seconds and peak memory.

For each size (rows) and each engine in mechanisms.counting.ENGINES at run time, one count of
the 4 columns benchmarks/scale_data.py names (14,256 cells) over its synthetic Parquet folder,
each in a fresh subprocess that reports its own peak RSS (VmHWM). The dask engine runs on a
LocalCluster of 1, 2 and 4 worker processes (one thread each) started inside that subprocess
before the clock starts; its row adds the workers' largest peak RSS and the speed-up over the
fewest workers. postgres (when
registered) counts a table loaded with COPY before the clock starts (dropped after), only up to
--postgres-max rows (default 10^7: loading is the slow part). Last, one release
(perturbed histogram) on the largest size with the dask engine.

    nice -n 15 .venv/bin/python benchmarks/counting_scale.py --rows 1000000 10000000 100000000
"""

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_data import COUNT_COLUMNS, folder_bytes, table_folder  # noqa: E402

from mechanisms import Schema, counting  # noqa: E402
from mechanisms.counting import TableSource, count_cells  # noqa: E402

PG_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def peak_mb(rusage_kb):
    return rusage_kb / 1024


def schema_of(rows):
    return Schema.from_dict(json.loads((table_folder(rows).parent / "schema.json").read_text()))


def load_postgres(rows):
    """The table of `rows` rows in PostgreSQL, loaded with COPY from the Parquet files before any
    clock starts (in its own subprocess, so the counting process's peak RSS is the count's
    alone). Unlogged (no write-ahead log: a benchmark table, only read; reads are as from a
    logged one), then VACUUM (FREEZE, ANALYZE), so that no timed query sets the rows' hint bits
    or meets autovacuum working on the new table. On this machine (2026-12-06) 10^7 rows loaded
    in 19 s at load average 3 and 36 s at 11, 10^8 in 272 s at 3 to 5."""
    import psycopg
    import pyarrow.csv as pa_csv
    import pyarrow.dataset as pa_dataset

    table = f"scale_{rows}"
    start = time.perf_counter()
    with psycopg.connect(PG_URL, autocommit=True) as connection:
        loaded = connection.execute(
            "select count(*) from pg_tables where tablename = %s", (table,)
        ).fetchone()[0]
        if not loaded:
            dataset = pa_dataset.dataset(table_folder(rows), format="parquet")
            types = {"string": "text", "float": "real", "int16": "smallint", "int8": "smallint"}
            fields = ", ".join(f"{f.name} {types[str(f.type)]}" for f in dataset.schema)
            connection.execute(f"drop table if exists {table}_loading")
            connection.execute(f"create unlogged table {table}_loading ({fields})")
            with connection.cursor().copy(f"copy {table}_loading from stdin (format csv)") as copy:
                for batch in dataset.to_batches(batch_size=1 << 20):
                    sink = io.BytesIO()
                    pa_csv.write_csv(batch, sink, pa_csv.WriteOptions(include_header=False))
                    copy.write(sink.getvalue())
            connection.execute(f"vacuum (freeze, analyze) {table}_loading")
            connection.execute(f"alter table {table}_loading rename to {table}")
    return {"table": table, "load_seconds": time.perf_counter() - start}


def drop_postgres(table):
    """The benchmark's table goes once counted: the database is shared with the tests."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as connection:
        connection.execute(f"drop table if exists {table}")


def measure(engine, rows, workers):
    """One count in this process: seconds, own peak RSS, workers' largest peak RSS (dask)."""
    schema = schema_of(rows)
    if engine == "postgres":
        source = TableSource(PG_URL, table=f"scale_{rows}")
    else:
        source = TableSource(str(table_folder(rows)))
    worker_kb = 0
    if engine == "dask":
        from distributed import LocalCluster

        from mechanisms.counting.dask_engine import count_on_dask

        with (
            LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            cluster.get_client() as client,
        ):
            start = time.perf_counter()
            counts = count_on_dask(
                source, schema, COUNT_COLUMNS, scheduler=cluster.scheduler_address
            )
            seconds = time.perf_counter() - start
            peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            worker_kb = max(peaks.values())
    else:
        start = time.perf_counter()
        counts = count_cells(source, schema, COUNT_COLUMNS, engine)
        seconds = time.perf_counter() - start
    if engine == "postgres":
        drop_postgres(source.table)
    assert counts.sum() == rows, (counts.sum(), rows)
    own_kb = own_peak_kb()
    return {"seconds": seconds, "rss_kb": own_kb, "worker_kb": worker_kb, "sum": int(counts.sum())}


def release(rows, workers):
    """A perturbed histogram of the largest table, counted by the dask engine."""
    from distributed import LocalCluster

    from mechanisms import run_release, secure_source
    from mechanisms.histogram import perturb_counts

    schema, source = schema_of(rows), TableSource(str(table_folder(rows)))
    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        cluster.get_client() as client,
    ):
        os.environ["DPPORTAL_DASK_SCHEDULER"] = cluster.scheduler_address
        start = time.perf_counter()
        if hasattr(counting, "engine_table"):  # run_release reads engine tables (engines branch)
            output = run_release(
                "perturbed_histogram",
                counting.engine_table(source, "dask"),
                schema,
                epsilon=1.0,
                columns=COUNT_COLUMNS,
                params={"rows": 10_000},
            )
            how = f"run_release, {len(output.files)} files"
        else:  # the perturbed histogram's noise step on the engine's counts
            counts = count_cells(source, schema, COUNT_COLUMNS, "dask")
            perturb_counts(counts, epsilon=1.0, neighbouring="replace-one", rng=secure_source())
            how = "count_cells(dask) + histogram.perturb_counts (secure noise)"
        seconds = time.perf_counter() - start
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return {
        "seconds": seconds,
        "how": how,
        "worker_kb": max(peaks.values()),
        "rss_kb": own_peak_kb(),
    }


def own_peak_kb() -> int:
    """This process's peak resident size in KB: VmHWM from /proc/self/status. Not getrusage's
    ru_maxrss, which Linux carries over from the parent at exec (a parent that generated a
    table first would show its own peak in every measurement)."""
    status = Path("/proc/self/status").read_text().splitlines()
    return int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))


def in_subprocess(*args, script=__file__):
    """`script` run with `args` in a fresh Python: its last line of output, read as JSON."""
    result = subprocess.run(
        [sys.executable, script, *map(str, args)], capture_output=True, text=True, check=False
    )
    if result.returncode:
        raise SystemExit(f"measurement {args} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10**6, 10**7])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--postgres-max", type=int, default=10**7)
    parser.add_argument("--measure", nargs=3, metavar=("ENGINE", "ROWS", "WORKERS"))
    parser.add_argument("--release", nargs=2, type=int, metavar=("ROWS", "WORKERS"))
    parser.add_argument("--load-postgres", type=int, metavar="ROWS")
    args = parser.parse_args()
    if args.measure:
        engine, rows, workers = args.measure
        print(json.dumps(measure(engine, int(rows), int(workers))))
        return
    if args.load_postgres:
        print(json.dumps(load_postgres(args.load_postgres)))
        return
    if args.release:
        print(json.dumps(release(*args.release)))
        return

    print(f"engines: {', '.join(counting.ENGINES)}; columns {COUNT_COLUMNS}; cpus {os.cpu_count()}")
    print(
        f"{'rows':>13} {'parquet':>8} {'engine':>12} {'seconds':>8} {'rows/s':>11} "
        f"{'peak RSS':>9} {'worker RSS':>10} {'x in-proc':>9} {'speed-up':>8}"
    )
    for rows in args.rows:
        gigabytes = folder_bytes(table_folder(rows)) / 1e9
        runs = []
        for engine in counting.ENGINES:
            if engine == "postgres" and rows > args.postgres_max:
                continue
            if engine == "postgres":
                in_subprocess("--load-postgres", rows)
            for workers in args.workers if engine == "dask" else [0]:
                runs.append((engine, workers, in_subprocess("--measure", engine, rows, workers)))
        fewest = min(args.workers)
        base = {e: r["seconds"] for e, w, r in runs if w in (0, fewest)}
        for engine, workers, run in runs:
            name = f"dask x{workers}" if engine == "dask" else engine
            worker = f"{peak_mb(run['worker_kb']):8.0f}MB" if workers else f"{'-':>10}"
            speed = f"{base['dask'] / run['seconds']:8.2f}" if workers else f"{'-':>8}"
            print(
                f"{rows:>13,} {gigabytes:>7.2f}G {name:>12} {run['seconds']:8.1f} "
                f"{rows / run['seconds']:11,.0f} {peak_mb(run['rss_kb']):7.0f}MB {worker} "
                f"{run['seconds'] / base['inprocess']:9.2f} {speed}",
                flush=True,
            )
    largest, workers = max(args.rows), max(args.workers)
    done = in_subprocess("--release", largest, workers)
    print(
        f"\nrelease on {largest:,} rows ({folder_bytes(table_folder(largest)) / 1e9:.2f} GB of "
        f"Parquet, dask x{workers}): {done['seconds']:.1f} s via {done['how']}; largest worker "
        f"peak RSS {peak_mb(done['worker_kb']):.0f} MB, asking process {peak_mb(done['rss_kb']):.0f} MB"
    )


if __name__ == "__main__":
    main()
