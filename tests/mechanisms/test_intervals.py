"""Coverage of the 95% intervals every histogram and MWEM release publishes (issue 15, item 2).

Each test draws many releases' noise on a fixed table, with the mechanism's own functions and
(except where stated) the secure source, and checks that every interval covers its true value
95% ± 1% of the time: `assert_covers`, per cell for the histograms (each cell on its own) and
pooled over all measured counts for MWEM. Each has a broken twin, the same intervals 0.7× too
narrow around the same centre, which the same check must reject.

Each also checks the empirical coverage against the interval's *exact* nominal coverage,
computed here from the noise distribution's own formula, never by the code under test
(`exact_coverage`: the discrete Laplace pmf; `wilson_coverage`: the binomial pmf):
`assert_matches`. With integer noise a fixed interval cannot cover exactly 95%: it covers
P(|Z| <= k) for a whole k, so the nominal coverage is at least 95% and over-covers at small
scales (97.3% at scale 1); `test_exact_nominal_coverage_is_95_to_96_percent_from_scale_10`
checks it is within 1% of 95% from scale 10 up (docs/accuracy.md).

False alarms: a band check with N intervals at true coverage p in [0.950, 0.9515] fails only if
the binomial frequency leaves [0.94, 0.96], at least 5.8 standard deviations away for
N >= 15,000 (two-sided normal tail < 1e-8 per check). A match check fails only beyond
`MATCH_SD` = 5.5 binomial standard deviations of the exact nominal coverage (two-sided tail
3.8e-8 per cell checked; 31 cells or pools in this module: below 1.2e-6 together). The 0.7×
twins miss by 7% or more: over 25 standard deviations at these sample sizes.
"""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mechanisms import accuracy, histogram
from mechanisms.mwem import mwem
from mechanisms.noise import secure_source, seeded_source
from mechanisms.release_request import MechanismInputs
from mechanisms.schema import Schema
from mechanisms.workload import expand_workload, marginals_spec

pytestmark = pytest.mark.audit  # Monte-Carlo checks of many draws

LOW, HIGH = 0.94, 0.96
NARROW = 0.7
MATCH_SD = 5.5


def assert_covers(covered: np.ndarray, what: str) -> None:
    """Every column of `covered` (draws × intervals, booleans) covers 95% ± 1% of the time."""
    rates = np.atleast_2d(covered).mean(axis=0)
    bad = [(i, round(float(r), 4)) for i, r in enumerate(rates) if not LOW <= r <= HIGH]
    assert not bad, f"{what}: coverage outside [{LOW}, {HIGH}] at (interval, rate) {bad}"


def assert_matches(covered: np.ndarray, nominal, what: str) -> None:
    """Every column of `covered` (draws × intervals, booleans) covers as often as its exact
    nominal coverage (broadcast to `covered`; per draw for pooled intervals of different
    scales) says, within MATCH_SD binomial standard deviations."""
    covered = np.atleast_2d(covered)
    p = np.broadcast_to(np.asarray(nominal, dtype=float), covered.shape)
    draws = covered.shape[0]
    expected = p.mean(axis=0)
    sd = np.sqrt((p * (1 - p)).sum(axis=0)) / draws
    rates = covered.mean(axis=0)
    bad = [
        (i, round(float(r), 4), round(float(e), 4))
        for i, (r, e, d) in enumerate(zip(rates, expected, sd, strict=True))
        if abs(r - e) > MATCH_SD * d
    ]
    assert not bad, f"{what}: coverage off its exact nominal at (interval, rate, nominal) {bad}"


def exact_coverage(scale: float) -> float:
    """P(|Z| <= k) for Z discrete Laplace of `scale` and k = `exact_half_width(scale)`:
    1 - 2 a^(k+1) / (1 + a), from the pmf (a = exp(-1/scale))."""
    a = math.exp(-1 / scale)
    return 1 - 2 * a ** (exact_half_width(scale) + 1) / (1 + a)


def wilson_coverage(rows: int, q: float) -> float:
    """Exact coverage of the 95% Wilson interval for a Binomial(rows, q) share: it holds q
    exactly when (x - rows·q)² <= z² rows q (1 - q) (the score test it inverts), summed over
    the binomial pmf."""
    z = stats.norm.ppf(0.975)
    x = np.arange(rows + 1)
    inside = (x - rows * q) ** 2 <= z**2 * rows * q * (1 - q)
    return float(stats.binom.pmf(x, rows, q)[inside].sum())


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
    nominal = exact_coverage(scale)
    assert 0.95 <= nominal <= 0.96, nominal
    assert_covers((lower <= COUNTS) & (COUNTS <= upper), "perturbed")
    assert_matches((lower <= COUNTS) & (COUNTS <= upper), nominal, "perturbed")
    twin_lower, twin_upper = narrow(noisy, lower, upper)
    with pytest.raises(AssertionError):
        assert_covers((twin_lower <= COUNTS) & (COUNTS <= twin_upper), "twin")
    with pytest.raises(AssertionError):
        assert_matches((twin_lower <= COUNTS) & (COUNTS <= twin_upper), nominal, "twin")


