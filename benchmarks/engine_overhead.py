"""The engines' cost against each engine's own GROUP BY (issue 45 item 3): seconds, peak MB, ratio.

For each size (benchmarks/scale_data.py's synthetic Parquet table) and each engine (duckdb on
the Parquet folder; postgres on the same rows loaded with COPY before the clock starts, only up
to --postgres-max rows, default 10^8, a few minutes to load; dask when DPPORTAL_DASK_SCHEDULER
names a cluster; spark when DPPORTAL_SPARK_REMOTE names a Spark Connect server, e.g. ./test.sh's
local cluster of two one-core workers with 512 MB executors, scripts/common.sh
ensure_spark_cluster) three tallies are computed as the releases ask for them
(`mechanisms.counting.tally_table`):

- histogram: the cells of age, income, region, education (CellTally, 14,256 cells);
- range counts: a 32x16 grid over age and income (GridTally);
- statistics: count, mean and median of income by region, in one pass (GroupsAndRanks: the
  mean's exact sum per group and the median's counts around 1,001 candidates).

Beside each, the engine's own plain aggregate of the same columns, with no clamping, missing
cells or exact-arithmetic care: for a numeric column `floor(x / width)` (width: the schema's
bin width, the grid's cell width, or the candidates' spacing, 200), for a category the column
itself; for the statistics `count(*), count(x), sum(x)` per group (what a count and a mean
read) plus the `floor(x / 200)` count per group, two queries. DuckDB's plain query runs with
its default settings; Dask's is dask.dataframe's `read_parquet(...).groupby(...).size()`
(sums: `.agg`); Spark's is the same SQL over the folder read by the cluster, in a Spark
Connect session of the cluster's defaults.

With `--exact-plain`, each statistics row also gives the engine's own plain query made exact
as ours must be ("exact s", and ours against it): the same two queries, the sum replaced by
the exact sum of the clamped values as fixed-point whole numbers, `sum(CAST(floor(c * 2^43)
AS BIGINT))` for c = least(greatest(income, 0), 200000) (DuckDB sums BIGINT as HUGEINT,
PostgreSQL as NUMERIC: exact), no missing-value or category care: how much of the
statistics' cost over the plain query is the exact arithmetic itself (DuckDB and PostgreSQL
only).

With `--native`, each statistics row also gives the engine's own count, mean and exact median
of income per region, without DP (DuckDB's and Spark's `median`, PostgreSQL's
`percentile_cont(0.5)`, Dask's groupby `median`): what an office would run to publish the same
figures without a privacy guarantee ("native s", and ours against it).

Each measurement runs in a fresh subprocess (best of --repeat runs; peak MB is that process's
own peak resident size, VmHWM: DuckDB's buffers included, PostgreSQL's, Dask workers' and Spark's JVMs' not). "ratio": engine
tally seconds / plain GROUP BY seconds.

    nice -n 10 .venv/bin/python benchmarks/engine_overhead.py --rows 10000000 100000000 [--native]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import counting_scale  # noqa: E402
from counting_scale import PG_URL, drop_postgres, load_postgres, schema_of  # noqa: E402
from scale_data import COUNT_COLUMNS, table_folder  # noqa: E402

from mechanisms.counting import TableSource, tally_table  # noqa: E402
from mechanisms.counting.tally import CellTally  # noqa: E402
from mechanisms.range_count.api import support_from_schema  # noqa: E402
from mechanisms.range_count.grid_tally import grid_tally  # noqa: E402
from mechanisms.statistics import parse_request  # noqa: E402
from mechanisms.statistics.aggregates import table_passes  # noqa: E402

KINDS = ("histogram", "range counts", "statistics")
NATIVE = "native statistics"  # the engine's own count, mean and exact median (the "plain" run)
EXACT = "exact statistics"  # the plain statistics queries with exact sums (the "plain" run)
GRID = (32, 16)
CANDIDATE_STEP = 200.0  # income's quantile candidates: 0, 200, ..., 200,000


def engine_tallies(rows, kind, engine="duckdb"):
    schema = schema_of(rows).accepting()
    if kind == "histogram":
        return [CellTally(schema, tuple(COUNT_COLUMNS))]
    if kind == "range counts":
        support = support_from_schema(schema, ["age", "income"], {"grid": "x".join(map(str, GRID))})
        return [grid_tally(support, schema)]
    params = {"stat": ["count", "mean:income", "median:income"], "by": ["region"]}
    request = parse_request(schema, params, epsilon=1.0, neighbouring="add-remove")
    return table_passes(schema, request, engine)


def plain_queries(rows, kind, table):
    """The engine's own GROUP BY of the same columns (SQL), no binning care."""
    schema = schema_of(rows)
    if kind == "histogram":
        age, income = schema.column("age"), schema.column("income")
        width = [(c.upper - c.lower) / c.n_bins for c in (age, income)]
        return [
            f"SELECT floor(age / {width[0]}), floor(income / {width[1]}), region, education, "
            f"count(*) FROM {table} GROUP BY 1, 2, 3, 4"
        ]
    if kind == "range counts":
        return [
            f"SELECT floor(age / {100 / GRID[0]}), floor(income / {200000 / GRID[1]}), count(*) "
            f"FROM {table} GROUP BY 1, 2"
        ]
    if kind == EXACT:
        clamped = "least(greatest(CAST(income AS DOUBLE PRECISION), 0.0), 200000.0)"
        return [
            f"SELECT region, count(*), count(income), "
            f"sum(CAST(floor({clamped} * {2.0**43}) AS BIGINT)) FROM {table} GROUP BY 1",
            f"SELECT region, floor(income / {CANDIDATE_STEP}), count(*) FROM {table} GROUP BY 1, 2",
        ]
    return [
        f"SELECT region, count(*), count(income), sum(income) FROM {table} GROUP BY 1",
        f"SELECT region, floor(income / {CANDIDATE_STEP}), count(*) FROM {table} GROUP BY 1, 2",
    ]


