"""Dates in schemas: ISO 8601 text to a date part (year, month, weekday, hour, day number).

Public rules only: what a date's part is, and how a "date" column's bounds and values are
written (YYYY-MM-DD). Used by `mechanisms.schema` to encode and decode date columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.errors import MechanismError, shown

EPOCH = np.datetime64("1970-01-01", "D")


def day_text(day: float) -> str:
    """YYYY-MM-DD of a day number (days since 1970-01-01)."""
    return str(EPOCH + int(day))


def date_numbers(values: AnyArray | pd.Series[Any], part: str) -> AnyArray:
    """The `part` of each date as float64; NaN where missing or not an ISO 8601 date.

    Plain numbers are already the part (except for the "date" part, whose numbers would be
    day counts nobody writes).
    """
    series = pd.Series(values, copy=False)
    if series.dtype.kind in "iufb":
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    if series.dtype.kind == "M":
        stamps = series
    else:
        text = series.astype("string").str.strip()
        text = text.mask(text == "")
        numbers = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        if part != "date" and not np.isnan(numbers).any():
            return numbers
        stamps = parse_dates(text)
        if part != "date":
            derived = _date_part(stamps, part)
            return np.where(np.isnan(numbers), derived, numbers)
    return _date_part(stamps, part)


def parse_dates(text: pd.Series[Any]) -> pd.Series[Any]:
    """ISO 8601 texts as timestamps, NaT where unreadable; mixed offsets compared in UTC."""
    try:
        return pd.to_datetime(text, errors="coerce", format="ISO8601")
    except (ValueError, TypeError):  # mixed time-zone offsets
        return pd.to_datetime(text, errors="coerce", format="ISO8601", utc=True)


def _date_part(stamps: pd.Series[Any], part: str) -> AnyArray:
    if getattr(stamps.dt, "tz", None) is not None:
        stamps = stamps.dt.tz_convert("UTC").dt.tz_localize(None)
    if part == "date":
        days = stamps.to_numpy(dtype="datetime64[us]").astype("datetime64[D]")
        out = (days - EPOCH).astype(np.float64)
        out[np.isnat(days)] = np.nan
        return out
    accessor = {"year": "year", "month": "month", "weekday": "day_of_week", "hour": "hour"}
    field = getattr(stamps.dt, accessor[part]) + (part == "weekday")  # ISO: Monday is 1
    numbers: AnyArray = field.to_numpy(dtype=np.float64, na_value=np.nan)
    return numbers


def day_number(name: str, key: str, value: Any) -> int:
    """Days since 1970-01-01 of a "YYYY-MM-DD" text."""
    try:
        return int((np.datetime64(str(value), "D") - EPOCH).astype(np.int64))
    except ValueError:
        raise MechanismError(
            f"column {name!r}: {key} ({shown(value)}) must be a date written YYYY-MM-DD"
        ) from None
