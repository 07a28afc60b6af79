"""DP estimates for the schema page (mechanisms.public_bounds): what they find, what they spend,
and event tests of both guarantees at the requested epsilon, each with a broken twin.

Event tests (docs/testing-privacy.md section 1): n = 10,000 outputs per side (the events used
have probabilities above 0.01, where this size already separates e^epsilon from e^(2 epsilon)),
family-wise false-alarm rate alpha = 10^-6, claim = the epsilon (and delta) requested.
"""

import math

import numpy as np
import pytest

from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource, RecordingSource, seeded_source
from mechanisms.public_bounds import (
    bounds_grid,
    category_threshold,
    discover_categories,
    estimate_bounds,
)
from tests.mechanisms.privacy_audit import audit_neighbours

N_PER_SIDE = 10_000
ALPHA = 1e-6
EPSILON = 1.0


class Twin(RandomSource):
    """A broken source: count noise at `factor` x the scale asked for (sensitivity / 2 when
    factor is 0.5), and every noisy count raised by `shift` (a threshold `shift` rows low)."""

    def __init__(self, seed, factor=1.0, shift=0):
        self.inner, self.factor, self.shift = seeded_source(seed), factor, shift

    def add_discrete_laplace(self, values, scale):
        return self.inner.add_discrete_laplace(values, scale * self.factor) + self.shift


# ---------------------------------------------------------------- what they find


def test_bounds_of_ages_are_round_numbers_around_the_bulk():
    ages = np.random.default_rng(0).integers(17, 91, 30_000)
    found = estimate_bounds(ages, epsilon=0.1, rng=seeded_source(1))
    assert (found.lower, found.upper) == (10, 100)


def test_bounds_of_incomes_span_their_orders_of_magnitude():
    incomes = np.random.default_rng(0).lognormal(10, 1, 30_000)  # median about 22,000
    found = estimate_bounds(incomes, epsilon=0.1, rng=seeded_source(1))
    assert found.lower in (500, 1000, 2000) and found.upper in (200_000, 500_000, 1_000_000)
    assert np.mean((incomes >= found.lower) & (incomes <= found.upper)) > 0.99


def test_bounds_ignore_missing_and_text_and_put_infinities_outside():
    values = [1.5, float("nan"), None, "n/a", float("inf")] * 2000
    found = estimate_bounds(values, epsilon=1, rng=seeded_source(1))
    assert found.lower == 1 and found.upper is None  # the open top cell cleared the threshold


def test_no_bounds_when_too_few_rows_clear_the_threshold():
    found = estimate_bounds([42.0] * 10, epsilon=0.01, rng=seeded_source(1))
    assert found.lower is None and found.upper is None and found.threshold > 1000


def test_the_grid_is_public_round_numbers():
    grid = bounds_grid()
    assert list(grid[grid > 0][:6]) == [0.001, 0.002, 0.005, 0.01, 0.02, 0.05]
    assert 0 in grid and np.all(np.diff(grid) > 0) and grid[-1] == 5e12


def test_categories_held_by_many_rows_are_found_and_rare_ones_never():
    values = ["Female"] * 3000 + ["Male"] * 2500 + ["canary-only-once"] + [""] * 50
    found = discover_categories(values, epsilon=0.1, delta=1e-6, rng=seeded_source(2))
    assert found.categories == ["Female", "Male"]


def test_category_discovery_needs_delta():
    with pytest.raises(MechanismError, match="needs delta > 0"):
        discover_categories(["a"] * 100, epsilon=1, delta=0)


# ---------------------------------------------------------------- what they spend


@pytest.mark.parametrize("neighbouring, sensitivity", [("replace-one", 2), ("add-remove", 1)])
def test_each_estimate_draws_one_noise_call_at_sensitivity_over_the_requested_epsilon(
    neighbouring, sensitivity
):
    for run in (
        lambda rng: estimate_bounds([1, 2, 3], epsilon=0.25, neighbouring=neighbouring, rng=rng),
        lambda rng: discover_categories(
            ["a", "b"], epsilon=0.25, delta=1e-6, neighbouring=neighbouring, rng=rng
        ),
    ):
        recorder = RecordingSource(seeded_source(0))
        run(recorder)
        calls = recorder.noise_calls()
        assert [(c.primitive, c.scale) for c in calls] == [("discrete_laplace", sensitivity / 0.25)]


