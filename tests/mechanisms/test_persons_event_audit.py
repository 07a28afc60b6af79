"""Event tests (docs/testing-privacy.md section 1) on PERSON-level neighbours for the range
counts, the summary statistics and MWEM's selection step, at the REQUESTED budget.

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
  (tests/mechanisms/range_count_audit.py, releases drawn in blocks), 10^5 draws per side.
  Gaussian claims: (8, 1e-6) and the (eps1, delta1) that the REQUESTED rho
  promises; the twin spends K^2 = 16 times rho.
- Statistics (count, sum, mean's sum piece, the median's estimate and interval ends, each a
  selection over 3 candidates): the statistic's own noise step, 10^5 draws per side; claims:
  epsilon (count, sum), epsilon / 2 (mean's sum piece), 95% and 5% of epsilon (the median's
  estimate and its interval's two ends, picked together), as in test_statistics_privacy.py.
- MWEM's selection (exponential mechanism, first round of a one-round release at epsilon = 5):
  the real release's arguments and Gumbel scale are captured, the scores computed on D and on
  D' (K rows of one person added in, or moved between, the cells of largest visible loss), and
  10^5 selections per side drawn at that scale; claim: the documented selection share of the
  request, epsilon x (1 - ADD_REMOVE_INIT_FRACTION) x SELECT_FRACTION (person level runs MWEM
  under row-level add-remove).
"""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest

from mechanisms import persons, statistics
from mechanisms.catalogue import run_release
from mechanisms.mwem import measure
from mechanisms.noise import RecordingSource, seeded_source
from mechanisms.schema import Schema
from mechanisms.statistics import Computer, parse_request, quantiles
from tests.mechanisms.privacy_audit import audit_neighbours, threshold_grid
from tests.mechanisms.range_count_audit import claims, sample_release
from tests.mechanisms.test_statistics_privacy import Batch, pair_index

K, ALPHA, N = 4, 1e-6, 100_000
PERSON = persons.PersonLevel("pid", K)
RELATIONS = ["add-remove", "replace-one"]


def _one_row_twin(monkeypatch):
    """The broken twin: every person-level budget calibrated for one row instead of K."""
    monkeypatch.setattr(persons.PersonLevel, "group_size", lambda self, neighbouring: 1)


# ---------------------------------------------------------------- range counts

# mn12 has no pure form (mn12_laplace needs delta > 0 and is refused at person level)
RANGE_CASES = [
    ("tree", 1.0, 0.0, N),
    ("path_tree", 1.0, 0.0, N),
    ("tree", 8.0, 1e-6, N),
    ("path_tree", 8.0, 1e-6, N),
    ("mn12", 8.0, 1e-6, N),
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
        {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 4, "missing": "reject"},
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
    sums, grid = run.noisy_sums(run.values("x"), 0.0, 100.0, epsilon)
    return sums[:, 0], grid.scale(epsilon)


def _mean_sum_piece(data, epsilon, seed):
    run = _computer(data, "mean:x", epsilon, seed)
    groups = [[v - 50 for v in g] for g in run.values("x")]
    sums, grid = run.noisy_sums(groups, -50.0, 50.0, epsilon / 2)
    return sums[:, 0], grid.scale(epsilon / 2)


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


QUANTILE_STEPS = {
    # requested epsilon, claim (its documented share), the selection at the row-level share
    "estimate": (4 / 3, 0.75, lambda run, v, spec, e: run.select(v, spec, 0.5, e[0])),
    "interval ends": (4.0, 0.25, lambda run, v, spec, e: pair_index(run, v, spec, 0.5, e[1])),
}


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True], ids=["honest", "twin"])
@pytest.mark.parametrize("step", QUANTILE_STEPS)
def test_quantile_selections_at_person_level(step, broken, monkeypatch):
    """The median's estimate (POINT_SHARE, 75% of epsilon) and its interval's ends (25%, one
    pick among the pairs of 3 candidates), each an exponential mechanism; the ends' public
    rank offset set to 0 (power;
    the guarantee holds for any public offset), as in test_statistics_privacy.py."""
    epsilon, share, select = QUANTILE_STEPS[step]
    if broken:
        _one_row_twin(monkeypatch)
    for name in ("CANDIDATES", "END_CANDIDATES"):  # power; the guarantee holds for any K
        monkeypatch.setattr(quantiles, name, 3)
    monkeypatch.setattr(quantiles, "quantile_rank_margin", lambda *a: 0.0)
    row_epsilon = _row_budget(epsilon, "add-remove")
    shares = statistics.quantile_shares(row_epsilon)
    picks = []
    for data, seed in ((D, 15), (D2, 16)):
        run = _computer(data, "median:x", row_epsilon, seed)
        values = run.values("x")[0]
        picks.append(np.asarray(select(run, values, ROW_SCHEMA.column("x"), shares)))
    result = audit_neighbours(*picks, epsilon=epsilon * share, thresholds=np.arange(9),
                              alpha=ALPHA)  # fmt: skip
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


