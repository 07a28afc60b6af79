"""What the worker's check of an object-storage source costs before each release (issue 45).

Before a release marks its data read, `dpportal.sources.tables.reach` lists the source's Parquet
files in the store with the source's own keys (and pyarrow reads the first file's footer for the
schema), so a store that is down, objects that are gone or keys that are refused fail the
release refunded. This measures, on moto's S3 server (started here, on 127.0.0.1), for a folder
of --parts Parquet files: registration (`inspect`: every footer read), the checks without the
listing (`_s3_source`: the endpoint allowed, not the portal's) and `reach` with it. Median of
--reps calls each; "listing" is reach minus the checks alone.

    nice -n 10 .venv/bin/python benchmarks/source_reach.py [--parts 1 10 100] [--reps 20]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
import django  # noqa: E402

django.setup()
from django.test import override_settings  # noqa: E402

from dpportal.sources import tables  # noqa: E402
from tests.object_storage import bucket_with, s3_server  # noqa: E402


def median_seconds(call, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(endpoint: str, parts: int, reps: int) -> tuple[float, float, float]:
    """Median seconds of registration, of the checks alone and of `reach`, for `parts` files."""
    with tempfile.TemporaryDirectory() as folder:
        files = {}
        for part in range(parts):
            path = Path(folder) / f"{part}.parquet"
            pq.write_table(pa.table({"age": list(range(1000)), "sex": ["F", "M"] * 500}), path)
            files[f"people/{part}.parquet"] = path
        name = f"reach-{uuid.uuid4().hex[:12]}"
        options = bucket_with(endpoint, name, files)
    location = f"s3://{name}/people/"
    found = tables.inspect(None, location, "", options)
    sealed = found.source
    register = median_seconds(lambda: tables.inspect(None, location, "", options), reps)
    checks = median_seconds(
        lambda: tables._s3_source(sealed.location, dict(sealed.storage_options)), reps
    )
    reached = median_seconds(lambda: tables.reach("owner", sealed), reps)
    return register, checks, reached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the start")
    print(f"{'files':>6} {'register s':>11} {'checks s':>9} {'reach s':>8} {'listing s':>10}")
    with s3_server() as endpoint:
        hosts = [endpoint.removeprefix("http://")]
        with override_settings(
            DPPORTAL_SOURCE_HOSTS=hosts, DPPORTAL_S3_BUCKET="", DPPORTAL_S3_ENDPOINT_URL=""
        ):
            for parts in args.parts:
                register, checks, reached = measure(endpoint, parts, args.reps)
                print(
                    f"{parts:>6} {register:>11.4f} {checks:>9.4f} {reached:>8.4f} "
                    f"{reached - checks:>10.4f}"
                )


if __name__ == "__main__":
    main()
