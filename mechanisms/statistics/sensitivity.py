"""Each summary statistic's guarantee and the sensitivities of its noisy pieces, for the manifest.

Public: from the schema, the request, the relation and the row count (public where it is used:
under replace-one without groups). The same functions set the noise of the release.
"""

from __future__ import annotations

from typing import Any

from mechanisms.schema import NumericColumn, Schema
from mechanisms.statistics import support
from mechanisms.statistics.measures import (
    centre,
    count_sensitivity,
    sum_grid,
)
from mechanisms.statistics.quantiles import rank_sensitivity
from mechanisms.statistics.request import Request, Statistic


def sensitivities(
    schema: Schema, request: Request, neighbouring: str, n: int
) -> list[dict[str, Any]]:
    """Per statistic: its guarantee and {noisy piece: sensitivity} (rows, or the column's unit).

    Each statistic is epsilon-DP at its share (`epsilon_per_statistic`), for one row under
    `neighbouring`; its pieces split that share (see each `Computer` method).
    """
    public_n = n if neighbouring == "replace-one" and not request.by else None
    found = support.sources(schema, request, neighbouring)
    return [
        {
            "statistic": stat.text,
            "guarantee": f"pure epsilon-DP at its share, one row, {neighbouring}",
            "sensitivity": {
                **_pieces(schema, stat, neighbouring, public_n),
                **(_own_count(neighbouring, public_n) if source.kind == "own" else {}),
            },
        }
        for stat, source in zip(request.statistics, found, strict=True)
    ]


def _own_count(neighbouring: str, public_n: int | None) -> dict[str, float]:
    """The piece of a sum or quantile that counts its own values (`support`)."""
    name = f"own count of present values ({support.SUPPORT_SHARE:.0%} of its epsilon)"
    return {name: count_sensitivity(neighbouring, public_n)}


def _pieces(
    schema: Schema, stat: Statistic, neighbouring: str, public_n: int | None
) -> dict[str, float]:
    if stat.column is None:
        return {} if public_n is not None else {"row count": count_sensitivity(neighbouring)}
    spec = schema.column(stat.column)
    assert isinstance(spec, NumericColumn)
    missing = spec.missing == "cell"
    count = "count of present values" if missing else "row count"
    if stat.kind == "sum":
        return {
            "sum": sum_grid(spec.lower, spec.upper, neighbouring, public_n, missing).sensitivity
        }
    if stat.kind == "quantile":
        assert stat.alpha is not None
        return {"rank score per candidate": rank_sensitivity(stat.alpha, neighbouring)}
    _, r = centre(spec)
    centred = sum_grid(-r, r, neighbouring, public_n, missing).sensitivity
    if stat.kind == "mean" and public_n is not None and not missing:
        return {"sum of x - c": centred}
    pieces = {"sum of x - c": centred, count: count_sensitivity(neighbouring, public_n)}
    if stat.kind == "mean":
        return pieces
    squares = sum_grid(0.0, r * r, neighbouring, public_n, missing).sensitivity
    return {**pieces, "sum of (x - c)^2": squares}
