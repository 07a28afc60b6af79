"""Issue 43 item 2: DP bounds that cut off few values, with what they cut off stated before
anything is spent (mechanisms.public_bounds.estimate_bounds: a DP median, then a sparse-vector
scan outward from it on each side).

Privacy (docs/testing-privacy.md), every claim the REQUESTED epsilon:
- exact: the distribution of one scan's stop index, computed here from the discrete Laplace pmf
  (not from the module), on neighbouring count vectors; the largest log-ratio over all stop
  indices must stay within the requested epsilon less the median's 2 / scale. Twins, which must
  exceed it: counts that move both ways (replace-one run at the add-remove scales, i.e. without
  the group factor), and the count noise halved.
- sampled event test of the implementation: n = 100,000 stop indices per side, family-wise
  false-alarm rate alpha = 10^-6; twin: every discrete Laplace scale halved (sensitivity / 2).
- record and replay of the whole estimate on D and D' with the same randomness: the median's
  scores differ by at most 1, each scan's threshold input is the same, its counts differ by 0 or 1
  all in one direction, and a row above (below) the median changes only the upper (lower) scan.
- accounting: the recorded scales spend at most the requested epsilon.

Accuracy: the clamped share on ordinary and long-tailed columns of 3,000 rows, and the stated
bound checked against a table built to reach it (a few values far from all others).
"""

import math

import numpy as np
import pytest

from mechanisms.noise import RandomSource, RecordingSource, seeded_source
from mechanisms.public_bounds import (
    _first_at_or_below,
    bounds_grid,
    bounds_plan,
    estimate_bounds,
    scan_candidates,
)
from tests.mechanisms.privacy_audit import audit_neighbours

ALPHA = 1e-6
N_PER_SIDE = 100_000


# ---------------------------------------------------------------- exact stop-index distribution


def _below(scale: float, x: np.ndarray) -> np.ndarray:
    """P(Z <= x) for discrete Laplace Z of `scale`, integer x."""
    a = math.exp(-1 / scale)
    x = np.asarray(x)
    return np.where(x < 0, a ** np.abs(np.minimum(x, 0)) / (1 + a), 1 - a ** (x + 1) / (1 + a))


def stop_distribution(counts, threshold, threshold_scale, query_scale) -> np.ndarray:
    """P(the scan stops at index i) for each i, and P(no stop) last: the first i with
    counts[i] + nu_i <= threshold + rho, summed exactly over rho."""
    reach = int(60 * threshold_scale) + 20
    rho = np.arange(-reach, reach + 1)
    a = math.exp(-1 / threshold_scale)
    weight = (1 - a) / (1 + a) * a ** np.abs(rho)
    going, out = weight.copy(), []
    for count in counts:
        stop = _below(query_scale, threshold + rho - count)
        out.append(float(np.sum(going * stop)))
        going = going * (1 - stop)
    return np.array([*out, float(np.sum(going))])


def worst_log_ratio(plan, moves, factor=1.0) -> float:
    """Largest |log P_D(i) / P_D'(i)| over stop indices i and the given (counts, counts')."""
    worst = 0.0
    for counts, moved in moves:
        p, q = (
            stop_distribution(c, plan.threshold, plan.threshold_scale, plan.query_scale * factor)
            for c in (counts, moved)
        )
        worst = max(worst, float(np.max(np.abs(np.log(p) - np.log(q)))))
    return worst


