"""Event tests (docs/testing-privacy.md section 1) on PERSON-level neighbours for the range
counts and the summary statistics, at the REQUESTED budget.

Unit: one person with K = 4 rows. A person-level release bounds each person to K rows and runs
the mechanism under row-level add-remove at `persons.mechanism_budget` (the budget
`run_release` uses; `test_the_release_runs_at_the_audited_budget` checks that). Each test builds
the mechanism at that budget and draws from two datasets that differ in ALL K rows of one
person (add-remove: the person is there or not; replace-one: the person's K rows stand at
another point). The claim is a function of the requested (epsilon, delta) only. Broken twin of
every case: `PersonLevel.group_size` returns 1 (calibrated for one row instead of K), which
the same test must reject. Family-wise false-alarm rate alpha = 1e-6 per audit (union bound).

- Range counts (tree, path_tree pure at epsilon = 1; tree, path_tree, mn12 Gaussian at
  (8, 1e-6); mn12 has no pure form and mn12_laplace is refused at person level): the plan's
  own `measure` on the worst pair of support points, projected to the privacy-loss statistic
  (tests/mechanisms/range_count_audit.py), 2 x 10^4 draws per side (tree 10^4, 256 cells).
  Gaussian claims: (8, 1e-6) and the (eps1, delta1) that the REQUESTED rho
  promises; the twin spends K^2 = 16 times rho.
- Statistics (count, sum, mean's sum piece, quantile's selection over 3 candidates): the
  statistic's own noise step, 10^5 draws per side; claims: epsilon (count, sum), epsilon / 2
  (mean's sum piece), epsilon / 4 (the median's selection), as in test_statistics_privacy.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mechanisms import persons, statistics
from mechanisms.catalogue import run_release
from mechanisms.noise import RecordingSource, seeded_source
from mechanisms.schema import Schema
from mechanisms.statistics import Computer, parse_request
from tests.mechanisms.privacy_audit import audit_neighbours, threshold_grid
from tests.mechanisms.range_count_audit import claims, sample_release
from tests.mechanisms.test_statistics_privacy import Batch

K, ALPHA, N = 4, 1e-6, 100_000
PERSON = persons.PersonLevel("pid", K)
RELATIONS = ["add-remove", "replace-one"]


def _one_row_twin(monkeypatch):
    """The broken twin: every person-level budget calibrated for one row instead of K."""
    monkeypatch.setattr(persons.PersonLevel, "group_size", lambda self, neighbouring: 1)


# ---------------------------------------------------------------- range counts

# mn12 has no pure form (mn12_laplace needs delta > 0 and is refused at person level)
RANGE_CASES = [
    ("tree", 1.0, 0.0, 10_000),
    ("path_tree", 1.0, 0.0, 20_000),
    ("tree", 8.0, 1e-6, 10_000),
    ("path_tree", 8.0, 1e-6, 20_000),
    ("mn12", 8.0, 1e-6, 20_000),
]


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True], ids=["honest", "twin"])
@pytest.mark.parametrize("neighbouring", RELATIONS)
@pytest.mark.parametrize(
    "mechanism, epsilon, delta, draws",
    RANGE_CASES,
    ids=[f"{c[0]}-{'gauss' if c[2] else 'pure'}" for c in RANGE_CASES],
)
def test_range_counts_at_person_level(
    mechanism, epsilon, delta, draws, neighbouring, broken, monkeypatch
):
    if broken:
        _one_row_twin(monkeypatch)
    x, x2, grid = sample_release(
        mechanism,
        epsilon=epsilon,
        delta=delta,
        neighbouring=neighbouring,
        draws=draws,
        seed=70,
        person=PERSON,
    )
    results = [
        audit_neighbours(x, x2, epsilon=e, delta=d, alpha=ALPHA, thresholds=grid, discrete=False)
        for e, d in claims(mechanism, epsilon, delta)
    ]
    lines = "; ".join(r.summary() for r in results)
    assert all(r.passed for r in results) != broken, lines


# ---------------------------------------------------------------- statistics

SCHEMA = {
    "columns": [
        {"name": "pid", "role": "person_id"},
        {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 4},
        {"name": "g", "type": "categorical", "categories": ["a", "b"], "unknown": "reject"},
    ],
    "max_rows_per_person": K,
}
ROW_SCHEMA = Schema.from_dict({"columns": SCHEMA["columns"][1:]})
# D: one person with K + 2 rows at the upper bound (bounding keeps K); D': without them
D = pd.DataFrame({"pid": ["p"] * (K + 2), "x": [100.0] * (K + 2), "g": ["a"] * (K + 2)})
D2 = D.iloc[:0]


def _row_budget(epsilon: float, neighbouring: str) -> float:
    return persons.mechanism_budget(PERSON, epsilon, 0.0, neighbouring)[0]


def _computer(data, stat, epsilon, seed):
    kept, _ = persons.bound_contributions(data, PERSON, seeded_source(seed))
    request = parse_request(ROW_SCHEMA, {"stat": [stat], "by": ["g"]}, epsilon=epsilon,
                            neighbouring="add-remove")  # fmt: skip
    return Computer(kept, ROW_SCHEMA, request, "add-remove", Batch(seed, N))


def _count(data, epsilon, seed):
    counts, scale = _computer(data, "count", epsilon, seed).noisy_counts(epsilon)
    return counts[:, 0], scale


def _sum(data, epsilon, seed):
    run = _computer(data, "sum:x", epsilon, seed)
    sums, scale = run.noisy_sums(run.values("x"), 0.0, 100.0, epsilon)
    return sums[:, 0], scale


def _mean_sum_piece(data, epsilon, seed):
    run = _computer(data, "mean:x", epsilon, seed)
    groups = [[v - 50 for v in g] for g in run.values("x")]
    sums, scale = run.noisy_sums(groups, -50.0, 50.0, epsilon / 2)
    return sums[:, 0], scale


STEPS = {"count": (_count, 1.0, 1.0, True), "sum": (_sum, 1.0, 1.0, False),
         "mean": (_mean_sum_piece, 2.0, 0.5, False)}  # fmt: skip


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True], ids=["honest", "twin"])
@pytest.mark.parametrize("step", STEPS)
def test_count_sum_and_mean_at_person_level(step, broken, monkeypatch):
    """D has one person with K rows (after bounding) at x = 100, D' does not (add-remove)."""
    if broken:
        _one_row_twin(monkeypatch)
    noisy, epsilon, share, integer = STEPS[step]
    row_epsilon = _row_budget(epsilon, "add-remove")
    x, scale = noisy(D, row_epsilon, 11)
    x2, _ = noisy(D2, row_epsilon, 12)
    exact = {"count": K, "sum": 100.0 * K, "mean": 50.0 * K}[step]
    grid = threshold_grid(exact, 0.0, scale, integer=integer)
    result = audit_neighbours(x, x2, epsilon=epsilon * share, thresholds=grid,
                              discrete=integer, alpha=ALPHA)  # fmt: skip
    assert result.passed != broken, result.summary()


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True], ids=["honest", "twin"])
def test_quantile_selection_at_person_level(broken, monkeypatch):
    epsilon = 4.0  # the median's share per selection: epsilon / 4 = 1
    if broken:
        _one_row_twin(monkeypatch)
    monkeypatch.setattr(statistics, "CANDIDATES", 3)  # power; the guarantee holds for any K
    statistics._quantile_scores.cache_clear()
    row_epsilon = _row_budget(epsilon, "add-remove")
    picks = []
    for data, seed in ((D, 15), (D2, 16)):
        run = _computer(data, "median:x", row_epsilon, seed)
        values = run.values("x")[0]
        picks.append(np.asarray(run.select(values, ROW_SCHEMA.column("x"), 0.5, row_epsilon / 4)))
    statistics._quantile_scores.cache_clear()
    result = audit_neighbours(*picks, epsilon=epsilon / 4, thresholds=np.arange(3), alpha=ALPHA)
    assert result.passed != broken, result.summary()


@pytest.mark.parametrize(
    "mechanism, params, delta",
    [
        ("statistics", {"stat": ["count"], "by": ["g"]}, 0.0),
        ("range_count", {"mechanism": "tree", "random_boxes": 2}, 1e-6),
    ],
)
@pytest.mark.parametrize("neighbouring", RELATIONS)
def test_the_release_runs_at_the_audited_budget(mechanism, params, delta, neighbouring):
    """The real person-level release spends exactly the row-level budget the audits use."""
    rng = RecordingSource(seeded_source(3))
    out = run_release(
        mechanism,
        D,
        Schema.from_dict(SCHEMA),
        epsilon=2.0,
        delta=delta,
        neighbouring=neighbouring,
        columns=["x", "g"] if mechanism == "statistics" else ["x"],
        params=params,
        rng=rng,
    )
    row_epsilon, _, relation = persons.mechanism_budget(PERSON, 2.0, delta, neighbouring)
    assert relation == "add-remove"
    assert out.manifest["accounting"]["per_row"]["epsilon"] <= row_epsilon
    if mechanism == "statistics":
        assert rng.noise_calls()[0].scale == statistics.count_scale(row_epsilon, "add-remove")