NATIVE_MEDIAN = {  # each engine's own exact median of income per region
    "duckdb": "median(income)",
    "postgres": "percentile_cont(0.5) WITHIN GROUP (ORDER BY income)",
    "spark": "median(income)",
}


def native_query(engine, table):
    """The statistics as the engine computes them itself, without DP: count, mean and the
    exact median of income per region."""
    return f"SELECT region, count(*), avg(income), {NATIVE_MEDIAN[engine]} FROM {table} GROUP BY 1"


def duckdb_plain(rows, kind):
    import duckdb

    files = sorted(str(p) for p in table_folder(rows).glob("*.parquet"))
    table = "read_parquet([" + ", ".join(f"'{f}'" for f in files) + "])"
    queries = (
        [native_query("duckdb", table)] if kind == NATIVE else plain_queries(rows, kind, table)
    )
    with duckdb.connect(":memory:") as connection:
        for query in queries:
            connection.execute(query).fetchall()


def postgres_plain(rows, kind):
    import psycopg

    table = f"scale_{rows}"
    queries = (
        [native_query("postgres", table)] if kind == NATIVE else plain_queries(rows, kind, table)
    )
    with psycopg.connect(PG_URL) as connection:
        for query in queries:
            connection.execute(query).fetchall()


def dask_plain(rows, kind):
    import dask.dataframe as dd
    from distributed import Client

    with Client(os.environ["DPPORTAL_DASK_SCHEDULER"]):
        frame = dd.read_parquet(
            str(table_folder(rows)), columns=["age", "income", "region", "education"]
        )
        if kind == NATIVE:
            frame.groupby("region", dropna=False).income.agg(["size", "mean", "median"]).compute()
        elif kind == "histogram":
            frame = frame.assign(a=(frame.age // 10.0), i=(frame.income // 25000.0))
            frame.groupby(["a", "i", "region", "education"], dropna=False).size().compute()
        elif kind == "range counts":
            frame = frame.assign(
                a=(frame.age // (100 / GRID[0])), i=(frame.income // (200000 / GRID[1]))
            )
            frame.groupby(["a", "i"]).size().compute()
        else:
            frame = frame.assign(c=frame.income // CANDIDATE_STEP)
            frame.groupby("region", dropna=False).agg(
                {"age": "size", "income": ["count", "sum"]}
            ).compute()
            frame.groupby(["region", "c"], dropna=False).size().compute()


def spark_plain(rows, kind):
    from pyspark.sql.connect.session import SparkSession

    spark = SparkSession.builder.remote(os.environ["DPPORTAL_SPARK_REMOTE"]).create()
    try:
        spark.read.parquet(str(table_folder(rows))).createOrReplaceTempView("scale")
        queries = (
            [native_query("spark", "scale")]
            if kind == NATIVE
            else plain_queries(rows, kind, "scale")
        )
        for query in queries:
            spark.sql(query).collect()
    finally:
        spark.stop()


def dask_workers():
    from distributed import Client

    with Client(os.environ["DPPORTAL_DASK_SCHEDULER"]) as client:
        return len(client.scheduler_info()["workers"])


PLAIN = {
    "duckdb": duckdb_plain,
    "postgres": postgres_plain,
    "dask": dask_plain,
    "spark": spark_plain,
}


def measure(engine, rows, kind, how, repeat):
    """Best of `repeat` runs in this process: seconds and own peak MB."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        if how == "engine":
            if engine == "postgres":
                source = TableSource(PG_URL, table=f"scale_{rows}")
            else:
                source = TableSource(str(table_folder(rows)))
            answers = [tally_table(source, t, engine) for t in engine_tallies(rows, kind, engine)]
            assert int(answers[0].sum()) > 0
        else:
            PLAIN[engine](rows, kind)
        best = min(best, time.perf_counter() - start)
    return {"seconds": best, "peak_mb": counting_scale.own_peak_kb() / 1024}


def in_subprocess(*args):
    return counting_scale.in_subprocess(*args, script=__file__)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10**7])
    parser.add_argument("--engines", nargs="+", default=["duckdb", "postgres", "dask", "spark"])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS))
    parser.add_argument("--postgres-max", type=int, default=10**8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--native", action="store_true", help="statistics: also the engine's own")
    parser.add_argument(
        "--exact-plain", action="store_true", help="statistics: also the plain query, exact sums"
    )
    parser.add_argument("--measure", nargs=4, metavar=("ENGINE", "ROWS", "KIND", "HOW"))
    parser.add_argument("--load-postgres", type=int, metavar="ROWS")
    args = parser.parse_args()
    if args.measure:
        engine, rows, kind, how = args.measure
        print(json.dumps(measure(engine, int(rows), kind, how, args.repeat)))
        return
    if args.load_postgres:
        print(json.dumps(load_postgres(args.load_postgres)))
        return
    engines = list(args.engines)
    if "dask" in engines and not os.environ.get("DPPORTAL_DASK_SCHEDULER"):
        print("dask: skipped (DPPORTAL_DASK_SCHEDULER names no cluster)")
        engines.remove("dask")
    if "spark" in engines and not os.environ.get("DPPORTAL_SPARK_REMOTE"):
        print("spark: skipped (DPPORTAL_SPARK_REMOTE names no Spark Connect server)")
        engines.remove("spark")
    print(
        f"cpus {os.cpu_count()}; best of {args.repeat}; plain: floor(x / width) per numeric "
        "column, the category itself, sums per group"
    )
    print(
        f"{'rows':>13} {'engine':<9} {'kind':<13} {'seconds':>8} {'peak MB':>8} "
        f"{'plain s':>8} {'plain MB':>8} {'ratio':>6}"
        + (f" {'native s':>8} {'ratio':>6}" if args.native else "")
        + (f" {'exact s':>8} {'ratio':>6}" if args.exact_plain else "")
    )
    for rows in args.rows:
        table_folder(rows)
        for engine in engines:
            if engine == "postgres" and rows > args.postgres_max:
                print(f"{rows:>13,} {engine:<9} not run: loading takes too long (--postgres-max)")
                continue
            if engine == "postgres":
                loaded = in_subprocess("--load-postgres", rows)
                print(
                    f"{rows:>13,} {engine:<9} loaded in {loaded['load_seconds']:.0f} s (no clock)"
                )
            name = f"dask x{dask_workers()}" if engine == "dask" else engine
            for kind in args.kinds:
                ours = in_subprocess(
                    "--repeat", args.repeat, "--measure", engine, rows, kind, "engine"
                )
                plain = in_subprocess(
                    "--repeat", args.repeat, "--measure", engine, rows, kind, "plain"
                )
                native = ""
                if kind == "statistics" and args.native:
                    own = in_subprocess(
                        "--repeat", args.repeat, "--measure", engine, rows, NATIVE, "plain"
                    )
                    native = f" {own['seconds']:8.2f} {ours['seconds'] / own['seconds']:6.2f}"
                if kind == "statistics" and args.exact_plain and engine in ("duckdb", "postgres"):
                    exact = in_subprocess(
                        "--repeat", args.repeat, "--measure", engine, rows, EXACT, "plain"
                    )
                    native += f" {exact['seconds']:8.2f} {ours['seconds'] / exact['seconds']:6.2f}"
                print(
                    f"{rows:>13,} {name:<9} {kind:<13} {ours['seconds']:8.2f} "
                    f"{ours['peak_mb']:8.0f} {plain['seconds']:8.2f} {plain['peak_mb']:8.0f} "
                    f"{ours['seconds'] / plain['seconds']:6.2f}{native}",
                    flush=True,
                )
            if engine == "postgres":
                drop_postgres(f"scale_{rows}")


if __name__ == "__main__":
    main()
