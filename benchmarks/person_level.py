"""Accuracy cost of person-level privacy: k = 1, 2, 5, 10 rows per person against row level.

Two tables where one person has several rows:
- statsmodels' `modechoice` (Greene's travel-mode data, bundled with statsmodels): 210
  travellers ("individual"), exactly 4 rows each (one per mode); histogram of mode x
  generalised cost (4 x 10 cells).
- a documented simulation of clinic visits: 2000 patients, Geometric(0.3) visits (1, 2, ...) each
  (capped at 40; mean about 3.3, a long tail), each visit in one of 5 departments (the
  patient's preferred one with probability 0.6) and the patient's age band (6 bands);
  histogram of department x age band (30 cells). Seed 7.

For each, the perturbed histogram (add-remove, epsilon = 1) at row level (the unit is one row:
a person with m rows is protected only at m x epsilon) and at person level with k = 1, 2, 5, 10
(every person protected at epsilon). Error: total variation distance between the released
histogram (noisy counts clipped at 0, renormalised) and the true histogram of ALL rows, so it
counts both the noise and the bias of dropping rows; mean over REPS releases (seeded sources:
figures only, not private). "kept" is the share of rows bounding keeps.

    nice -n 10 .venv/bin/python benchmarks/person_level.py
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import statsmodels.api as sm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms import Schema, run_release  # noqa: E402
from mechanisms.noise import seeded_source  # noqa: E402

EPSILON, REPS, KS = 1.0, 200, (1, 2, 5, 10)


def modechoice() -> tuple[pd.DataFrame, dict]:
    data = sm.datasets.modechoice.load_pandas().data
    table = pd.DataFrame(
        {"pid": data["individual"].astype(int), "mode": data["mode"].astype(int).astype(str)}
    )
    table["cost"] = data["gc"]
    columns = [
        {"name": "mode", "type": "categorical", "categories": ["1", "2", "3", "4"]},
        {"name": "cost", "type": "numeric", "lower": 0, "upper": 300, "bins": 10},
    ]
    return table, {"columns": columns}


def clinic() -> tuple[pd.DataFrame, dict]:
    gen = np.random.default_rng(7)
    patients = 2000
    visits = np.minimum(gen.geometric(0.3, patients), 40)  # 1, 2, ... visits
    pid = np.repeat(np.arange(patients), visits)
    favourite = np.repeat(gen.integers(0, 5, patients), visits)
    other = gen.integers(0, 5, len(pid))
    department = np.where(gen.random(len(pid)) < 0.6, favourite, other)
    age = np.repeat(gen.integers(0, 6, patients), visits)
    table = pd.DataFrame(
        {"pid": pid, "dept": [f"d{d}" for d in department], "age": [f"a{a}" for a in age]}
    )
    columns = [
        {"name": "dept", "type": "categorical", "categories": [f"d{d}" for d in range(5)]},
        {"name": "age", "type": "categorical", "categories": [f"a{a}" for a in range(6)]},
    ]
    return table, {"columns": columns}


def tvd(release_counts: np.ndarray, truth: np.ndarray) -> float:
    clipped = np.maximum(release_counts, 0).astype(float)
    total = clipped.sum()
    released = clipped / total if total > 0 else np.full(len(clipped), 1 / len(clipped))
    return 0.5 * float(np.abs(released - truth / truth.sum()).sum())


def mean_error(table: pd.DataFrame, schema: Schema, k: int | None) -> tuple[float, float]:
    errors, kept = [], 1.0
    columns = schema.resolve_columns()
    truth = Schema.from_dict({"columns": [schema.column(c).to_dict() for c in columns]})
    exact = truth.cell_counts(table, columns).ravel()
    for rep in range(REPS):
        out = run_release(
            "perturbed_histogram",
            table if k is not None else table.drop(columns=["pid"]),
            schema if k is not None else truth,
            epsilon=EPSILON,
            neighbouring="add-remove",
            rng=seeded_source(rep),
            max_rows_per_person=k,
        )
        noisy = pd.read_csv(io.BytesIO(out.files["noisy_counts.csv"]))["noisy_count"].to_numpy()
        errors.append(tvd(noisy, exact))
        if k is not None:
            kept = 1 - out.custodian["rows_dropped_by_bounding"] / len(table)
    return float(np.mean(errors)), kept


def main() -> None:
    print(f"perturbed histogram, add-remove, epsilon = {EPSILON}, {REPS} releases per cell")
    print(f"{'table':<12} {'unit':<22} {'protects a person at':<22} {'kept':>6} {'TVD':>8}")
    for name, build in (("modechoice", modechoice), ("clinic sim", clinic)):
        table, document = build()
        most = int(table["pid"].value_counts().max())
        person_doc = {
            "columns": [{"name": "pid", "role": "person_id"}, *document["columns"]],
            "max_rows_per_person": 1,
        }
        schema = Schema.from_dict(person_doc)
        error, _ = mean_error(table, Schema.from_dict(document), None)
        at = f"epsilon x {most} (max rows)"
        print(f"{name:<12} {'row':<22} {at:<22} {1:>6.0%} {error:>8.4f}")
        for k in KS:
            error, kept = mean_error(table, schema, k)
            unit = f"person, k = {k}"
            print(f"{name:<12} {unit:<22} {'epsilon':<22} {kept:>6.0%} {error:>8.4f}")


if __name__ == "__main__":
    main()
