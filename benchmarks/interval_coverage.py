"""Coverage of the published 95% intervals, and of the planner's ε, on the Adult sample.

Table 1: for each mechanism and ε, the share of intervals that hold the true value over many
releases (the release's own functions, the secure source; the smoothed histogram's sampler
seeded), next to the same intervals 0.7× too narrow, and the mean half-width in rows.
Table 2: the planner's ε for a target ±k rows at 95% (from public quantities only) and the
share of counts that the release at that ε puts within ±k of the truth.

    nice -n 10 .venv/bin/python benchmarks/interval_coverage.py [--draws 400]
"""

import argparse
import math
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms import accuracy, histogram, planner, plans  # noqa: E402
from mechanisms.mwem import mwem  # noqa: E402
from mechanisms.noise import secure_source, seeded_source  # noqa: E402
from mechanisms.release_request import PlanInputs  # noqa: E402
from mechanisms.schema import Schema  # noqa: E402
from mechanisms.workload import expand_workload, marginals_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Schema.from_dict(__import__("json").loads((ROOT / "demo/adult_schema.json").read_text()))
DATA = pd.read_csv(ROOT / "tests/data/adult_sample.csv", dtype=str)
COLUMNS = ["age", "sex", "income"]
# A plan's inputs over SCHEMA's COLUMNS at pure epsilon under replace-one.
plan_inputs = partial(
    PlanInputs, schema=SCHEMA, columns=COLUMNS, delta=0.0, neighbouring="replace-one"
)
MWEM_PARAMS = {"workload": marginals_spec(2)}


def cover(lower, upper, truth, centre):
    inside = (lower <= truth) & (truth <= upper)
    nl, nu = centre - 0.7 * (centre - lower), centre + 0.7 * (upper - centre)
    return inside.mean(), ((nl <= truth) & (truth <= nu)).mean(), float(np.mean(upper - centre))


def perturbed_rows(draws):
    counts = SCHEMA.cell_counts(DATA, COLUMNS).ravel()
    rows = []
    for neighbouring in ("replace-one", "add-remove"):
        for epsilon in (0.05, 0.1, 0.5, 1.0, 2.0):
            scale = histogram.count_sensitivity(neighbouring) / epsilon
            noisy = histogram.perturb_counts(
                np.tile(counts, (draws * 25, 1)),
                epsilon=epsilon,
                neighbouring=neighbouring,
                rng=secure_source(),
            )
            lower, upper = accuracy.count_intervals(noisy, scale)
            rows.append(
                (
                    f"perturbed {neighbouring}",
                    epsilon,
                    noisy.size,
                    *cover(lower, upper, counts, noisy),
                )
            )
    return rows


def smoothed_rows(draws):
    counts = SCHEMA.cell_counts(DATA, ["age", "sex"]).ravel()
    n, m, rows = int(counts.sum()), counts.size, []
    for epsilon in (1.0, 5.0, 20.0):
        k = plans.smoothed_default_rows(n, m, epsilon)
        mix = histogram.min_admissible_mix(epsilon, n, m, k)
        rng = seeded_source(int(epsilon * 10))
        released = np.array(
            [np.bincount(rng.smoothed_cells(counts, mix, k), minlength=m) for _ in range(draws * 5)]
        )
        est, lower, upper = accuracy.smoothed_intervals(released, rows=k, mix=mix, n=n, cells=m)
        label = f"smoothed (rows {k}, mix {mix:.2f})"
        rows.append((label, epsilon, released.size, *cover(lower, upper, counts, est)))
    return rows


def mwem_setup():
    shape = SCHEMA.domain_shape(COLUMNS)
    codes = SCHEMA.encode(DATA, COLUMNS)
    workload = expand_workload(marginals_spec(2), COLUMNS, shape, {"age"})
    return shape, codes, workload


def mwem_measured(epsilon, draws, shape, codes, workload):
    """(true, noisy, lower, upper) of every measured count, pooled over `draws` runs."""
    true, noisy, lower, upper = [], [], [], []
    source = secure_source()
    for _ in range(draws):
        result = mwem(codes, shape, workload, epsilon=epsilon, rng=source)
        for record in result.measurements:
            attrs = record["query"].attrs
            dims = tuple(shape[a] for a in attrs)
            flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), dims)
            true.extend(np.bincount(flat, minlength=math.prod(dims)))
            noisy.extend(record["noisy_answer"])
            lower.extend(record["ci_lower"])
            upper.extend(record["ci_upper"])
    return tuple(np.array(v) for v in (true, noisy, lower, upper))


def mwem_rows(draws):
    shape, codes, workload = mwem_setup()
    rows = []
    for epsilon in (0.1, 0.5, 2.0):
        true, noisy, lower, upper = mwem_measured(epsilon, draws, shape, codes, workload)
        rows.append(("mwem measurements", epsilon, true.size, *cover(lower, upper, true, noisy)))
    return rows


def planner_rows(draws):
    n = len(DATA)
    shape, codes, workload = mwem_setup()
    out = []
    for target in (10, 50, 200):
        perturbed = planner.plan_epsilon(
            planner.PlanRequest("perturbed_histogram", SCHEMA, tuple(COLUMNS), {}, n), target
        ).epsilon
        if perturbed is None:  # a target at least an average count: the planner refuses it
            out.append(("perturbed", target, None, float("nan")))
            continue
        counts = SCHEMA.cell_counts(DATA, COLUMNS).ravel()
        noisy = histogram.perturb_counts(
            np.tile(counts, (draws * 25, 1)),
            epsilon=perturbed,
            neighbouring="replace-one",
            rng=secure_source(),
        )
        out.append(
            ("perturbed", target, perturbed, float(np.mean(np.abs(noisy - counts) <= target)))
        )
        eps = planner.plan_epsilon(
            planner.PlanRequest("mwem", SCHEMA, tuple(COLUMNS), MWEM_PARAMS, n), target
        ).epsilon
        if eps is None:
            out.append(("mwem rounds", target, None, float("nan")))
            continue
        result = [
            mwem(codes, shape, workload, epsilon=eps, rng=secure_source())
            for _ in range(draws // 4)
        ]
        errors = []
        for run in result:
            start = len(shape) if run.budget["initial_one_way"] else 0
            for record in run.measurements[start:]:  # the rounds' measurements
                attrs = record["query"].attrs
                dims = tuple(shape[a] for a in attrs)
                flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), dims)
                errors.extend(
                    np.abs(
                        np.array(record["noisy_answer"])
                        - np.bincount(flat, minlength=math.prod(dims))
                    )
                )
        out.append(("mwem rounds", target, eps, float(np.mean(np.array(errors) <= target))))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=400)
    draws = parser.parse_args().draws
    print(f"Adult sample ({len(DATA)} rows), columns {COLUMNS}; 95% intervals")
    print(
        f"{'mechanism':38} {'eps':>6} {'intervals':>10} {'coverage':>9} {'0.7x twin':>9} {'half-width':>10}"
    )
    for row in perturbed_rows(draws) + smoothed_rows(draws) + mwem_rows(draws // 4):
        name, eps, size, cov, twin, half = row
        print(f"{name:38} {eps:>6g} {size:>10,} {cov:>9.4f} {twin:>9.4f} {half:>10.1f}")
    print()
    print(f"{'planner: counts within +-k at 95%':38} {'k':>6} {'eps':>10} {'share within':>12}")
    for name, target, eps, share in planner_rows(draws):
        print(f"{name:38} {target:>6} {eps if eps else '-':>10} {share:>12.4f}")


if __name__ == "__main__":
    main()
