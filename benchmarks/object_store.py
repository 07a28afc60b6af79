"""Object storage speed and memory: the portal's own code (dpportal/core/object_store.py) against the
local folder and an S3-compatible server (moto's standalone server, started here on 127.0.0.1).

Writes a Parquet file of ROWS x 4 columns (row groups of 65,536 rows), then, each in its own
child process (so peak memory is that process's own high-water mark, VmHWM):

- keep: `object_store.keep` of the file (a multipart upload in 8 MiB parts; local: nothing);
- read batches: the release engine's read, 2 of the 4 columns as record batches of CHUNK_ROWS
  rows through `object_store.open_input` (byte-range reads from the bucket);
- download: `object_store.chunks`, the streamed download's pieces.

moto keeps objects in its own memory and runs on the same machine, so these seconds measure the
portal's client path and HTTP, not a real store's network. The point of the memory column: it
stays well under the object's size for the reads, i.e. the object is never held whole.

    nice -n 15 .venv/bin/python benchmarks/object_store.py              # 2 * 10^6 rows
    nice -n 15 .venv/bin/python benchmarks/object_store.py --rows 500000
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
mode, name = sys.argv[2], sys.argv[3]
import django
django.setup()
import pyarrow.parquet as pq
from dpportal.core import files
from dpportal.core import object_store
from mechanisms.schema import CHUNK_ROWS
path = files.stored_path(name)
start = time.perf_counter()
if mode == "keep":
    object_store.keep(path)
    rows = 0
elif mode == "read":
    rows = 0
    with object_store.open_input(path) as stored, pq.ParquetFile(stored, pre_buffer=False) as parquet:
        for batch in parquet.iter_batches(batch_size=CHUNK_ROWS, columns=["i0", "s0"]):
            rows += batch.to_pandas().shape[0]
elif mode == "baseline":
    rows = 0
elif mode == "download":
    rows = sum(len(piece) for piece in object_store.chunks(path))
seconds = time.perf_counter() - start
status = open("/proc/self/status").read()  # VmHWM: this program's own peak, not the parent's
peak = int(status.split("VmHWM:")[1].split()[0]) / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak, "rows": rows}))
"""


def write_table(path: Path, rows: int) -> None:
    rng = np.random.default_rng(7)  # benchmark data, not a privacy mechanism
    table = pa.table(
        {
            "i0": rng.integers(0, 100, rows),
            "i1": rng.integers(0, 10**9, rows),
            "f0": rng.normal(size=rows),
            "s0": pa.array(rng.choice(["north", "south", "east", "west"], rows)),
        }
    )
    pq.write_table(table, path, row_group_size=65_536)


def start_moto():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen(  # noqa: S603  (our own venv's moto_server)
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1).close()  # noqa: S310  (local server)
            return process, url
        except OSError:
            time.sleep(0.1)
    process.terminate()
    raise SystemExit("moto_server did not start")


def run(mode: str, name: str, env: dict) -> dict:
    out = subprocess.run(  # noqa: S603
        [sys.executable, "-c", CHILD, str(REPO), mode, name],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="dpportal-bench-objstore-"))
    storage = folder / "storage"
    storage.mkdir()
    name = "bench.parquet"
    write_table(storage / name, args.rows)
    size_mb = (storage / name).stat().st_size / 2**20
    process, url = start_moto()
    try:
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        base = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="tests.settings",
            DPPORTAL_DATA_DIR=str(folder),
            DPPORTAL_STORAGE_DIR=str(storage),
        )
        s3 = dict(
            base,
            DPPORTAL_S3_BUCKET=bucket,
            DPPORTAL_S3_ENDPOINT_URL=url,
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench-secret",
            AWS_EC2_METADATA_DISABLED="true",
        )
        import boto3

        boto3.client("s3", endpoint_url=url, region_name="us-east-1", **_keys()).create_bucket(
            Bucket=bucket
        )
        results = []
        local_copy = (storage / name).read_bytes()
        results.append(("-", "baseline (imports only)", run("baseline", name, base)))
        results.append(("s3", "keep (upload)", run("keep", name, s3)))
        (storage / name).write_bytes(local_copy)  # keep moved it into the bucket
        for mode, label in (("read", "read 2 columns in batches"), ("download", "download")):
            results.append(("local", label, run(mode, name, base)))
            results.append(("s3", label, run(mode, name, s3)))
    finally:
        process.terminate()
        process.wait(timeout=10)
    print(f"\nParquet file: {args.rows:,} rows x 4 columns, {size_mb:.1f} MB\n")
    print("(file MB/s: the file's size over the seconds; the read fetches 2 of 4 columns)\n")
    print(f"{'store':<6} {'operation':<28} {'seconds':>8} {'file MB/s':>10} {'peak RSS MB':>12}")
    for store, label, result in results:
        rate = f"{size_mb / result['seconds']:.1f}" if store != "-" else "-"
        print(
            f"{store:<6} {label:<28} {result['seconds']:>8.2f} {rate:>10} "
            f"{result['peak_mb']:>12.0f}"
        )


def _keys() -> dict:
    return {"aws_access_key_id": "bench", "aws_secret_access_key": "bench-secret"}


if __name__ == "__main__":
    main()
