"""Releases at a huge but finite epsilon (10^4 and 10^8: the command line and the Python API
take any finite epsilon; the portal's budgets stop at 100).

There a count's discrete Laplace noise is 0 in floating point: OpenDP's accuracy helper gives
-inf for its 95% half-width, and its standard deviation is 0.0. MWEM failed on both
(`OverflowError` turning -inf into an interval's half-width; `ZeroDivisionError` weighing an
exact measurement by the inverse of its variance, `fit.consistent_targets`); the smoothed
histogram overflowed computing its smallest mix (e^(epsilon / rows)), and given only a mix it
drew as many rows as eq. (6) allows, without end. Every kind now releases and packages; the
half-width is 0, an exact measurement is taken as it is, and rows made from a mix stop at the
synthetic row limit. (Found by a one-off fuzz of every kind over tables of 0 to 3,000 rows,
empty, constant or outside the schema, epsilon 10^-9 to 10^300, both relations.)
"""

import math

import numpy as np
import pytest

from mechanisms import histogram
from mechanisms.accuracy import count_intervals, discrete_laplace_half_width
from mechanisms.catalogue import run_release
from mechanisms.mwem.fit import _inverse_variance_mean
from mechanisms.noise import seeded_source
from mechanisms.package import PackageContext, build_package
from tests.mechanisms.test_infinite_epsilon import DATA, KINDS, SCHEMA

STATISTICS = ("statistics", ["x", "c"], {"stat": ["count", "mean:x", "median:x"], "by": ["c"]})


def closed_form_half_width(scale: float, confidence: float = 0.95) -> int:
    """The smallest k with P(|Z| <= k) >= confidence, from P(|Z| > k) = 2 p^(k+1) / (1 + p)."""
    p = math.exp(-1 / scale)
    k = 0
    while 1 - 2 * p ** (k + 1) / (1 + p) < confidence:
        k += 1
    return k


@pytest.mark.parametrize("scale", [1e-9, 1e-4, 0.001, 0.01, 0.3, 0.5, 1.0, 2.5, 40.0])
def test_the_half_width_is_the_closed_forms_at_every_scale(scale):
    assert discrete_laplace_half_width(scale) == closed_form_half_width(scale)


def test_a_noiseless_count_gets_an_interval_of_its_value_alone():
    lower, upper = count_intervals(np.array([0, 7, -2]), 1e-4)
    assert lower.tolist() == upper.tolist() == [0, 7, -2]


def test_an_exact_estimate_is_taken_as_it_is_and_others_by_inverse_variance():
    exact, noisy = np.array([0.25, 0.75]), np.array([0.5, 0.5])
    assert _inverse_variance_mean([(noisy, 4.0), (exact, 0.0)]).tolist() == exact.tolist()
    pooled = _inverse_variance_mean([(noisy, 4.0), (exact, 1.0)])
    assert np.allclose(pooled, (noisy / 4 + exact) / (1 / 4 + 1))


@pytest.mark.parametrize("epsilon", [1e4, 1e8])
@pytest.mark.parametrize(
    "kind", [*KINDS, "statistics"], ids=lambda kind: kind.replace(" ", "-").replace(",", "")
)
def test_every_kind_releases_and_packages_at_a_huge_epsilon(kind, epsilon):
    if kind == "statistics":
        mechanism, columns, params = STATISTICS
        delta, neighbouring = 0.0, "add-remove"
    else:
        mechanism, columns, params, delta, neighbouring = KINDS[kind]
    if mechanism == "smoothed_histogram":  # at a finite epsilon it asks for rows or mix
        params = {**params, "rows": len(DATA)}
    output = run_release(
        mechanism,
        DATA,
        SCHEMA,
        epsilon=epsilon,
        delta=delta,
        neighbouring=neighbouring,
        columns=columns,
        params=params,
        rng=seeded_source(3),
    )
    package = build_package(output.files, output.manifest, PackageContext())
    assert output.files and "report.pdf" in package and "release.xlsx" in package


def test_rows_made_from_mix_alone_stop_at_the_synthetic_row_limit(monkeypatch):
    """Given only mix, the smoothed histogram draws the most rows eq. (6) allows, which grows
    with epsilon without end (at 10^300: a failed allocation); at most DEFAULT_SYNTHETIC_ROWS,
    as every synthetic table. Fewer rows than allowed keep the guarantee."""
    monkeypatch.setattr(histogram, "DEFAULT_SYNTHETIC_ROWS", 200)
    cells = math.prod(SCHEMA.domain_shape(["x", "c"]))  # 9 x 4

    def allowed(epsilon: float) -> float:  # eq. (6) at mix 0.5: epsilon / log(1 + m / n)
        return epsilon / math.log1p(cells / len(DATA))

    assert 200 < allowed(100.0) < 1000 and 1 < allowed(1.0) < 200
    for epsilon, expected in ((100.0, 200), (1e300, 200), (1.0, math.floor(allowed(1.0)))):
        output = run_release(
            "smoothed_histogram",
            DATA,
            SCHEMA,
            epsilon=epsilon,
            neighbouring="replace-one",
            columns=["x", "c"],
            params={"mix": 0.5},
            rng=seeded_source(5),
        )
        assert output.manifest["parameters"]["rows"] == expected
        assert output.files["synthetic.csv"].count(b"\n") == expected + 1


def test_the_smallest_mix_keeps_eq_6_where_its_exponent_is_capped():
    """Past epsilon / rows = 700 the mix is computed for 700 (e^710 is not a float). It must
    still satisfy eq. (6), rows * log(1 + (1 - mix) m / (n mix)) <= epsilon, checked here in
    the requested epsilon; the twin, the uncapped formula's mix of 0 (e^(epsilon/rows)
    overflowing to infinity), breaks it: a mix of 0 is no smoothing at all."""
    n, m = 120, 36
    for epsilon, rows in ((1e6, 10), (1e8, 120), (1e300, 1)):
        mix = histogram.min_admissible_mix(epsilon, n, m, rows)
        assert 0 < mix < 1e-290
        assert rows * math.log1p((1 - mix) * m / (n * mix)) <= epsilon
    twin = m / (n * math.inf + m)
    assert twin == 0.0 and not histogram._admissible(1e6, n, m, twin, 10)