@pytest.mark.parametrize(
    "scale, percent", [(1, 97.3), (2, 96.2), (10, 95.3), (20, 95.1), (50, 95.1), (1000, 95.0)]
)
def test_exact_nominal_coverage_is_95_to_96_percent_from_scale_10(scale, percent):
    """The fixed integer interval's exact coverage, from the pmf: never below 95%, within 1% of
    it from scale 10 up, above at small scales (the figures docs/accuracy.md states). An exact
    95% would need a randomised end (include k+1 with some probability), which no statistical
    agency publishes. No draws: exact."""
    nominal = exact_coverage(scale)
    assert nominal >= 0.95 and round(100 * nominal, 1) == percent, nominal
    assert scale < 10 or nominal <= 0.96
    a = math.exp(-1 / scale)  # one less would cover under 95%: k is the smallest
    assert 1 - 2 * a ** exact_half_width(scale) / (1 + a) < 0.95


def test_noisy_counts_file_carries_the_intervals_of_the_requested_epsilon():
    """The published noisy_counts.csv: ci = noisy ∓ the exact half-width at scale 2/ε."""
    schema = Schema.from_dict(
        {"columns": [{"name": "g", "type": "categorical", "categories": list("abcd")}]}
    )
    data = pd.DataFrame({"g": list("aabbbcccdd") * 30})
    epsilon = 0.25
    output = histogram.run_perturbed(
        MechanismInputs(
            data=data,
            schema=schema,
            columns=["g"],
            params={},
            epsilon=epsilon,
            delta=0.0,
            neighbouring="replace-one",
            rng=secure_source(),
        )
    )
    table = pd.read_csv(pd.io.common.BytesIO(output.files["noisy_counts.csv"]))
    k = exact_half_width(2 / epsilon)
    assert (table["noisy_count"] - table["ci_lower"] == k).all()
    assert (table["ci_upper"] - table["noisy_count"] == k).all()


def test_perturbed_intervals_are_conservative_at_small_scales():
    """At ε = 2 (scale 1) the discrete interval is conservative: coverage >= 95%, never less
    (N = 5,000 per cell, exact coverage 97.3%: 14 standard deviations above the check), and it
    matches the exact 97.3%; the 0.7× twin (k = 2: 92.7%) does not."""
    noisy = histogram.perturb_counts(
        np.tile(COUNTS, (5_000, 1)), epsilon=2.0, neighbouring="replace-one", rng=secure_source()
    )
    lower, upper = accuracy.count_intervals(noisy, 1.0)
    covered = (lower <= COUNTS) & (COUNTS <= upper)
    assert covered.mean(axis=0).min() >= LOW
    assert_matches(covered, exact_coverage(1.0), "scale 1")
    twin_lower, twin_upper = narrow(noisy, lower, upper)
    with pytest.raises(AssertionError):
        assert_matches((twin_lower <= COUNTS) & (COUNTS <= twin_upper), exact_coverage(1.0), "twin")


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
    shares = (1 - mix) * real / n + mix / real.size
    nominal = np.array([wilson_coverage(rows, q) for q in shares])
    assert (abs(nominal - 0.95) <= 0.01).all(), nominal  # Wilson: near 95%, either side
    assert_covers((lower <= real) & (real <= upper), "smoothed")
    assert_matches((lower <= real) & (real <= upper), nominal, "smoothed")
    twin_lower, twin_upper = narrow(estimate, lower, upper)
    with pytest.raises(AssertionError):
        assert_covers((twin_lower <= real) & (real <= twin_upper), "twin")
    with pytest.raises(AssertionError):
        assert_matches((twin_lower <= real) & (real <= twin_upper), nominal, "twin")


def test_mwem_measurement_intervals_cover_their_true_counts():
    """N = 200 MWEM runs on a fixed 6 × 5 table (3 rounds): 11 one-way and 90 pair cells per
    run, about 20,000 intervals pooled (scales 32 and 17: exact coverage >= 95.0%, <= 95.2%).
    The true count of each measured cell is counted here from the codes, not by MWEM."""
    shape = (6, 5)
    table_rng = np.random.default_rng(7)
    codes = np.column_stack([table_rng.integers(0, k, 3000) for k in shape])
    workload = expand_workload(marginals_spec(2), ["a", "b"], shape, set())
    source, covered, twin, nominal = secure_source(), [], [], []
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
            nominal.extend([exact_coverage(record["noise_scale"])] * len(true))
            tl, tu = narrow(noisy, lower, upper)
            twin.extend((tl <= true) & (true <= tu))
    assert len(covered) >= 15_000
    nominal = np.array(nominal)[:, None]
    assert (nominal >= 0.95).all() and (nominal <= 0.96).all()  # scales 17 and 32
    assert_covers(np.array(covered)[:, None], "mwem")
    assert_matches(np.array(covered)[:, None], nominal, "mwem")
    with pytest.raises(AssertionError):
        assert_covers(np.array(twin)[:, None], "twin")
    with pytest.raises(AssertionError):
        assert_matches(np.array(twin)[:, None], nominal, "twin")
