"""Time to register a PostgreSQL table that stays where it lives, against its row count.

Registration (`dpportal.sources.tables.inspect`) reads the catalogue (columns, types) and one
`count(*)`; no value. The table (age integer, sex text, city text) is made with generate_series
in a throwaway schema of the database `test` on 127.0.0.1:5432 and dropped afterwards. Each
figure is the median of `--reps` registrations.

    nice -n 15 .venv/bin/python benchmarks/source_registration.py [--reps 5] [--max-exponent 6]
"""

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
import django  # noqa: E402

django.setup()
from django.test import override_settings  # noqa: E402

from dpportal.sources import tables as sources  # noqa: E402

SERVER = "postgresql://postgres@127.0.0.1:5432/test"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--max-exponent", type=int, default=6)
    args = parser.parse_args()
    schema = f"dpp_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(SERVER, autocommit=True) as pg:
        pg.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            print(f"{'rows':>10} {'register median s':>18} {'min s':>8}")
            for exponent in range(3, args.max_exponent + 1):
                rows = 10**exponent
                table = sql.Identifier(schema, f"people_{rows}")
                pg.execute(
                    sql.SQL(
                        "CREATE TABLE {} AS SELECT (i %% 90)::integer AS age, "
                        "CASE WHEN i %% 2 = 0 THEN 'F' ELSE 'M' END AS sex, "
                        "'Town ' || (i %% 7) AS city FROM generate_series(1, %s) AS i"
                    ).format(table),
                    [rows],
                )
                times = []
                for _ in range(args.reps):
                    start = time.perf_counter()
                    with override_settings(DPPORTAL_SOURCE_HOSTS=["127.0.0.1:5432"]):
                        found = sources.inspect(None, SERVER, f"{schema}.people_{rows}")
                    times.append(time.perf_counter() - start)
                    assert found.row_count == rows
                print(f"{rows:>10,} {statistics.median(times):>18.4f} {min(times):>8.4f}")
        finally:
            pg.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
