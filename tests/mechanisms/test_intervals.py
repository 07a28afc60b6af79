"""Coverage of the 95% intervals every histogram and MWEM release publishes (issue 15, item 2).

Each test draws many releases' noise on a fixed table, with the mechanism's own functions and
(except where stated) the secure source, and checks that every interval covers its true value
95% ± 1% of the time: `assert_covers`, per cell for the histograms (each cell on its own) and
pooled over all measured counts for MWEM. Each has a broken twin, the same intervals 0.7× too
narrow around the same centre, which the same check must reject.

False alarms: a check with N intervals at true coverage p in [0.950, 0.9515] fails only if the
binomial frequency leaves [0.94, 0.96], at least 5.8 standard deviations away for N >= 15,000
(two-sided normal tail < 1e-8 per check; below 1e-6 for all checks of this module together).
"""

import math

import numpy as np
import pandas as pd
import pytest

from mechanisms import accuracy, histogram
from mechanisms.mwem import mwem
from mechanisms.noise import secure_source, seeded_source
from mechanisms.schema import Schema
from mechanisms.workload import expand_workload, marginals_spec

pytestmark = pytest.mark.audit  # Monte-Carlo checks of many draws

LOW, HIGH = 0.94, 0.96
NARROW = 0.7


def assert_covers(covered: np.ndarray, what: str) -> None:
    """Every column of `covered` (draws × intervals, booleans) covers 95% ± 1% of the time."""
    rates = np.atleast_2d(covered).mean(axis=0)
    bad = [(i, round(float(r), 4)) for i, r in enumerate(rates) if not LOW <= r <= HIGH]
    assert not bad, f"{what}: coverage outside [{LOW}, {HIGH}] at (interval, rate) {bad}"


def exact_half_width(scale: float) -> int:
    """Smallest k with P(|Z| <= k) >= 0.95 for the discrete Laplace, from its pmf
    (P(|Z| > k) = 2 a^(k+1) / (1 + a), a = exp(-1/scale)): independent of OpenDP's helper."""
    a = math.exp(-1 / scale)
    return next(k for k in range(10**6) if 2 * a ** (k + 1) / (1 + a) <= 0.05)


def narrow(centre, lower, upper):
    """The twin: the same interval, its half-widths × 0.7."""
    return centre - NARROW * (centre - lower), centre + NARROW * (upper - centre)


COUNTS = np.array([0, 3, 40, 120, 500, 2500, 7, 900], dtype=np.int64)


@pytest.mark.parametrize("neighbouring", ["replace-one", "add-remove"])
def test_perturbed_histogram_intervals_cover_95_percent(neighbouring):
    """N = 20,000 noisy releases of 8 cells at scale 20 (exact coverage 95.14%)."""
    draws, scale = 20_000, 20.0
    epsilon = histogram.count_sensitivity(neighbouring) / scale
    noisy = histogram.perturb_counts(
        np.tile(COUNTS, (draws, 1)), epsilon=epsilon, neighbouring=neighbouring, rng=secure_source()
    )
    lower, upper = accuracy.count_intervals(noisy, scale)
    assert accuracy.discrete_laplace_half_width(scale) == exact_half_width(scale)
    assert_covers((lower <= COUNTS) & (COUNTS <= upper), "perturbed")
    twin_lower, twin_upper = narrow(noisy, lower, upper)
    with pytest.raises(AssertionError):
        assert_covers((twin_lower <= COUNTS) & (COUNTS <= twin_upper), "twin")


