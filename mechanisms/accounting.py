"""Privacy parameters with exact arithmetic.

The portal keeps each dataset's budget as exact decimals in its database ledger; a release's
recorded spend is checked against its request by mechanisms.catalogue.run_release.

Floats handed to mechanisms never spend more than the exact budget: `float_at_most` rounds a
budget down to a float, and `noise_scale` rounds a noise scale up, so the loss a scale realises
(sensitivity / scale, in exact arithmetic) never exceeds the epsilon it was computed from.
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any

from mechanisms.errors import MechanismError

NEIGHBOURING = ("replace-one", "add-remove")
DEFAULT_NEIGHBOURING = "replace-one"


def float_at_most(value: Any) -> float:
    """The largest float not above `value` (a Decimal, Fraction, int, float or decimal text).

    float() rounds to nearest, so float(Decimal("0.1")) is 0.1000000000000000055...; this is
    the float just below it instead. Infinities and NaN come back as themselves.
    """
    rounded = float(Decimal(value) if isinstance(value, str) else value)
    exact = _finite_fraction(value)
    if exact is None:  # an infinity or NaN (then `rounded` is one too)
        return rounded
    if not math.isfinite(rounded):  # finite but beyond the float range
        rounded = math.copysign(sys.float_info.max, rounded)
    while Fraction(rounded) > exact:
        rounded = math.nextafter(rounded, -math.inf)
    return rounded


def _finite_fraction(value: Any) -> Fraction | None:
    number = Decimal(value) if isinstance(value, str) else value
    if isinstance(number, float | Decimal) and not math.isfinite(number):
        return None
    return Fraction(number)


@lru_cache(maxsize=1024)  # exact rational arithmetic; audits ask for the same scale per draw
def noise_scale(sensitivity: float, epsilon: float) -> float:
    """The smallest float not below sensitivity / epsilon (exact); 0 when epsilon is inf.

    Privacy: noise of this scale on a query of this sensitivity realises a loss
    sensitivity / scale <= epsilon exactly, which float division (round to nearest) does not
    promise.
    """
    if math.isinf(epsilon):
        return 0.0
    exact = Fraction(sensitivity) / Fraction(epsilon)
    scale = float(exact)
    while Fraction(scale) < exact:
        scale = math.nextafter(scale, math.inf)
    return scale


def check_epsilon(epsilon: float, *, allow_infinite: bool = True) -> float:
    """Return epsilon as a float if it is > 0 (inf means no noise, for tests), else raise.

    Exact values (Decimal, Fraction, decimal text) are rounded down (`float_at_most`).
    """
    try:
        value = float(epsilon) if isinstance(epsilon, float | int) else float_at_most(epsilon)
    except (TypeError, ValueError, ArithmeticError):
        raise MechanismError(f"epsilon ({epsilon!r}) must be a number > 0") from None
    if not value > 0 or (math.isinf(value) and not allow_infinite):
        limit = "> 0" if allow_infinite else "> 0 and finite"
        raise MechanismError(f"epsilon ({epsilon!r}) must be {limit}")
    return value


def check_delta(delta: float, *, allow_zero: bool = True) -> float:
    """Return delta as a float if it lies in [0, 1) (or (0, 1) when zero is not allowed)."""
    try:
        value = float(delta)
    except (TypeError, ValueError):
        raise MechanismError(f"delta ({delta!r}) must be a number in [0, 1)") from None
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value < 1):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise MechanismError(f"delta ({delta!r}) must be in {interval}")
    return value


def check_neighbouring(neighbouring: str) -> str:
    """Return the neighbouring relation if it is one of NEIGHBOURING, else raise."""
    if neighbouring not in NEIGHBOURING:
        raise MechanismError(
            f"neighbouring ({neighbouring!r}) must be one of {', '.join(NEIGHBOURING)}"
        )
    return neighbouring


def zcdp_to_approx_dp(rho: float, delta: float) -> float:
    """Epsilon such that rho-zCDP implies (epsilon, delta)-DP: rho + 2 sqrt(rho ln(1/delta))."""
    rho, delta = float(rho), check_delta(delta, allow_zero=False)
    if not rho >= 0:
        raise MechanismError(f"rho ({rho}) must be >= 0")
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def approx_dp_to_zcdp(epsilon: float, delta: float) -> float:
    """Largest rho with rho + 2 sqrt(rho ln(1/delta)) <= epsilon (inverse of zcdp_to_approx_dp)."""
    epsilon = check_epsilon(epsilon, allow_infinite=False)
    log_term = math.log(1.0 / check_delta(delta, allow_zero=False))
    # sqrt(rho) is the positive root of x^2 + 2 x sqrt(L) - epsilon = 0.
    root = epsilon / (math.sqrt(log_term + epsilon) + math.sqrt(log_term))
    return root * root
