"""MWEM beyond memory (paper Sec. 4): 1,000 binary attributes (domain 2^1000), random 3-way marginals.

Synthetic records with planted structure: attributes come in blocks of five; each attribute copies
its block's hidden bit, flipped with probability 0.2. The workload is `--queries` random 3-way
marginals (public randomness, seeded), so only the few "planted" queries that hit two
attributes of one block carry signal. Reports wall time, the factored model's groups, and the
workload error (½‖q(model) − q(data)‖₁ / n per marginal) of MWEM and of the uniform model.
RSS MB is the process's peak resident memory so far (it can only grow from row to row).
Its 1-way marginals are exactly uniform by construction, so the uniform start is hard to beat
there and spending budget on a noisy 1-way start (init "auto" at large ε) costs mean TVD.

    .venv/bin/python benchmarks/mwem_scaling.py [--attributes 1000] [--rows 10000] [--queries 3000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mechanisms.mwem import FactoredDistribution, mwem  # noqa: E402
from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.workload import expand_workload, random_marginals_spec  # noqa: E402


def planted_records(attributes: int, rows: int, seed: int) -> np.ndarray:
    rng = seeded_source(seed)
    hidden = rng.integers(2, (rows, attributes // 5 + 1))
    block = np.arange(attributes) // 5
    flips = rng.uniform((rows, attributes)) < 0.2
    return (hidden[:, block] ^ flips).astype(np.int64)


def workload_error(model: FactoredDistribution, codes: np.ndarray, workload):
    """Mean TVD between model and data over the workload's marginals, over the planted ones
    (two attributes from one block), and the max."""
    errors, planted = [], []
    for q in workload:
        planted.append(len({a // 5 for a in q.attrs}) < len(q.attrs))
        flat = np.ravel_multi_index(tuple(codes[:, a] for a in q.attrs), (2,) * len(q.attrs))
        true = np.bincount(flat, minlength=2 ** len(q.attrs)) / len(codes)
        errors.append(0.5 * np.abs(model.marginal(q.attrs).ravel() - true).sum())
    errors = np.array(errors)
    return float(errors.mean()), float(errors[np.array(planted)].mean()), float(errors.max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attributes", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--eps", default="1,10")
    args = parser.parse_args()
    codes = planted_records(args.attributes, args.rows, seed=1)
    columns = [f"b{i}" for i in range(args.attributes)]
    spec = random_marginals_spec(columns, 3, args.queries, seeded_source(2))
    workload = expand_workload(spec, columns, (2,) * args.attributes, set())
    shape = (2,) * args.attributes
    uniform = FactoredDistribution.independent([np.ones(2)] * args.attributes)
    print(
        f"domain 2^{args.attributes}, {args.rows} rows, {len(workload)} random 3-way marginals; "
        "uniform model's workload TVD: mean {:.4f}, planted {:.4f}, max {:.4f}".format(
            *workload_error(uniform, codes, workload)
        )
    )
    print(
        f"{'eps':>5} {'init':>5} {'T':>4} {'time s':>7} {'RSS MB':>8} {'groups':>7} "
        f"{'largest':>8} {'mean TVD':>9} {'planted':>8} {'max TVD':>8}"
    )
    for eps in (float(e) for e in args.eps.split(",")):
        for init in (None, 0.0):
            start = time.perf_counter()
            result = mwem(
                codes, shape, workload, epsilon=eps, init_fraction=init, rng=seeded_source(3)
            )
            seconds = time.perf_counter() - start
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            groups = result.distribution.groups()
            label = "auto" if init is None else f"{init:g}"
            print(
                f"{eps:>5g} {label:>5} {result.rounds:>4} {seconds:>7.1f} {peak:>8.0f} "
                f"{len(groups):>7} {max(g.probs.size for g in groups):>8} "
                "{:>9.4f} {:>8.4f} {:>8.4f}".format(
                    *workload_error(result.distribution, codes, workload)
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
