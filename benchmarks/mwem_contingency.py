"""The MWEM paper's contingency-table experiment (Sec. 3.2) on binary contingency tables.

The paper's tables (Czech 2^6, Rochdale 2^8, Mildew 2^6) may not ship with this repository; they
are read from ../shared/data/mwem_*_table.csv when that folder is beside the checkout. Otherwise
(or with --repo-tables) the experiment runs on the repository's own log-linear tables,
tests/data/loglinear6.csv and loglinear8.csv (tests/data/README.md).

For each table and k-way marginal workload, the relative entropy KL(true || synthetic) of MWEM's
distribution and of the non-adaptive baseline that measures every k-way marginal at the same ε,
averaged over seeds. Expected (paper): KL falls as ε grows; at small ε selecting queries beats
measuring them all.

    .venv/bin/python benchmarks/mwem_contingency.py [--seeds 5] [--eps 0.1,0.5,1,5,10] [--k 2,3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mechanisms.mwem import measure_all, mwem  # noqa: E402
from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.workload import expand_workload, marginals_spec  # noqa: E402

DATA = REPO.parent / "shared" / "data"  # optional: the paper's tables, not shipped
TABLES = ("czech", "rochdale", "mildew")
REPO_DATA = REPO / "tests" / "data"
REPO_TABLES = ("loglinear6", "loglinear8")


def load_table(name: str) -> tuple[np.ndarray, tuple[int, ...], list[str]]:
    """Encoded records of a paper table (../shared/data) or of a repository table (tests/data)."""
    if name in REPO_TABLES:
        table = pd.read_csv(REPO_DATA / f"{name}.csv")
        columns = list(table.columns[:-1])
        codes = np.repeat(table[columns].to_numpy(np.int64), table["count"].to_numpy(), axis=0)
        return codes, (2,) * len(columns), columns
    return load_paper_table(name)


def load_paper_table(name: str) -> tuple[np.ndarray, tuple[int, ...], list[str]]:
    """Encoded records; each column's domain size comes from the published table.

    (Czech's table writes levels as y/n and its records as 0/1, so records are coded by the
    sorted order of their own labels, after checking there are as many as the table has.)
    """
    table = pd.read_csv(DATA / f"mwem_{name}_table.csv", dtype=str)
    records = pd.read_csv(DATA / f"mwem_{name}_records.csv", dtype=str)
    columns = list(records.columns)
    levels = [sorted(records[c].unique()) for c in columns]
    assert [len(lv) for lv in levels] == [table[c].nunique() for c in columns], name
    codes = np.stack(
        [
            pd.Categorical(records[c], categories=lv).codes
            for c, lv in zip(columns, levels, strict=True)
        ],
        axis=1,
    ).astype(np.int64)
    return codes, tuple(len(lv) for lv in levels), columns


def relative_entropy(codes: np.ndarray, shape, estimate: np.ndarray) -> float:
    """KL(true || estimate) in nats, the paper's measure."""
    true = np.zeros(shape)
    np.add.at(true, tuple(codes.T), 1)
    true = true / true.sum()
    mask = true > 0
    return float(np.sum(true[mask] * np.log(true[mask] / np.maximum(estimate[mask], 1e-300))))


def experiment(name: str, k: int, epsilon: float, seeds: int) -> tuple[float, float]:
    """Mean KL of MWEM and of measure-all over `seeds` runs."""
    codes, shape, columns = load_table(name)
    workload = expand_workload(marginals_spec(k), columns, shape, set())
    ours, baseline = [], []
    for seed in range(seeds):
        result = mwem(codes, shape, workload, epsilon=epsilon, rng=seeded_source(seed))
        ours.append(relative_entropy(codes, shape, result.distribution.to_dense()))
        fitted = measure_all(codes, shape, workload, epsilon=epsilon, rng=seeded_source(seed))
        baseline.append(relative_entropy(codes, shape, fitted.to_dense()))
    return float(np.mean(ours)), float(np.mean(baseline))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--eps", default="0.1,0.5,1,5,10")
    parser.add_argument("--k", default="2,3")
    parser.add_argument(
        "--repo-tables",
        action="store_true",
        help="use tests/data's tables even when ../shared/data is present",
    )
    args = parser.parse_args()
    tables = TABLES
    if args.repo_tables or not all((DATA / f"mwem_{n}_table.csv").exists() for n in TABLES):
        if not args.repo_tables:
            print(f"The MWEM paper's tables are not in {DATA}: running on tests/data's tables.")
        tables = REPO_TABLES
    epsilons = [float(e) for e in args.eps.split(",")]
    start = time.perf_counter()
    print(f"relative entropy KL(true || synthetic), mean of {args.seeds} seeds")
    print(f"{'table':10} {'k':>2} {'eps':>6} {'MWEM':>8} {'measure-all':>12} {'ratio':>6}")
    for name in tables:
        for k in (int(v) for v in args.k.split(",")):
            for eps in epsilons:
                ours, base = experiment(name, k, eps, args.seeds)
                print(f"{name:10} {k:>2} {eps:>6g} {ours:>8.4f} {base:>12.4f} {ours / base:>6.2f}")
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
