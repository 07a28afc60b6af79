"""Exact rounding of privacy parameters; zCDP conversions invert each other."""

import math
from decimal import Decimal
from fractions import Fraction

import pytest

from mechanisms.accounting import (
    approx_dp_to_zcdp,
    check_delta,
    check_epsilon,
    check_neighbouring,
    float_at_most,
    noise_scale,
    zcdp_to_approx_dp,
)
from mechanisms.errors import MechanismError


@pytest.mark.parametrize(
    "text",
    [
        "0.1",
        "0.3",
        "0.7",
        "1e-6",
        "0.000001",
        "1e-30",
        "2.5",
        "1",
        "123456.789012",
        "0.333333333333333333333333",
    ],
)
def test_float_at_most_is_the_largest_float_not_above_the_exact_value(text):
    value = float_at_most(Decimal(text))
    assert Fraction(value) <= Fraction(text) < Fraction(math.nextafter(value, math.inf))
    assert float_at_most(text) == float_at_most(Fraction(text)) == value
    assert check_epsilon(Decimal(text)) == value


def test_float_at_most_twin_plain_float_conversion_overshoots():
    """The broken twin, float(Decimal): above the exact value for some of these texts."""
    above = [t for t in ("0.1", "0.3", "0.7", "1e-6") if Fraction(float(Decimal(t))) > Fraction(t)]
    assert above and all(Fraction(float_at_most(Decimal(t))) <= Fraction(t) for t in above)


@pytest.mark.parametrize(
    "sensitivity, epsilon", [(2, 0.7), (1, 0.1), (2, 1 / 3), (4, 1e-6), (1, 3.0), (2, 0.3)]
)
def test_noise_scale_is_the_smallest_float_whose_loss_is_at_most_epsilon(sensitivity, epsilon):
    scale = noise_scale(sensitivity, epsilon)
    exact = Fraction(sensitivity) / Fraction(epsilon)
    assert Fraction(scale) >= exact > Fraction(math.nextafter(scale, 0))
    assert noise_scale(sensitivity, math.inf) == 0


@pytest.mark.parametrize(
    "bad, message",
    [(0, r"epsilon \(0\) must be > 0"), (-1, r"epsilon \(-1\)"), ("x", "must be a number")],
)
def test_it_quotes_bad_epsilons(bad, message):
    with pytest.raises(MechanismError, match=message):
        check_epsilon(bad)


def test_it_accepts_infinite_epsilon_only_where_allowed():
    assert check_epsilon(float("inf")) == math.inf
    with pytest.raises(MechanismError, match="finite"):
        check_epsilon(float("inf"), allow_infinite=False)


def test_it_checks_delta_and_neighbouring():
    assert check_delta(0) == 0
    with pytest.raises(MechanismError, match=r"delta \(0\) must be in \(0, 1\)"):
        check_delta(0, allow_zero=False)
    assert check_neighbouring("add-remove") == "add-remove"
    with pytest.raises(MechanismError, match="replace-one, add-remove"):
        check_neighbouring("swap")


@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-6), (1.0, 1e-9), (10.0, 1e-5)])
def test_zcdp_conversions_invert_each_other(epsilon, delta):
    rho = approx_dp_to_zcdp(epsilon, delta)
    assert math.isclose(zcdp_to_approx_dp(rho, delta), epsilon, rel_tol=1e-12)
    assert zcdp_to_approx_dp(rho * 1.001, delta) > epsilon  # the largest such rho


def test_zcdp_conversion_matches_a_hand_computation():
    # rho = 0.5, delta = e^-2: epsilon = 0.5 + 2 * sqrt(0.5 * 2) = 2.5
    assert math.isclose(zcdp_to_approx_dp(0.5, math.exp(-2)), 2.5)
