"""When MWEM's default plan should measure the full table (plan.measures_joint), on parts of
public tables: the full table forced against the rounds' default, 2-/3-way TVD over 4 seeds.

    .venv/bin/python benchmarks/mwem_full_table.py

Tables and TVD from benchmarks/mwem_peers.py (run it once first: it writes the encoded tables
to /tmp/mwem_peers). Each row takes 3 or 4 columns of a table; "noise/n" is the rule's quantity,
the full table's expected L1 noise (cells · E|Z| at scale 2/ε, replace-one) over n. docs/mwem.md
("The full table") has the figures and why the threshold is 0.5.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import mwem_peers  # noqa: E402

from mechanisms.mwem.measure import expected_abs_noise  # noqa: E402
from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.workload import expand_workload  # noqa: E402

plan = importlib.import_module("mechanisms.mwem.plan")
release = importlib.import_module("mechanisms.mwem.release")
PARTS = {  # table: column positions of each part
    "anes96": [(0, 1, 2), (6, 7, 8)],
    "fair": [(0, 1, 2), (6, 7, 8), (0, 2, 4, 6)],
    "seattle": [(0, 1, 2), (3, 4, 5), (2, 3, 4, 5)],
    "randhie": [(0, 1, 3), (3, 4, 6), (5, 6, 7), (0, 3, 4, 6)],
    "sftemps": [(0, 1, 2)],
}
SEEDS = 4


def mean_tvd(codes, shape, eps, full_table: bool) -> tuple[float, float]:
    """Mean 2-/3-way TVD of the default release, with the full table forced on or off."""
    rule = lambda *args: full_table  # noqa: E731
    plan.measures_joint = release.measures_joint = rule
    columns = [f"c{i}" for i in range(len(shape))]
    spec = {"queries": [{"type": "marginals", "k": 2}, {"type": "marginals", "k": 3}]}
    workload = expand_workload(spec, columns, tuple(shape), set())
    runs = []
    for seed in range(SEEDS):
        rng = seeded_source(seed)
        result = release.mwem(codes, tuple(shape), workload, epsilon=eps, rng=rng)
        synthetic = result.distribution.sample(len(codes), rng)
        runs.append([mwem_peers.tvd(synthetic, codes, shape, k) for k in (2, 3)])
    two, three = np.mean(runs, axis=0)
    return float(two), float(three)


def main() -> None:
    print(
        f"{'table':8} {'columns':12} {'cells':>6} {'n':>7} {'eps':>4} {'noise/n':>8}  "
        f"{'default TVD2/3':>15}  {'full TVD2/3':>13}  ratio"
    )
    for table, parts in PARTS.items():
        full, _ = mwem_peers.prepare(table)
        whole_shape = mwem_peers.TABLES[table][0]()[1]
        for part in parts:
            codes = np.ascontiguousarray(np.load(full)[:, part])
            shape = [whole_shape[c] for c in part]
            cells, n = int(np.prod(shape)), len(codes)
            for eps in (0.1, 0.3, 1, 3):
                ratio = cells * expected_abs_noise(2 / eps) / n
                if ratio > 10:
                    continue
                d2, d3 = mean_tvd(codes, shape, eps, False)
                j2, j3 = mean_tvd(codes, shape, eps, True)
                print(
                    f"{table:8} {str(part):12} {cells:>6} {n:>7} {eps:>4} {ratio:>8.2f}  "
                    f"{d2:>7.4f} {d3:>7.4f}  {j2:>6.4f} {j3:>6.4f}  {j2 / d2:.2f} {j3 / d3:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
