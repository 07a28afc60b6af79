"""MWEM is bit-for-bit what it was before mechanisms/mwem.py became the mechanisms/mwem package.

The hashes below were recorded from the pre-split single module (commit 1ec19b6): they pin the
behaviour across the refactor. Each configuration runs on the demo Adult file with
``seeded_source``; a release hashes its files (synthetic table and measurements; not the
manifest, whose shape the catalogue owns and changed on purpose), a
direct ``mwem`` call (dense and factored) hashes the fitted joint, the measurements and a sample.
A deliberate change to MWEM's output must update these hashes and say why in its commit
(issue 14: whole-number columns and "(missing)" cells in the demo schema; issue 16: the adaptive
replace-one default plan and the QUICK_CELLS cap, then the add-remove default plan's noisy row
count; issue 44: no synthetic rows in "(missing)"/"(other)" cells the noisy counts do not
support, then the pairs inside a workload's 3-way marginals among the selectable queries,
which changes the one configuration with a 3-way workload; then budget annealing in the
default plan, mechanisms.mwem.plan.RoundSchedule, with each round's ε in the budget record;
then the last round's consistent targets, mechanisms.mwem.fit.consistent_targets; then those
targets without their floor, mechanisms.mwem.fit.final_targets; then the last round's 20
passes of half steps, mechanisms.mwem.fit.refit; then the least-squares fit after the last
round, mechanisms.mwem.least_squares, which the paper's update skips).
"""

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mechanisms.catalogue import run_release
from mechanisms.mwem import mwem
from mechanisms.noise import seeded_source
from mechanisms.schema import Schema
from mechanisms.workload import expand_workload, marginals_spec

DEMO = Path(__file__).resolve().parents[2] / "demo"
FOUR = ["age", "sex", "race", "income"]
EIGHT = ["age", "workclass", "education", "marital-status", "relationship", "race", "sex", "income"]
RANGES = {
    "workload": {
        "queries": [
            {"type": "ranges", "column": "age"},
            {"type": "ranges", "column": "hours-per-week"},
            {"type": "marginals", "k": 2},
        ]
    }
}
RELEASES = {  # name: (columns, epsilon, neighbouring, params)
    "4col-eps0.1": (FOUR, 0.1, "replace-one", {}),
    "4col-eps1": (FOUR, 1.0, "replace-one", {}),
    "4col-eps10": (FOUR, 10.0, "replace-one", {}),
    "8col-eps0.1": (EIGHT, 0.1, "replace-one", {}),
    "8col-eps1": (EIGHT, 1.0, "replace-one", {}),
    "8col-eps10": (EIGHT, 10.0, "replace-one", {}),
    "ranges-eps1": (["age", "hours-per-week", "sex", "income"], 1.0, "replace-one", RANGES),
    "8col-paper-eps1": (EIGHT, 1.0, "replace-one", {"update": "paper"}),
    "paper-average-eps1": (FOUR, 1.0, "replace-one", {"update": "paper", "output": "average"}),
    "add-remove-eps1": (FOUR, 1.0, "add-remove", {"marginals": 3}),
}
HASHES = {  # re-recorded for issue 14 (whole-number age and hours, "(missing)" cells in the
    # demo schema), issue 16 (the adaptive replace-one plan) and issue 44 (structural cells the
    # noisy counts do not tell from zero; pairs inside 3-way marginals selectable; then the
    # default plan's budget annealing, whose budget record lists each round's ε, and the last
    # round's consistent targets; then the last round's targets without their floor,
    # mechanisms.mwem.fit.final_targets, and its 20 passes of half steps, fit.refit: every hash;
    # then the least-squares fit after the last round: every hash but the paper update's two;
    # then the direct runs' joint hashed to 1e-9, the same run: d3d3cd73fe9aa1df and
    # 9fde4b067259ab12 with numpy's AVX-512 kernels off, NPY_DISABLE_CPU_FEATURES)
    "4col-eps0.1": "b2fb0eb57fe7d0a6",
    "4col-eps1": "39e3e5d33c8b3a51",
    "4col-eps10": "98c036cc3594d9c3",
    "8col-eps0.1": "e2f1f6ceeddbf33a",
    "8col-eps1": "e2ed7a23a22d3c0b",
    "8col-eps10": "d205a8b952188465",
    "8col-paper-eps1": "9e353df3a5551475",
    "add-remove-eps1": "da79ecaa750a0807",
    "paper-average-eps1": "1be9dd86be5b2d6d",
    "ranges-eps1": "38269f8c9cced8a4",
    "direct-dense=False": "7306522e6f63beac",
    "direct-dense=True": "1c8a663b5c3050ab",
}


def adult():
    with gzip.open(DEMO / "adult.csv.gz") as f:
        return pd.read_csv(f), Schema.load(DEMO / "adult_schema.json")


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def release_hash(name) -> str:
    columns, epsilon, neighbouring, params = RELEASES[name]
    data, schema = adult()
    output = run_release(
        "mwem",
        data,
        schema,
        columns=columns,
        epsilon=epsilon,
        neighbouring=neighbouring,
        params=params,
        rng=seeded_source(11),
    )
    names = sorted(output.files)
    return digest(*(output.files[f] for f in names))  # the files; the manifest is the catalogue's


def direct_hash(dense: bool) -> str:
    data, schema = adult()
    shape = schema.domain_shape(FOUR)
    workload = expand_workload(marginals_spec(2), FOUR, shape, {"age"})
    rng = seeded_source(12)
    result = mwem(schema.encode(data, FOUR), shape, workload, epsilon=1.0, dense=dense, rng=rng)
    measured = [dict(m, query=m["query"].describe(FOUR)) for m in result.measurements]
    return digest(
        # to 1e-9: numpy's AVX-512 kernels (exp, log) differ from its AVX2 ones in the last
        # bits, so the joint's raw bytes depend on the processor (the measurements, budget,
        # trace and sample do not)
        np.round(result.distribution.to_dense(), 9).tobytes(),
        json.dumps([measured, result.budget, result.trace], default=str).encode(),
        result.distribution.sample(result.n, rng).tobytes(),
    )


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_a_seeded_release_is_unchanged(name):
    assert release_hash(name) == HASHES[name]


@pytest.mark.parametrize("dense", [False, True])
def test_a_seeded_direct_run_is_unchanged(dense):
    assert direct_hash(dense) == HASHES[f"direct-dense={dense}"]


if __name__ == "__main__":  # prints the current hashes: PYTHONPATH=. python <this file>
    for key in sorted(RELEASES):
        print(f"    {key!r}: {release_hash(key)!r},")
    for dense in (False, True):
        print(f"    'direct-dense={dense}': {direct_hash(dense)!r},")
