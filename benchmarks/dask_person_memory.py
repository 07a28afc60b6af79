"""Person-level bounding on a Dask cluster: seconds and the workers' peak memory, before and after.

A synthetic Parquet folder of ROWS rows in 8 files (row groups of 2^17 rows, so a piece of the
Dask engine is a file or up to 2^20 rows of one): a numeric x (1% NaN), a category c, and a
person ID pid drawn uniformly from ROWS / 4 people (about 4 rows each, spread over every file),
1% of them missing. Each size runs, in this process, against the cluster DPPORTAL_DASK_SCHEDULER
names (its workers must import this checkout):

- "plain": the histogram of x and c without bounding (`CellTally`), the reference;
- "before": bounded to k = 3 rows per person by `mechanisms/counting/dask_engine.py` as of
  `--before` (read from git, uploaded to the workers as the module dask_engine_before);
- "after": the same by the working tree's engine.

Before each run every worker's peak resident memory is reset (`/proc/self/clear_refs`), after it
read (VmHWM); before and after run twice, in turns (plain, after, before, before, after), each
figure the least of its two; printed: seconds, the largest worker's peak and the sum over workers (MB), and the
ratio of each to "plain" at that size; "same" says whether before and after counted alike.
With --after-only, "before" is not run (sizes where it would take too long or too much memory).

    DPPORTAL_DASK_SCHEDULER=tcp://127.0.0.1:8786 nice -n 10 .venv/bin/python \\
        benchmarks/dask_person_memory.py --rows 1000000 10000000 [--before COMMIT]
"""

import argparse
import importlib
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from distributed import Client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mechanisms.counting import TableSource, dask_engine  # noqa: E402
from mechanisms.counting.bounding import BoundedTally  # noqa: E402
from mechanisms.counting.tally import CellTally  # noqa: E402
from mechanisms.schema import Schema  # noqa: E402

BEFORE = "ca611dd"  # main before person-level bounding in buckets
FILES, ROW_GROUP, K = 8, 1 << 17, 3
SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
            {"name": "c", "type": "categorical", "categories": ["a", "b", "c"]},
        ]
    }
).accepting()


def write_folder(rows: int, folder: Path) -> None:
    rng = np.random.default_rng(rows)
    step = -(-rows // FILES)
    for part in range(FILES):
        size = min(step, rows - part * step)
        pid = pd.array(rng.integers(0, max(1, rows // 4), size), dtype="Int64")
        pid[rng.random(size) < 0.01] = pd.NA
        x = rng.normal(50, 30, size)
        x[rng.random(size) < 0.01] = np.nan
        frame = pd.DataFrame({"x": x, "c": rng.choice(["a", "b", "c", "d"], size), "pid": pid})
        table = pa.Table.from_pandas(frame, preserve_index=False)
        pq.write_table(table, folder / f"part-{part}.parquet", row_group_size=ROW_GROUP)


def engine_before(client: Client, commit: str, folder: Path):
    """dask_engine as of `commit`, as the module dask_engine_before here and on the workers."""
    source = subprocess.run(
        ["git", "show", f"{commit}:mechanisms/counting/dask_engine.py"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = folder / "dask_engine_before.py"
    path.write_text(source)
    client.upload_file(str(path))  # importable on every worker
    sys.path.insert(0, str(folder))
    return importlib.import_module("dask_engine_before")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def peak_mb() -> float:
    status = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def measured(client: Client, run) -> tuple[float, float, float, np.ndarray]:
    client.run(reset_peak)
    started = time.perf_counter()
    counts = run()
    seconds = time.perf_counter() - started
    peaks = list(client.run(peak_mb).values())
    return seconds, max(peaks), sum(peaks), counts


def least(first, second):
    """Each figure's least of two runs (the second in the other order: a worker's peak after
    a reset starts from what it still holds)."""
    if second is None:
        return first
    return (*(min(a, b) for a, b in zip(first[:3], second[:3], strict=True)), first[3])


def in_order(results: dict) -> dict:
    return {name: results[name] for name in ("plain", "before", "after") if name in results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--after-only", action="store_true", help="run plain and after only")
    args = parser.parse_args()
    client = Client(dask_engine._address(None), set_as_default=False)
    old = engine_before(client, args.before, Path(tempfile.mkdtemp()))
    workers = len(client.scheduler_info()["workers"])
    cells = CellTally(SCHEMA, ("x", "c"))
    bounded = BoundedTally(cells, "pid", K, "0123456789abcdef" * 2)
    before = "not run" if args.after_only else args.before
    print(f"{workers} workers; k = {K}; before = {before}, after = the working tree")
    print(f"{'rows':>12} {'run':>7} {'seconds':>8} {'max MB':>7} {'sum MB':>7} "
          f"{'s ratio':>7} {'MB ratio':>8} {'same':>5}")  # fmt: skip
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as folder:
            write_folder(rows, Path(folder))
            source = TableSource(folder)
            runs = {
                "plain": partial(dask_engine.tally_on_dask, source, cells),
                "after": partial(dask_engine.tally_on_dask, source, bounded),
                "before": partial(old.tally_on_dask, source, bounded),
            }
            if args.after_only:
                del runs["before"]
            results = {name: measured(client, run) for name, run in runs.items()}
            again = {
                name: measured(client, runs[name]) for name in ("before", "after") if name in runs
            }
        results = {name: least(results[name], again.get(name)) for name in results}
        results, plain = in_order(results), results["plain"]
        same = "before" not in results or np.array_equal(results["before"][3], results["after"][3])
        for name, (seconds, largest, total, _) in results.items():
            print(
                f"{rows:>12,} {name:>7} {seconds:>8.1f} {largest:>7.0f} {total:>7.0f} "
                f"{seconds / plain[0]:>7.2f} {largest / plain[1]:>8.2f} "
                f"{('-' if args.after_only else 'yes') if same else 'NO':>5}"
            )


if __name__ == "__main__":
    main()
