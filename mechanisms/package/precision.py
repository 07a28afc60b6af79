"""How many decimals a published number keeps: never so few that rounding adds noise.

Post-processing of public mechanism output only (no privacy cost).

A number is rounded to 4 significant digits (never coarser than whole numbers), unless its
noise is so small that this would add more than a tenth of the noise's standard deviation (a
mean latitude 42.0312 with noise sd 0.0001 would lose 0.0012 to "42.03", 12 times its
noise): then it keeps as many decimals as it takes for the rounding error to stay at most sd/10
(an estimate rounded to nearest: half a unit in the last place; an interval bound rounded
outward: up to a whole unit). The rounded value is checked against that limit, so even a
float's own representation error cannot break it.

The noise sd of a row is read from its 95% interval: `sd_from_interval`.
"""

from __future__ import annotations

import math

DIGITS = 4
# For Laplace noise of scale b the 95% half-width is b ln 20 and the sd b sqrt 2: half-width /
# sd = 2.12, the largest of the noises the mechanisms add (Gaussian 1.96; sums of independent
# Laplace and Gaussian terms lie between). So the half-width divided by 2.12 is at most the sd.
HALF_WIDTH_PER_SD = math.log(20) / math.sqrt(2)


def sd_from_interval(lower: float, upper: float) -> float:
    """A lower bound on the noise sd of an estimate from its 95% interval (NaN if unknown).

    Half the interval's width over HALF_WIDTH_PER_SD. An interval cut at a declared bound is
    narrower, so the sd is underestimated and more decimals kept: never fewer than needed.
    """
    width = upper - lower
    return width / 2 / HALF_WIDTH_PER_SD if width > 0 else math.nan


def decimals_for_digits(value: float, digits: int = DIGITS) -> int:
    """Decimals that keep `digits` significant digits of `value` (never fewer than 0)."""
    if value == 0 or not math.isfinite(value):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(value))))


def significant(value: float, digits: int = DIGITS) -> float:
    """`value` rounded to `digits` significant digits (never coarser than a whole number)."""
    return round(float(value), decimals_for_digits(value, digits))


def decimals_within(sd: float, unit: float) -> int:
    """The fewest decimals d (at least 0) with unit * 10^-d <= sd / 10.

    `unit` is the largest rounding error in units of the last place: 0.5 when rounding to the
    nearest, 1 when rounding outward. 0 when the sd is unknown (NaN) or not positive.
    """
    if not sd > 0:
        return 0
    places = max(0, math.ceil(math.log10(10 * unit / sd)))
    while unit * 10.0**-places > sd / 10:
        places += 1
    return places


def round_for_noise(value: float, sd: float) -> float:
    """`value` rounded to nearest, to 4 significant digits or more: the error is <= sd / 10.

    Without a known sd (NaN), 4 significant digits.
    """
    places = max(decimals_for_digits(value), decimals_within(sd, 0.5))
    rounded = round(float(value), places)
    while sd > 0 and abs(rounded - value) > sd / 10 and rounded != value:
        places += 1
        rounded = round(float(value), places)
    return rounded


def round_outward(value: float, sd: float, up: bool) -> float:
    """An interval bound rounded outward (up or down), to 4 significant digits or more.

    It moves by at most sd / 10 when the sd is known (NaN: 4 significant digits).
    """
    places = max(decimals_for_digits(value), decimals_within(sd, 1.0))
    rounded = _outward(value, places, up)
    while sd > 0 and abs(rounded - value) > sd / 10 and rounded != value:
        places += 1
        rounded = _outward(value, places, up)
    return rounded


def _outward(value: float, places: int, up: bool) -> float:
    scale = 10.0 ** min(places, 300)
    if places > 300 or not math.isfinite(value * scale):
        return value  # finer than a float holds: the value as it is
    moved = (math.ceil(value * scale) if up else math.floor(value * scale)) / scale
    return max(moved, value) if up else min(moved, value)  # a float quotient never goes inward
