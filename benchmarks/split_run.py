"""10^9 rows counted with the work split as a cluster splits it (issue 45 item 3): per worker.

The 10^9-row table of benchmarks/scale_data.py (100 Parquet files of 10^7 rows; the 10^8-row
table's files hard-linked ten times, so the counts are exactly ten times its counts) is split
into W shares of whole files, as a cluster of W workers splits it (Dask gives each worker whole
files or row groups; Spark and a warehouse split by file as well). Each share is tallied by
DuckDB in a fresh process, one after the other, exactly as one worker would tally it
(`mechanisms.counting.tally_table` on that share's files, DPPORTAL_DUCKDB_MEMORY_LIMIT applied);
the asking process then adds the W arrays of counts. Printed per W: the slowest worker's
seconds, the mean, the largest worker's peak MB (its ru_maxrss: DuckDB's buffers included),
and the seconds a cluster of W free machines would take (the slowest share plus the addition).
The sum of the shares is checked against W = 1's counts, cell for cell.

The shares run one after the other on this machine's two shared cores, so each worker's
seconds are what one core of a free machine would take at best; network and scheduling are not
in them (docs/scale.md states what a real cluster adds).

    nice -n 15 .venv/bin/python benchmarks/split_run.py --rows 1000000000 --workers 1 2 4
"""

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import counting_scale  # noqa: E402
from engine_overhead import KINDS, engine_tallies  # noqa: E402
from scale_data import table_folder  # noqa: E402

from mechanisms.counting import TableSource, tally_table  # noqa: E402


def shares(rows: int, workers: int) -> list[list[str]]:
    """The table's files dealt to `workers` shares of whole files, as even as files allow."""
    files = sorted(str(p) for p in table_folder(rows).glob("*.parquet"))
    if workers > len(files):
        raise SystemExit(f"{rows:,} rows are {len(files)} files: fewer than {workers} workers")
    return [files[w::workers] for w in range(workers)]


def tally_share(rows: int, kind: str, files: list[str], out: str) -> dict:
    """One worker's tally of its files: seconds and peak MB; its counts saved to `out`."""
    start = time.perf_counter()
    source = TableSource(str(table_folder(rows)), files=tuple(files))
    answers = [tally_table(source, t, "duckdb") for t in engine_tallies(rows, kind)]
    seconds = time.perf_counter() - start
    np.savez(out, *answers)
    return {
        "seconds": seconds,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def split_run(rows: int, kind: str, workers: int, folder: Path) -> tuple[dict, list[np.ndarray]]:
    """Every share tallied in its own process; the per-worker figures and the summed counts."""
    figures, parts = [], []
    for number, files in enumerate(shares(rows, workers)):
        out = folder / f"share-{workers}-{number}.npz"
        figures.append(
            counting_scale.in_subprocess("--share", rows, kind, out, *files, script=__file__)
        )
        with np.load(out) as saved:
            parts.append([saved[name] for name in saved.files])
    start = time.perf_counter()
    totals = [sum(arrays[1:], arrays[0]) for arrays in zip(*parts, strict=True)]
    add_seconds = time.perf_counter() - start
    seconds = [f["seconds"] for f in figures]
    return {
        "slowest": max(seconds),
        "mean": sum(seconds) / len(seconds),
        "peak_mb": max(f["peak_mb"] for f in figures),
        "cluster": max(seconds) + add_seconds,
        "files": [len(s) for s in shares(rows, workers)],
    }, totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10**9)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS))
    parser.add_argument("--share", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.share:
        rows, kind, out, *files = args.share
        print(json.dumps(tally_share(int(rows), kind, files, out)))
        return
    table_folder(args.rows)
    print(f"{args.rows:,} rows, DuckDB per share, shares run one after the other")
    print(
        f"{'kind':<13} {'workers':>7} {'files':>9} {'slowest s':>9} {'mean s':>7} "
        f"{'peak MB':>8} {'cluster s':>9} {'speed-up':>8} {'sum = W 1':>9}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        for kind in args.kinds:
            reference, one = None, None
            for workers in args.workers:
                figures, totals = split_run(args.rows, kind, workers, Path(scratch))
                if reference is None:
                    reference, one = totals, figures["cluster"]
                same = all(np.array_equal(a, b) for a, b in zip(totals, reference, strict=True))
                print(
                    f"{kind:<13} {workers:>7} {'/'.join(map(str, sorted(set(figures['files'])))):>9} "
                    f"{figures['slowest']:>9.1f} {figures['mean']:>7.1f} {figures['peak_mb']:>8.0f} "
                    f"{figures['cluster']:>9.1f} {one / figures['cluster']:>8.2f} {str(same):>9}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