def monotone_moves():
    """A row added beyond the first k candidates: those counts go up by one, the rest stay."""
    for base in range(0, 16):
        for k in range(1, 10):
            for rest in (0, base // 2, base):
                counts = np.array([base] * k + [rest] * 6)
                moved = counts.copy()
                moved[:k] += 1
                yield counts, moved


def two_way_moves():
    """Replace-one inside one scan: a row moves from beyond k candidates to beyond k + j."""
    for base in range(0, 16):
        for k in range(1, 6):
            counts = np.array([base + 1] * k + [base] * 3 + [0] * 3)
            moved = counts.copy()
            moved[:k] -= 1
            moved[k : k + 3] += 1
            yield counts, moved


@pytest.mark.parametrize("epsilon", [0.2, 1.0, 3.0])
def test_one_scan_stays_within_the_requested_epsilon_exactly(epsilon):
    """Add-remove: what the plan leaves for the scan after the median, checked exactly on 432
    monotone neighbour pairs; the twin with half the count noise exceeds the requested epsilon."""
    plan = bounds_plan(epsilon, "add-remove")
    left = epsilon - 2 / plan.median_scale  # the median's permute-and-flip loss, at most
    assert worst_log_ratio(plan, monotone_moves()) <= left + 1e-9
    assert worst_log_ratio(plan, monotone_moves(), factor=0.5) > epsilon


@pytest.mark.parametrize("epsilon", [0.2, 1.0, 3.0])
def test_replace_one_needs_the_group_factor(epsilon):
    """Counts that move both ways (a row replaced within one scan's reach): within epsilon at the
    replace-one plan (half the add-remove epsilon), beyond it at the add-remove plan (the twin:
    the sparse vector's monotone noise used for queries that are not monotone)."""
    honest = bounds_plan(epsilon, "replace-one")
    assert worst_log_ratio(honest, two_way_moves()) <= epsilon - 2 / honest.median_scale
    twin = bounds_plan(epsilon, "add-remove")
    assert worst_log_ratio(twin, two_way_moves()) > epsilon


# ---------------------------------------------------------------- the implementation, sampled


class Twin(RandomSource):
    """A broken source: every discrete Laplace scale times `factor` (sensitivity / 2 at 0.5)."""

    def __init__(self, seed, factor=1.0):
        self.inner, self.factor = seeded_source(seed), factor

    def add_discrete_laplace(self, values, scale):
        return self.inner.add_discrete_laplace(values, scale * self.factor)


def _stops(counts, plan, rng) -> np.ndarray:
    out = np.empty(N_PER_SIDE, dtype=np.int64)
    for i in range(N_PER_SIDE):
        at = _first_at_or_below(counts, plan, rng)
        out[i] = len(counts) if at is None else at
    return out


@pytest.mark.audit
@pytest.mark.parametrize("factor, honest", [(1.0, True), (0.5, False)])
def test_the_scan_event_test_at_the_requested_epsilon(factor, honest):
    """D: 6 counts at 6 then 3 (near the threshold 6 of epsilon = 1 add-remove), D': a row beyond
    the first 4. Events: the stop index's tails and points (probabilities >= 0.02 carry the
    largest exact ratio here: 0.73 honest, 1.44 for the twin)."""
    epsilon = 1.0
    plan = bounds_plan(epsilon, "add-remove")
    counts = np.array([6] * 4 + [3] * 6)
    moved = counts.copy()
    moved[:4] += 1
    samples = [_stops(c, plan, Twin(seed, factor)) for seed, c in ((51, counts), (52, moved))]
    result = audit_neighbours(
        *samples, epsilon=epsilon, thresholds=np.arange(len(counts) + 1), alpha=ALPHA
    )
    print(("honest" if honest else "twin scales / 2"), result.summary())
    assert result.passed == honest


# ---------------------------------------------------------------- record and replay


class InputRecorder(RandomSource):
    """A seeded source that also keeps what each noise call was given."""

    def __init__(self, seed):
        self.inner, self.inputs = seeded_source(seed), []

    def add_discrete_laplace(self, values, scale):
        self.inputs.append(("discrete_laplace", np.asarray(values).copy(), scale))
        return self.inner.add_discrete_laplace(values, scale)

    def permute_and_flip(self, scores, scale):
        self.inputs.append(("permute_and_flip", np.asarray(scores).copy(), scale))
        return self.inner.permute_and_flip(scores, scale)


def _replay(data, neighbouring="add-remove", seed=3):
    recorder = InputRecorder(seed)
    estimate_bounds(data, epsilon=1.0, neighbouring=neighbouring, rng=recorder)
    return recorder.inputs


# 1,000 rows at exactly 50 among 2,000: the DP median is 50 in every run here (its neighbours on
# the median grid, 49.9 and 50.1, score about 1,000 lower: e^-50 at this epsilon).
BULK = [*np.random.default_rng(1).normal(50, 10, 1000).round(1), *[50.0] * 1000]


@pytest.mark.parametrize("added, changed_scan", [(500.0, "upper"), (-400.0, "lower"), (50.0, None)])
def test_a_row_moves_one_scan_by_at_most_one_in_one_direction(added, changed_scan):
    """D' = D plus one row: the median's scores by at most 1; each scan's threshold the same; the
    scan on the row's side of the median (none if the row sits on it) by 0 or +1 per count, the
    other scan not at all (parallel composition). Same calls, same scales, same order."""
    d, d2 = _replay(BULK), _replay([*BULK, added])  # 50.0: a row exactly at the median
    assert [(k, s) for k, _v, s in d] == [(k, s) for k, _v, s in d2]
    kinds = [k for k, _v, _s in d]
    assert kinds == ["permute_and_flip"] + ["discrete_laplace"] * 4
    assert np.max(np.abs(d[0][1] - d2[0][1])) <= 1
    for scan, (threshold, counts) in (("lower", (1, 2)), ("upper", (3, 4))):
        assert np.array_equal(d[threshold][1], d2[threshold][1])
        moved = d2[counts][1] - d[counts][1]
        assert set(np.unique(moved)) <= {0, 1}
        assert moved.any() == (scan == changed_scan), scan


def test_replace_one_moves_each_scan_one_way_at_the_halved_plan():
    """Replace-one (a low row replaced by a high one): the lower scan's counts only go down, the
    upper's only up; the plan is the add-remove plan at epsilon / 2 (group privacy)."""
    d = _replay([*BULK, -400.0], "replace-one")
    d2 = _replay([*BULK, 500.0], "replace-one")
    assert set(np.unique(d2[2][1] - d[2][1])) <= {-1, 0} and (d2[2][1] != d[2][1]).any()
    assert set(np.unique(d2[4][1] - d[4][1])) <= {0, 1} and (d2[4][1] != d[4][1]).any()
    half = bounds_plan(0.5, "add-remove")
    assert [s for _k, _v, s in d] == [
        half.median_scale,
        *[half.threshold_scale, half.query_scale] * 2,
    ]


@pytest.mark.parametrize("epsilon", [0.01, 0.5, 2.0])
@pytest.mark.parametrize("neighbouring, group", [("add-remove", 1), ("replace-one", 2)])
def test_the_recorded_noise_spends_at_most_the_requested_epsilon(epsilon, neighbouring, group):
    """From the recorded scales alone: permute-and-flip 2 / scale (scores of sensitivity 1), each
    scan 1 / threshold scale + 1 / count scale (the two scans read disjoint rows: the larger
    counts), times the group factor of the relation."""
    recorder = RecordingSource(seeded_source(0))
    estimate_bounds(BULK, epsilon=epsilon, neighbouring=neighbouring, rng=recorder)
    calls = recorder.noise_calls()
    assert [c.primitive for c in calls] == ["permute_and_flip"] + ["discrete_laplace"] * 4
    scans = [1 / calls[i].scale + 1 / calls[i + 1].scale for i in (1, 3)]
    spent = group * (2 / calls[0].scale + max(scans))
    assert spent <= epsilon
    assert spent > 0.999 * epsilon  # and the budget is used, not wasted


# ---------------------------------------------------------------- accuracy

N_ROWS, RUNS = 3_000, 50
GEN = np.random.default_rng(7)
SHAPES = {
    "incomes (lognormal)": GEN.lognormal(10, 1, N_ROWS),
    "claims (Pareto 1.5)": (GEN.pareto(1.5, N_ROWS) + 1) * 1000,
    "heights (normal)": GEN.normal(170, 10, N_ROWS),
    "log wage": GEN.normal(1.7, 0.5, N_ROWS),
    "shares (beta)": GEN.beta(2, 5, N_ROWS),
    "ages 17-90 (whole)": GEN.integers(17, 91, N_ROWS).astype(float),
    "yes/no (0/1)": (GEN.random(N_ROWS) < 0.3).astype(float),
    "years 1970-2020": GEN.integers(1970, 2021, N_ROWS).astype(float),
}


def clamped_share(values, lower, upper) -> float:
    low = values < lower if lower is not None else np.ones(len(values), bool)
    high = values > upper if upper is not None else np.ones(len(values), bool)
    return float(np.mean(low | high))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_bounds_clamp_at_most_one_percent_on_ordinary_and_long_tailed_columns(shape):
    """3,000 rows, epsilon = 1 (replace-one, the default relation), 50 seeded runs: at most 1%
    of the values lie beyond the bounds in at least 45 runs. If each run did so with probability
    0.99 (the benchmark's tune tables: 0.24% clamped on average at this spend), fewer than 45
    would happen with probability below 10^-5 (binomial): the false-alarm rate. Before (the
    histogram over round numbers at the portal's offered 1% of epsilon = 1): 14% on incomes."""
    values = SHAPES[shape]
    shares = [
        clamped_share(values, found.lower, found.upper)
        for found in (
            estimate_bounds(values, epsilon=1.0, rng=seeded_source(r)) for r in range(RUNS)
        )
    ]
    assert sum(share <= 0.01 for share in shares) >= 45, (shape, np.mean(shares), max(shares))


def test_the_stated_clamp_holds_when_a_few_values_lie_far_from_all_others():
    """Near the worst case of the stated bound: 2,975 rows in [0, 100] and 25 rows at 10^9 (a gap
    of about 40 candidates, each a chance to stop with the 25 rows beyond; 15 to 40 rows there
    were tried, 25 to 30 cut off the most). Mean clamped rows over 200 runs, plus 4 standard
    errors, stay within `expected_clamp_rows` (data-independent, a union over every candidate).
    The bound is not idle: here the mean is a quarter of it or more (32 of 102 rows)."""
    values = np.concatenate([np.linspace(0, 100, 2975), np.full(25, 1e9)])
    plan = bounds_plan(1.0, "replace-one")
    rows = [
        clamped_share(values, f.lower, f.upper) * len(values)
        for f in (estimate_bounds(values, epsilon=1.0, rng=seeded_source(r)) for r in range(200))
    ]
    assert np.mean(rows) + 4 * np.std(rows) / math.sqrt(len(rows)) <= plan.expected_clamp_rows()
    assert np.mean(rows) >= plan.expected_clamp_rows() / 4


def test_bounds_are_round_numbers_near_the_data():
    ages = estimate_bounds(SHAPES["ages 17-90 (whole)"], epsilon=1.0, rng=seeded_source(1))
    assert 0 <= ages.lower <= 17 and 90 <= ages.upper <= 200
    years = estimate_bounds(SHAPES["years 1970-2020"], epsilon=1.0, rng=seeded_source(1))
    assert 1900 <= years.lower <= 1970 and 2020 <= years.upper <= 2100  # not 1000 to 5000


def test_no_bounds_when_too_few_rows_for_the_spend():
    for seed in range(20):
        found = estimate_bounds(
            [42.0] * 5 + [float("nan")] * 100, epsilon=0.1, rng=seeded_source(seed)
        )
        assert found.lower is None and found.upper is None


def test_missing_values_and_text_are_ignored_and_infinities_lie_beyond_every_bound():
    values = [*SHAPES["heights (normal)"], float("nan"), None, "n/a"] + [float("inf")] * 200
    found = estimate_bounds(values, epsilon=1.0, rng=seeded_source(2))
    assert 100 <= found.lower <= 140 and found.upper is None  # 200 rows beyond any candidate


def test_the_candidates_are_public_round_numbers_and_multiples_around_the_median():
    grid = bounds_grid()
    assert list(grid[grid > 0][:6]) == [0.001, 0.002, 0.005, 0.01, 0.02, 0.05] and 0 in grid
    below, above = scan_candidates(1990.0)
    assert below[0] == 1990 and np.all(np.diff(below) < 0) and np.all(np.diff(above) > 0)
    assert {1980, 1960, 1900, 1000, 0} <= set(below) and {2000, 2020, 2050, 5000} <= set(above)
    assert above[0] == 1990
