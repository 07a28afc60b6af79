"""Requests for summary statistics: `kind:column` texts, grouping columns, the budget split."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from mechanisms.accounting import float_at_most
from mechanisms.errors import MechanismError
from mechanisms.schema import CategoricalColumn, NumericColumn, Schema

KINDS = ("count", "sum", "mean", "variance", "std", "median", "quantile")
MAX_GROUPS = 10_000
MAX_STATISTICS = 50
_PERCENTILE = re.compile(r"^q(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class Statistic:
    """One requested statistic: its kind, its numeric column (None for a row count), alpha."""

    kind: str
    column: str | None
    alpha: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "quantile":
            return "median" if self.alpha == 0.5 else f"q{100 * (self.alpha or 0):g}"
        return self.kind

    @property
    def text(self) -> str:
        return self.label if self.column is None else f"{self.label}:{self.column}"


def parse_statistic(text: str, schema: Schema) -> Statistic:
    """`kind:column` as a Statistic, checked against the schema (numeric columns only)."""
    kind, _, column = str(text).strip().partition(":")
    kind, column = kind.strip().lower(), column.strip()
    alpha = None
    if kind == "median":
        kind, alpha = "quantile", 0.5
    elif match := _PERCENTILE.match(kind):
        kind, alpha = "quantile", float(match.group(1)) / 100
        if not 0 < alpha < 1:
            raise MechanismError(f"statistic ({text!r}): the percentile must be between 0 and 100")
    if kind not in KINDS:
        raise MechanismError(
            f"statistic ({text!r}) is unknown; write kind:column with kind one of count, sum, "
            "mean, variance, std, median or qNN (the NN-th percentile, e.g. q25)"
        )
    if kind == "count":
        return Statistic("count", None)
    if not column:
        raise MechanismError(f"statistic ({text!r}) needs a column: write {kind}:column")
    spec = schema.column(column)
    if not isinstance(spec, NumericColumn):
        raise MechanismError(
            f"statistic ({text!r}): column {column!r} is categorical; {kind} needs a numeric one"
        )
    return Statistic(kind, column, alpha)


@dataclass(frozen=True)
class Request:
    """A checked request: statistics, grouping columns, each statistic's epsilon, the groups."""

    statistics: tuple[Statistic, ...]
    by: tuple[str, ...]
    shares: tuple[float, ...]
    groups: tuple[tuple[str, ...], ...]

    def needed_columns(self) -> list[str]:
        numeric = [s.column for s in self.statistics if s.column is not None]
        return list(dict.fromkeys([*numeric, *self.by]))


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in re.split(r"[,\n]", value) if v.strip()]
    return list(value)


def parse_request(
    schema: Schema, params: dict[str, Any], *, epsilon: float, neighbouring: str
) -> Request:
    """The request in `params` ("stat", "by", "weights"), checked, with the budget split.

    Each statistic's share is epsilon * weight / sum(weights), rounded down to a float (so the
    shares add up to at most epsilon, exactly). Under replace-one without grouping the count is
    public and gets no share.
    """
    texts = _as_list(params.get("stat"))
    if not texts:
        raise MechanismError("statistics: name at least one, e.g. --stat mean:income")
    if len(texts) > MAX_STATISTICS:
        raise MechanismError(f"statistics ({len(texts)}): ask for at most {MAX_STATISTICS}")
    stats = tuple(parse_statistic(t, schema) for t in texts)
    if len(set(stats)) != len(stats):
        raise MechanismError("statistics: each may be asked for only once")
    by = tuple(str(b).strip() for b in _as_list(params.get("by")))
    if len(by) > 2 or len(set(by)) != len(by):
        raise MechanismError(f"by ({list(by)!r}): group by at most two different columns")
    for name in by:
        if not isinstance(schema.column(name), CategoricalColumn):
            raise MechanismError(f"by: column {name!r} is numeric; group by categorical columns")
    groups = _group_labels(schema, by)
    free = [s.kind == "count" and not by and neighbouring == "replace-one" for s in stats]
    weights = _weights(params.get("weights"), len(stats))
    paid = sum((Fraction(w) for w, f in zip(weights, free, strict=True) if not f), Fraction(0))
    shares = tuple(
        0.0 if f else float_at_most(Fraction(epsilon) * Fraction(w) / paid)
        for w, f in zip(weights, free, strict=True)
    )
    return Request(stats, by, shares, groups)


def _weights(value: Any, count: int) -> list[float]:
    raw = _as_list(value)
    if not raw:
        return [1.0] * count
    try:
        weights = [float(w) for w in raw]
    except (TypeError, ValueError):
        raise MechanismError(f"weights ({raw!r}) must be numbers") from None
    if len(weights) != count or not all(math.isfinite(w) and w > 0 for w in weights):
        raise MechanismError(
            f"weights ({raw!r}) must be {count} positive numbers, one per statistic"
        )
    return weights


def _group_labels(schema: Schema, by: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    labels = [schema.axis_labels(name) for name in by]
    size = math.prod(len(x) for x in labels)
    if size > MAX_GROUPS:
        raise MechanismError(f"by {list(by)} makes {size} groups; use at most {MAX_GROUPS}")
    return tuple(tuple(str(v) for v in combo) for combo in _product(labels))


def _product(labels: list[list[str]]) -> list[tuple[str, ...]]:
    combos: list[tuple[str, ...]] = [()]
    for axis in labels:
        combos = [c + (v,) for c in combos for v in axis]
    return combos
