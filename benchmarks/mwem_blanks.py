"""Blanks in MWEM's synthetic tables (issue 44, item 3): the share of rows with an empty value.

    nice -n 10 .venv/bin/python benchmarks/mwem_blanks.py [--role tune|held-out|all]
        [--tables flights,...] [--eps 0.1,1] [--seeds 3] [--min-rows 10000]

For each table of benchmarks/heldout.py (schemas with the default "missing": "cell", so every
column has a "(missing)" cell and every categorical column an "(other)" cell), the release of
the portal (run_release("mwem"), default workload and plan) at each ε; per table: the true
share of rows with a blank, the synthetic share with the rule (`mwem.structural`, the
default; another ZERO_LEVEL with --level for the rule applied after the fit, while the fit
itself empties the cells at the default level, as the release does) and without it (the same
measurements, draw for draw, fitted and sampled with no rule: the broken twin), and 2-way TVD
of each against the data. Blank shares and TVD are
means over the seeds; "complete" tables have no blank in the released columns.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import heldout  # noqa: E402
from mwem_peers import tvd  # noqa: E402

from mechanisms.mwem import mwem  # noqa: E402
from mechanisms.mwem.structural import (  # noqa: E402
    ZERO_LEVEL,
    structural_cells,
    unsupported_cells,
    zero_cells,
)
from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.schema import MISSING_LABEL, NumericColumn  # noqa: E402
from mechanisms.workload import expand_workload, marginals_spec  # noqa: E402


def releases(
    name: str, eps: float, seed: int, level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(true codes, synthetic codes with the rule, without it): MWEM fitted as the portal runs
    it (default workload and plan; the rule passed in, as the release does, and applied after),
    and fitted again from the same seed without the rule (the same measurements: the rule
    changes only the last fit), each sampled from the same random state."""
    frame, schema = heldout.load(name)
    columns = schema.resolve_columns()
    shape = schema.domain_shape(columns)
    numeric = {c for c in columns if isinstance(schema.column(c), NumericColumn)}
    workload = expand_workload(marginals_spec(min(2, len(columns))), columns, shape, numeric)
    codes = schema.encode(frame, columns)
    cells = structural_cells(schema, columns)
    rng = seeded_source(seed)
    result = mwem(codes, shape, workload, epsilon=eps, rng=rng, structural=cells)
    zero_cells(result.distribution, unsupported_cells(result.measurements, shape, cells, level))
    before = mwem(codes, shape, workload, epsilon=eps, rng=seeded_source(seed))
    state = copy.deepcopy(rng)
    return (
        codes,
        result.distribution.sample(result.n, rng),
        before.distribution.sample(result.n, state),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default="tune")
    parser.add_argument("--tables", default="")
    parser.add_argument("--eps", default="0.1,1")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--min-rows", type=int, default=10_000)
    parser.add_argument("--level", type=float, default=ZERO_LEVEL, help="the rule's ZERO_LEVEL")
    args = parser.parse_args()
    names = args.tables.split(",") if args.tables else heldout.names(args.role)
    print(
        f"{'table':13} {'role':8} {'rows':>9} {'eps':>5} {'true':>7} {'rule':>7} {'before':>7} "
        f"{'TVD2 rule':>9} {'before':>7} {'ratio':>6}"
    )
    for name in names:
        frame, schema = heldout.load(name)
        columns = schema.resolve_columns()
        if len(frame) < args.min_rows:
            continue
        shape = list(schema.domain_shape(columns))
        blank = [
            [i for i, label in enumerate(schema.axis_labels(c)) if label == MISSING_LABEL]
            for c in columns
        ]

        def blank_share(codes, blank=blank):
            hit = np.zeros(len(codes), dtype=bool)
            for a, cells in enumerate(blank):
                hit |= np.isin(codes[:, a], cells)
            return hit.mean()

        for eps in (float(e) for e in args.eps.split(",")):
            shares, tvds = {"rule": [], "before": []}, {"rule": [], "before": []}
            for seed in range(args.seeds):
                true, *synthetic = releases(name, eps, seed, args.level)
                for key, codes in zip(("rule", "before"), synthetic, strict=True):
                    shares[key].append(blank_share(codes))
                    tvds[key].append(tvd(codes, true, shape, 2))
            after, before = np.mean(tvds["rule"]), np.mean(tvds["before"])
            print(
                f"{name:13} {heldout.role(name):8} {len(frame):>9,} {eps:>5g} "
                f"{blank_share(true):>7.2%} {np.mean(shares['rule']):>7.2%} "
                f"{np.mean(shares['before']):>7.2%} {after:>9.4f} {before:>7.4f} "
                f"{after / before:>6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
