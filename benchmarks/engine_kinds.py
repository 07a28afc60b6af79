"""Every release kind on every engine (issue 45 item 1): equal to in process, and seconds.

One synthetic table (--rows rows: a numeric column with NaN, gaps and values beyond its bounds,
a whole-number column with gaps, a category, and a person ID with 1 to 9 rows per person)
stored as a folder of 4 Parquet files and as a PostgreSQL table. For each kind (range counts:
a 32x16 grid; statistics: count, mean, variance, median, q90 by category; person level: the
same statistics at k = 2) and each engine (inprocess, duckdb, postgres, and dask when
DPPORTAL_DASK_SCHEDULER names a cluster) the tallies the kind asks for are computed, compared
with the in-process engine's (the reference; on the same storage), and timed (wall seconds,
one run, the PostgreSQL load not counted).

    nice -n 15 .venv/bin/python benchmarks/engine_kinds.py --rows 1000000
"""

import argparse
import os
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

from mechanisms.counting import TableSource, tally_table  # noqa: E402
from mechanisms.counting.bounding import BoundedTally  # noqa: E402
from mechanisms.range_count.api import support_from_schema  # noqa: E402
from mechanisms.range_count.grid_tally import grid_tally  # noqa: E402
from mechanisms.schema import Schema  # noqa: E402
from mechanisms.statistics import parse_request  # noqa: E402
from mechanisms.statistics.aggregates import table_passes  # noqa: E402

PG_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
            {"name": "n", "type": "numeric", "lower": 0, "upper": 50, "integer": True},
            {"name": "c", "type": "categorical", "categories": ["a", "b", "c"]},
        ]
    }
).accepting()


def table(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(45)
    x = rng.normal(50, 30, rows)
    x[rng.random(rows) < 0.01] = np.nan
    n = pd.array(rng.integers(-5, 60, rows), dtype="Int64")
    n[rng.random(rows) < 0.02] = pd.NA
    person = np.repeat(np.arange(rows), rng.integers(1, 10, rows))[:rows]
    return pd.DataFrame(
        {"x": x, "n": n, "c": rng.choice(["a", "b", "c", "d"], rows), "pid": person}
    )


def kinds() -> dict[str, list]:
    support = support_from_schema(SCHEMA, ["x", "n"], {"grid": "32x16"})
    params = {"stat": ["count", "mean:x", "variance:n", "median:x", "q90:n"], "by": ["c"]}
    request = parse_request(SCHEMA, params, epsilon=1.0, neighbouring="add-remove")
    statistics = table_passes(SCHEMA, request)
    return {
        "range counts": [grid_tally(support, SCHEMA)],
        "statistics": statistics,
        "person level": [BoundedTally(t, "pid", 2, "5eed" * 8) for t in statistics],
    }


def load_postgres(frame: pd.DataFrame) -> str:
    with psycopg.connect(PG_URL, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS public.bench_engine_kinds")
        connection.execute(
            "CREATE TABLE public.bench_engine_kinds (x double precision, n bigint, c text, "
            "pid bigint)"
        )
        name = sql.Identifier("public", "bench_engine_kinds")
        with connection.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(name)) as copy:
            for row in frame.itertuples(index=False):
                copy.write_row([None if pd.isna(v) else v for v in row])
    return "public.bench_engine_kinds"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    frame = table(args.rows)
    folder = Path(tempfile.mkdtemp(prefix="engine_kinds_"))
    for part in range(4):
        pq.write_table(
            pa.Table.from_pandas(frame.iloc[part::4], preserve_index=False),
            folder / f"part-{part}.parquet",
        )
    parquet = TableSource(str(folder))
    postgres = TableSource(PG_URL, table=load_postgres(frame))
    engines = [("inprocess", parquet), ("duckdb", parquet), ("postgres", postgres)]
    if os.environ.get("DPPORTAL_DASK_SCHEDULER"):
        engines.append(("dask", parquet))
    print(
        f"{args.rows:,} rows; equal: the same int64 arrays as the inprocess engine on the same storage"
    )
    print(f"{'kind':<14} {'engine':<10} {'equal':<6} {'seconds':>8}")
    for kind, wanted in kinds().items():
        reference = {
            id(s): [tally_table(s, t, "inprocess") for t in wanted] for _, s in engines[:3:2]
        }
        for engine, source in engines:
            started = time.perf_counter()
            got = [tally_table(source, t, engine) for t in wanted]
            seconds = time.perf_counter() - started
            equal = all(
                np.array_equal(a, b) for a, b in zip(got, reference[id(source)], strict=True)
            )
            print(f"{kind:<14} {engine:<10} {'yes' if equal else 'NO':<6} {seconds:>8.2f}")


if __name__ == "__main__":
    main()
