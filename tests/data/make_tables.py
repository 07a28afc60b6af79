"""Write the binary contingency tables the MWEM tests use, from documented log-linear models.

Each table is the expected cell counts of a log-linear model over binary attributes, rounded to
whole numbers that add up to n (largest remainders; ties go to the earlier cell). No random draw
is involved, so the files are a pure function of the parameters below and this script rewrites
them byte for byte:

    python tests/data/make_tables.py          # rewrites tests/data/loglinear*.csv
    python tests/data/make_tables.py --check  # exits 1 if a file differs

A model is log mu(x) = c + sum_i main[i] x_i + sum_S inter[S] prod_{i in S} x_i, x in {0, 1}^d.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# name: (rows n, main effects, interactions {attributes: log-odds ratio})
MODELS = {
    # 6 attributes, 1,841 rows: two strongly linked blocks {a, b, c} and {d, e}, bridged by a-d,
    # and f tied to c; one 3-way term so that 3-way marginals carry information 2-way ones lack.
    "loglinear6": (
        1841,
        [0.3, -0.5, 0.0, 0.8, -0.2, 0.4],
        {
            (0, 1): 1.2,
            (1, 2): -0.9,
            (3, 4): 1.5,
            (0, 3): 0.6,
            (2, 5): 0.7,
            (0, 1, 2): 0.5,
        },
    ),
    # 8 attributes, 665 rows (many empty cells): a chain a-b-c-d, pairs e-f and g-h, and a-e.
    "loglinear8": (
        665,
        [-0.4, 0.2, -1.0, 0.5, 0.0, -0.6, 0.9, -0.3],
        {
            (0, 1): 1.4,
            (1, 2): 1.1,
            (2, 3): -1.2,
            (4, 5): 1.6,
            (6, 7): 1.3,
            (0, 4): 0.8,
        },
    ),
}


def expected_probabilities(d: int, main, interactions) -> np.ndarray:
    """Cell probabilities of the model, in row-major order of the 2^d cells."""
    cells = np.array(list(itertools.product((0, 1), repeat=d)))
    log_mu = cells @ np.asarray(main, dtype=float)
    for attrs, value in interactions.items():
        log_mu += value * cells[:, list(attrs)].prod(axis=1)
    weights = np.exp(log_mu - log_mu.max())
    return weights / weights.sum()


def whole_counts(n: int, probs: np.ndarray) -> np.ndarray:
    """n * probs rounded to integers that sum to n (largest remainder; stable ties)."""
    exact = n * probs
    counts = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: n - counts.sum()]] += 1
    return counts


def table_text(name: str) -> str:
    """The CSV text of one table: one row per cell (attributes a, b, ...), last column count."""
    n, main, interactions = MODELS[name]
    d = len(main)
    counts = whole_counts(n, expected_probabilities(d, main, interactions))
    columns = [chr(ord("a") + i) for i in range(d)]
    lines = [",".join([*columns, "count"])]
    for cell, count in zip(itertools.product((0, 1), repeat=d), counts, strict=True):
        lines.append(",".join([*map(str, cell), str(count)]))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for name in MODELS:
        path = HERE / f"{name}.csv"
        text = table_text(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(
            f"out of date: {', '.join(stale)}; run python tests/data/make_tables.py",
            file=sys.stderr,
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
