"""How the portal writes numbers for people: one place for pages, messages and exports."""

from decimal import Decimal, InvalidOperation


def plain_number(value):
    """ε or δ in plain decimal, without trailing zeros or exponent (1E+2 → 100, 0E-15 → 0,
    1E-7 → 0.0000001). Anything not a number is returned as it is ("" for None)."""
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return "" if value is None else value
    if not number.is_finite():
        return str(value)
    return f"{number.normalize():f}"


def rounded_number(value, digits=6):
    """A float for people: `digits` significant digits in plain decimal (0.19999999999999998 →
    0.2, 1e-07 → 0.0000001); anything else as plain_number writes it."""
    if isinstance(value, float):
        return plain_number(f"{value:.{digits}g}")
    return plain_number(value)
