"""Ingest speed and memory: our streaming ingest against bare pyarrow.csv.read_csv, same file, same run.

Generates a CSV of ROWS x 10 columns (5 integer, 3 decimal, 2 categorical text), then runs each
contender in its own child process (so peak memory is that process's own ru_maxrss):

- pyarrow read_csv: `pyarrow.csv.read_csv(path)`, the whole table in memory (the reference);
- ours, full: `ingest.scan_file` (sha256, NUL and UTF-8 checks) + `ingest.ingest_text`
  (format detection, streaming parse, validation, profile, Parquet copy), i.e. ingest of a file
  on disk (the web upload does the scan while the bytes arrive instead);
- ours, parse only: `ingest.ingest_text` with the scan already done (as after an upload);
- release read: `release_engine.load_columns`-style read of 2 columns from the Parquet copy.

Goals (issue 8): ours within 2x of read_csv; peak memory under 1 GB.

    .venv/bin/python benchmarks/ingest_speed.py            # 10^6 rows (~60 MB)
    .venv/bin/python benchmarks/ingest_speed.py --long     # also 10^7 rows (~600 MB)
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
mode, path, out = sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
import pyarrow.csv, pyarrow.parquet
from dpportal import ingest
start = time.perf_counter()
if mode == "reference":
    rows = pyarrow.csv.read_csv(path).num_rows
elif mode == "ours-full":
    rows = ingest.ingest_text(path, ingest.scan_file(path), out, suffix=".csv").row_count
elif mode == "ours-parse":
    scan = ingest.scan_file(path)
    start = time.perf_counter()
    rows = ingest.ingest_text(path, scan, out, suffix=".csv").row_count
elif mode == "parquet-2-columns":
    rows = pyarrow.parquet.read_table(out, columns=["i0", "s0"]).to_pandas().shape[0]
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak, "rows": rows}))
"""

MODES = [
    ("pyarrow read_csv (reference)", "reference"),
    ("ours: scan + ingest", "ours-full"),
    ("ours: ingest after upload scan", "ours-parse"),
    ("release read: 2 columns of Parquet", "parquet-2-columns"),
]


def write_csv(path: Path, rows: int, seed: int = 0) -> None:
    """ROWS x 10 columns, written in chunks (benchmark data only)."""
    rng = np.random.default_rng(seed)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    chunk = 500_000
    with pa_csv.CSVWriter(
        path,
        pa.schema(
            [(f"i{k}", pa.int64()) for k in range(5)]
            + [(f"f{k}", pa.float64()) for k in range(3)]
            + [(f"s{k}", pa.string()) for k in range(2)]
        ),
    ) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            columns = [rng.integers(0, 100_000, n) for _ in range(5)]
            columns += [np.round(rng.normal(50, 15, n), 3) for _ in range(3)]
            columns += [words[rng.integers(0, len(words), n)] for _ in range(2)]
            names = [f"i{k}" for k in range(5)] + [f"f{k}" for k in range(3)] + ["s0", "s1"]
            writer.write_table(pa.table(dict(zip(names, columns, strict=True))))


def run(mode: str, path: Path, out: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO), mode, str(path), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


def bench(rows: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as folder:
        path, out = Path(folder) / "data.csv", Path(folder) / "copy.parquet"
        t0 = time.perf_counter()
        write_csv(path, rows)
        size_mb = path.stat().st_size / 2**20
        print(
            f"\n{rows:,} rows x 10 columns, {size_mb:,.0f} MB CSV "
            f"(generated in {time.perf_counter() - t0:.1f} s); median of {repeats} runs\n"
        )
        runs = {mode: [] for _label, mode in MODES}
        for _ in range(repeats):  # interleaved, so a busy moment hits every contender alike
            for _label, mode in MODES:
                runs[mode].append(run(mode, path, out))
        assert all(r["rows"] == rows for mode_runs in runs.values() for r in mode_runs), runs
        results = {
            mode: (
                statistics.median(r["seconds"] for r in mode_runs),
                max(r["peak_mb"] for r in mode_runs),
            )
            for mode, mode_runs in runs.items()
        }
        reference = results["reference"][0]
        print(f"| {'contender':<36} | {'seconds':>8} | {'x read_csv':>10} | {'peak RSS MB':>11} |")
        print(f"|{'-' * 38}|{'-' * 10}|{'-' * 12}|{'-' * 13}|")
        for label, mode in MODES:
            seconds, peak = results[mode]
            print(f"| {label:<36} | {seconds:8.2f} | {seconds / reference:10.2f} | {peak:11.0f} |")
        print(f"\nParquet copy: {out.stat().st_size / 2**20:,.0f} MB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10**6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long", action="store_true", help="also 10^7 rows (about 600 MB)")
    args = parser.parse_args()
    bench(args.rows, args.repeats)
    if args.long:
        bench(10**7, 1)


if __name__ == "__main__":
    main()