@pytest.mark.parametrize("neighbouring", ["replace-one", "add-remove"])
@pytest.mark.parametrize("epsilon, delta", [(0.01, 1e-6), (0.1, 1e-9), (1.0, 1e-5), (2.0, 0.01)])
def test_the_category_threshold_keeps_a_single_row_value_within_delta(neighbouring, epsilon, delta):
    """Exact tail of the discrete Laplace, computed here independently of the module."""
    scale = (2 if neighbouring == "replace-one" else 1) / epsilon
    tau = category_threshold(scale, epsilon, delta, neighbouring)
    a = math.exp(-1 / scale)
    p = a ** (tau - 1) / (1 + a)  # P(1 + Z >= tau)
    slack = (1 + math.exp(epsilon)) * p if neighbouring == "replace-one" else math.exp(epsilon) * p
    assert slack <= delta
    assert slack > delta * a / (1 + a)  # and not needlessly high: within a factor 2 / a of it


# ---------------------------------------------------------------- event tests


def _bounds_event(rng_factory, values, edges_low, edge_high):
    """X = 2 [lower <= edges_low] + [upper >= edge_high], one draw per output."""
    out = np.empty(N_PER_SIDE, dtype=np.int64)
    rng = rng_factory()
    for i in range(N_PER_SIDE):
        found = estimate_bounds(values, epsilon=EPSILON, rng=rng)
        low = found.lower is not None and found.lower <= edges_low
        high = found.upper is not None and found.upper >= edge_high
        out[i] = 2 * low + high
    return out


def _bounds_neighbours():
    """D: a rows in the cell [1, 2), h rows in [50, 100) and many in [5, 10) between them; D'
    moves one row from [50, 100) to [1, 2). a = t - 2 and h = t + 1, where the two cells'
    events both change by e^(epsilon / 2): the whole epsilon is at stake."""
    t = estimate_bounds([], epsilon=EPSILON).threshold
    a, h, middle = t - 2, t + 1, 10 * t
    d = [1.5] * a + [7.0] * middle + [70.0] * h
    d2 = [1.5] * (a + 1) + [7.0] * middle + [70.0] * (h - 1)
    return d, d2


@pytest.mark.audit
@pytest.mark.parametrize("factor, honest", [(1.0, True), (0.5, False)])
def test_bounds_event_test_at_the_requested_epsilon(factor, honest):
    d, d2 = _bounds_neighbours()
    samples = [
        _bounds_event(lambda seed=seed: Twin(seed, factor), data, 1, 100)
        for seed, data in ((11, d), (12, d2))
    ]
    result = audit_neighbours(*samples, epsilon=EPSILON, thresholds=np.arange(4), alpha=ALPHA)
    print(("honest" if honest else "twin sensitivity / 2"), result.summary())
    assert result.passed == honest


def _category_event(rng, values, delta):
    out = np.empty(N_PER_SIDE, dtype=np.int64)
    for i in range(N_PER_SIDE):
        found = set(discover_categories(values, epsilon=EPSILON, delta=delta, rng=rng).categories)
        out[i] = 2 * ("p" in found) + ("q" in found)
    return out


@pytest.mark.audit
@pytest.mark.parametrize("factor, honest", [(1.0, True), (0.5, False)])
def test_category_discovery_event_test_on_shared_values(factor, honest):
    """Values both neighbours hold: D has p = tau - 2 rows and q = tau + 1, D' moves one row of
    q to p (the Laplace part of the guarantee, at the requested epsilon)."""
    delta = 0.01
    tau = category_threshold(2 / EPSILON, EPSILON, delta, "replace-one")
    d = ["p"] * (tau - 2) + ["q"] * (tau + 1)
    d2 = ["p"] * (tau - 1) + ["q"] * tau
    samples = [_category_event(Twin(seed, factor), x, delta) for seed, x in ((21, d), (22, d2))]
    result = audit_neighbours(
        *samples, epsilon=EPSILON, delta=delta, thresholds=np.arange(4), alpha=ALPHA
    )
    print(("honest" if honest else "twin sensitivity / 2"), result.summary())
    assert result.passed == honest


@pytest.mark.audit
@pytest.mark.parametrize("shift, honest", [(0, True), (None, False)])
def test_category_discovery_event_test_on_a_value_one_row_holds(shift, honest):
    """D holds "p" once, D' replaces that row by an "r": P[p released] must stay within delta
    (requested delta = 0.05, large enough to see at this n). Twin: the threshold of a 10 x larger
    delta (every noisy count raised by ceil(b ln 10) rows)."""
    delta, scale = 0.05, 2 / EPSILON
    shift = math.ceil(scale * math.log(10)) if shift is None else shift
    d = ["p"] + ["r"] * 20
    d2 = ["r"] * 21
    samples = [_category_event(Twin(seed, 1.0, shift), x, delta) for seed, x in ((31, d), (32, d2))]
    result = audit_neighbours(
        *samples, epsilon=EPSILON, delta=delta, thresholds=np.arange(4), alpha=ALPHA
    )
    print(("honest" if honest else "twin threshold of 10 delta"), result.summary())
    assert result.passed == honest
