"""Speed and memory of the perturbed histogram against bare numpy.histogramdd, same run.

10^7 rows x 2 numeric columns, 100 x 100 = 10^4 cells. The release includes encoding, secure
discrete Laplace noise (OpenDP) on every cell, clipping, and sampling + decoding 10^7 synthetic
rows. Goal: <= 3x the time of histogramdd, peak extra memory <= 2x the input array.

    .venv/bin/python benchmarks/histogram_speed.py [--rows N] [--bins B] [--repeats R]
"""

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms import Schema, perturbed_histogram, secure_source  # noqa: E402


def best_time(function, repeats):
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def peak_bytes(function):
    gc.collect()
    tracemalloc.start()
    function()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10**7)
    parser.add_argument("--bins", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    points = np.random.default_rng(1).beta(2, 5, size=(args.rows, 2))  # benchmark data only
    frame = pd.DataFrame({"a": points[:, 0], "b": points[:, 1]})
    schema = Schema.from_dict(
        {
            "columns": [
                {"name": c, "type": "numeric", "lower": 0, "upper": 1, "bins": args.bins}
                for c in "ab"
            ]
        }
    )
    columns = ["a", "b"]

    def reference():
        np.histogramdd(points, bins=(args.bins, args.bins), range=[(0, 1), (0, 1)])

    def counts_only():
        schema.cell_counts(frame, columns)

    def release():
        perturbed_histogram(frame, schema, columns=columns, epsilon=1.0, rng=secure_source())

    exact = np.histogramdd(points, bins=(args.bins, args.bins), range=[(0, 1), (0, 1)])[0]
    assert np.array_equal(schema.cell_counts(frame, columns), exact), "counts disagree"

    input_bytes = points.nbytes
    print(
        f"rows={args.rows:,}  cells={args.bins**2:,}  input array={input_bytes / 2**20:.0f} MiB"
        f"  (best of {args.repeats})"
    )
    print(f"{'step':<44}{'seconds':>9}{'x histogramdd':>15}{'peak MiB':>10}{'x input':>9}")
    base = best_time(reference, args.repeats)
    rows = [
        ("numpy.histogramdd (reference)", base, peak_bytes(reference)),
        (
            "schema.cell_counts (encode + bincount)",
            best_time(counts_only, args.repeats),
            peak_bytes(counts_only),
        ),
        (
            "perturbed_histogram (counts+noise+sample)",
            best_time(release, args.repeats),
            peak_bytes(release),
        ),
    ]
    for name, seconds, peak in rows:
        print(
            f"{name:<44}{seconds:>9.3f}{seconds / base:>15.2f}"
            f"{peak / 2**20:>10.0f}{peak / input_bytes:>9.2f}"
        )
    ratio = rows[-1][1] / base
    print(f"release / histogramdd time ratio: {ratio:.2f} (goal <= 3)")
    print(f"release peak memory / input array: {rows[-1][2] / input_bytes:.2f} (goal <= 2)")


if __name__ == "__main__":
    main()