# ---------------------------------------------------------------- MWEM's selection

mwem_plan = importlib.import_module("mechanisms.mwem.plan")
mwem_release = importlib.import_module("mechanisms.mwem.release")
MWEM_SCHEMA = {
    "columns": [
        {"name": "pid", "role": "person_id"},
        *[{"name": c, "type": "categorical", "categories": ["u", "v"]} for c in "abc"],
    ],
    "max_rows_per_person": K,
}


def _first_selection(monkeypatch, neighbouring, epsilon):
    """The real person-level MWEM release's first selection: its arguments and Gumbel scale.

    D (after bounding): 12 + 5 [a = b] - 5 [a = c] rows in each cell (a, b, c), so the pairs
    (a, b) and (a, c) score alike and K rows added in one cell move their scores K apart
    each way; each cell has one person with K + 2 rows (bounding keeps K) and single-row ones.
    """
    rows = []
    for a, b, c in np.ndindex(2, 2, 2):
        kept = 12 + 5 * (a == b) - 5 * (a == c)
        people = [f"{a}{b}{c}-big"] * (K + 2) + [f"{a}{b}{c}-{i}" for i in range(kept - K)]
        rows += [(pid, *("uv"[v] for v in (a, b, c))) for pid in people]
    data = pd.DataFrame(rows, columns=["pid", "a", "b", "c"])
    seen = {}
    real = mwem_release.select_query

    def capture(*args, **kwargs):
        seen.setdefault("args", args)
        return real(*args, **kwargs)

    monkeypatch.setattr(mwem_release, "select_query", capture)
    source = RecordingSource(seeded_source(8))
    run_release("mwem", data, Schema.from_dict(MWEM_SCHEMA), epsilon=epsilon,
                neighbouring=neighbouring, params={"rounds": 1}, rng=source)  # fmt: skip
    picks = [c for c in source.noise_calls() if c.primitive == "report_noisy_max"]
    assert len(picks) == 1
    return seen["args"], picks[0].scale


def _scores(args, true):
    model, _, workload, n, _, eps_measure, marginal_l1, _, _ = args
    return measure._selection_scores(model, true, workload, n, eps_measure, marginal_l1)


def _loss(pair, scale):
    """Largest |log P_D(i) - log P_D'(i)| of the exponential mechanism at the recorded Gumbel
    scale over the indices i that both sides pick with probability >= 1e-3."""
    logp = [s / scale - np.logaddexp.reduce(s / scale) for s in pair]
    seen = (logp[0] > np.log(1e-3)) & (logp[1] > np.log(1e-3))
    return float(np.abs(logp[0] - logp[1])[seen].max(initial=0.0))


def _worst_pair(args, neighbouring, scale):
    """Scores on D and D' chosen, from the exact answers, the public model and the recorded
    scale before any sampling, to be the pair of largest visible loss (`_loss`): add-remove:
    D (the captured bounded table) and D + one person with K rows in one cell; replace-one:
    D + that person's K rows in one cell against D + them in another."""
    true = args[1]
    codes = true.columns.T
    base = _scores(args, true)
    moved = [
        _scores(args, measure.TrueAnswers(np.vstack([codes, np.tile(c, (K, 1))]), true.shape))
        for c in np.ndindex(*true.shape)
    ]
    pairs = [(base, s) for s in moved]
    if neighbouring == "replace-one":
        pairs = [(s, t) for s in moved for t in moved]
    return max(pairs, key=lambda pair: _loss(pair, scale))


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True], ids=["honest", "twin"])
@pytest.mark.parametrize("neighbouring", RELATIONS)
def test_mwem_selection_at_person_level(neighbouring, broken, monkeypatch):
    """Claim: the round's documented selection share of the requested epsilon (one round,
    add-remove split at row level): epsilon x (1 - ADD_REMOVE_INIT_FRACTION) x SELECT_FRACTION."""
    if broken:
        _one_row_twin(monkeypatch)
    epsilon = K * 1.25
    args, scale = _first_selection(monkeypatch, neighbouring, epsilon)
    scores, scores2 = _worst_pair(args, neighbouring, scale)
    change = K if neighbouring == "add-remove" else 2 * K  # scores: sensitivity 1 per row
    assert len(scores) >= 2 and 0 < np.abs(scores2 - scores).max() <= change + 1e-9
    noise = seeded_source(31).gumbel(scale, (2, N, len(scores)))
    x, x2 = np.argmax(scores + noise[0], axis=1), np.argmax(scores2 + noise[1], axis=1)
    claim = epsilon * (1 - mwem_plan.ADD_REMOVE_INIT_FRACTION) * mwem_plan.SELECT_FRACTION
    result = audit_neighbours(x, x2, epsilon=claim, thresholds=np.arange(len(scores)), alpha=ALPHA)
    assert result.passed != broken, result.summary()