def test_noisy_counts_file_carries_the_intervals_of_the_requested_epsilon():
    """The published noisy_counts.csv: ci = noisy ∓ the exact half-width at scale 2/ε."""
    schema = Schema.from_dict(
        {"columns": [{"name": "g", "type": "categorical", "categories": list("abcd")}]}
    )
    data = pd.DataFrame({"g": list("aabbbcccdd") * 30})
    epsilon = 0.25
    output = histogram.run_perturbed(
        data,
        schema,
        columns=["g"],
        params={},
        epsilon=epsilon,
        delta=0.0,
        neighbouring="replace-one",
        rng=secure_source(),
        progress=None,
    )
    table = pd.read_csv(pd.io.common.BytesIO(output.files["noisy_counts.csv"]))
    k = exact_half_width(2 / epsilon)
    assert (table["noisy_count"] - table["ci_lower"] == k).all()
    assert (table["ci_upper"] - table["noisy_count"] == k).all()


def test_perturbed_intervals_are_conservative_at_small_scales():
    """At ε = 2 (scale 1) the discrete interval is conservative: coverage >= 95%, never less
    (N = 5,000 per cell, exact coverage 97.3%: 14 standard deviations above the check)."""
    noisy = histogram.perturb_counts(
        np.tile(COUNTS, (5_000, 1)), epsilon=2.0, neighbouring="replace-one", rng=secure_source()
    )
    lower, upper = accuracy.count_intervals(noisy, 1.0)
    assert ((lower <= COUNTS) & (COUNTS <= upper)).mean(axis=0).min() >= LOW


def test_smoothed_histogram_intervals_cover_the_real_counts():
    """N = 20,000 smoothed releases (rows = 2,000 of n = 10,000, ε = 2) drawn by the
    mechanism's own sampler (`smoothed_cells`, seeded source, exact in distribution); each
    cell's interval must cover its *real* count 95% ± 1% of the time. Seeded: deterministic."""
    real = np.array([4000, 2500, 1500, 1000, 600, 400], dtype=np.int64)
    n, rows, epsilon = int(real.sum()), 2000, 2.0
    mix = histogram.min_admissible_mix(epsilon, n, real.size, rows)
    rng = seeded_source(15)
    released = np.array(
        [
            np.bincount(rng.smoothed_cells(real, mix, rows), minlength=real.size)
            for _ in range(20_000)
        ]
    )
    estimate, lower, upper = accuracy.smoothed_intervals(
        released, rows=rows, mix=mix, n=n, cells=real.size
    )
    assert_covers((lower <= real) & (real <= upper), "smoothed")
    twin_lower, twin_upper = narrow(estimate, lower, upper)
    with pytest.raises(AssertionError):
        assert_covers((twin_lower <= real) & (real <= twin_upper), "twin")


def test_mwem_measurement_intervals_cover_their_true_counts():
    """N = 200 MWEM runs on a fixed 6 × 5 table (3 rounds): 11 one-way and 90 pair cells per
    run, about 20,000 intervals pooled (scales 32 and 17: exact coverage >= 95.0%, <= 95.2%).
    The true count of each measured cell is counted here from the codes, not by MWEM."""
    shape = (6, 5)
    table_rng = np.random.default_rng(7)
    codes = np.column_stack([table_rng.integers(0, k, 3000) for k in shape])
    workload = expand_workload(marginals_spec(2), ["a", "b"], shape, set())
    source, covered, twin = secure_source(), [], []
    for _ in range(200):
        result = mwem(codes, shape, workload, epsilon=0.5, rounds=3, rng=source)
        for record in result.measurements:
            attrs = record["query"].attrs
            dims = tuple(shape[a] for a in attrs)
            flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), dims)
            true = np.bincount(flat, minlength=math.prod(dims))
            noisy = np.array(record["noisy_answer"])
            lower, upper = np.array(record["ci_lower"]), np.array(record["ci_upper"])
            covered.extend((lower <= true) & (true <= upper))
            tl, tu = narrow(noisy, lower, upper)
            twin.extend((tl <= true) & (true <= tu))
    assert len(covered) >= 15_000
    assert_covers(np.array(covered)[:, None], "mwem")
    with pytest.raises(AssertionError):
        assert_covers(np.array(twin)[:, None], "twin")
