"""Utility metrics: how close a release is to the raw data or to a true density.

CUSTODIAN-ONLY: these compare a release with the raw data, so their values are not
differentially private and must never go into a public package (`ReleaseOutput`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.errors import MechanismError
from mechanisms.schema import Schema

ORTHANT_POINTS = 2000


def squared_l2(p: Any, q: Any, volumes: Any) -> float:
    """Integral of (f_p - f_q)^2 for piecewise-constant densities with cell masses p, q.

    f_p = p / volume on each cell, so the integral is sum((p - q)^2 / volume).
    """
    p, q, volumes = (np.asarray(a, dtype=np.float64).ravel() for a in (p, q, volumes))
    if not (p.shape == q.shape == volumes.shape) or np.any(volumes <= 0):
        raise MechanismError(
            f"p, q and volumes (sizes {p.size}, {q.size}, {volumes.size}) must have one "
            "positive volume per cell"
        )
    return float(np.sum((p - q) ** 2 / volumes))


def cell_volumes(schema: Schema, columns: Sequence[str] | None) -> AnyArray:
    """Volume of every cell: the product of bin widths (a category or a missing cell: 1)."""
    widths = []
    for name in schema.resolve_columns(columns):
        spec = schema.column(name)
        widths.append(spec.widths())
    volumes: AnyArray = np.prod(np.meshgrid(*widths, indexing="ij"), axis=0)
    return volumes


def cell_distribution(
    schema: Schema, data: pd.DataFrame, columns: Sequence[str] | None
) -> AnyArray:
    """Share of rows in every cell (zeros for an empty table)."""
    counts = schema.cell_counts(data, columns).astype(np.float64)
    total = counts.sum()
    return counts / total if total else counts


def total_variation(p: Any, q: Any) -> float:
    """Half the L1 distance between two distributions over the same cells."""
    return float(0.5 * np.abs(np.ravel(p) - np.ravel(q)).sum())


def ks_distance(a: Any, b: Any) -> float:
    """Two-sample Kolmogorov-Smirnov distance sup_x |F_a(x) - F_b(x)| of 1-D samples."""
    a, b = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    if a.size == 0 or b.size == 0:
        raise MechanismError("ks_distance needs two non-empty samples")
    points = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, points, side="right") / a.size
    cdf_b = np.searchsorted(b, points, side="right") / b.size
    return float(np.abs(cdf_a - cdf_b).max())


def orthant_ks_distance(a: Any, b: Any, max_points: int = ORTHANT_POINTS) -> float:
    """sup over x of |F_a(x) - F_b(x)| with F(x) = share of points <= x in every coordinate.

    The distance of Thm 4.2 for r > 1. Evaluated at up to `max_points` points of each sample
    (evenly spaced in sample order, no randomness), so it is a lower bound of the supremum.
    """
    a, b = (
        np.atleast_2d(np.asarray(a, dtype=np.float64)),
        np.atleast_2d(np.asarray(b, dtype=np.float64)),
    )
    if a.shape[1] != b.shape[1] or not len(a) or not len(b):
        raise MechanismError(
            f"samples (shapes {a.shape}, {b.shape}) must be non-empty with the same columns"
        )
    points = np.concatenate([_spread(a, max_points), _spread(b, max_points)])
    return float(np.abs(_orthant_cdf(a, points) - _orthant_cdf(b, points)).max())


def _spread(sample: AnyArray, count: int) -> AnyArray:
    rows: AnyArray = sample[np.linspace(0, len(sample) - 1, min(count, len(sample))).astype(int)]
    return rows


def _orthant_cdf(sample: AnyArray, points: AnyArray, block: int = 256) -> AnyArray:
    out = np.empty(len(points))
    for start in range(0, len(points), block):
        p = points[start : start + block]
        below = np.all(sample[None, :, :] <= p[:, None, :], axis=2)
        out[start : start + block] = below.mean(axis=1)
    return out


def marginal_tvds(
    schema: Schema, raw: pd.DataFrame, synthetic: pd.DataFrame, columns: Sequence[str] | None
) -> dict[str, Any]:
    """Total variation distance of every 1-way and 2-way marginal (on the schema's cells)."""
    columns = schema.resolve_columns(columns)
    one = {
        c: total_variation(*(cell_distribution(schema, d, [c]) for d in (raw, synthetic)))
        for c in columns
    }
    two = {
        f"{a} x {b}": total_variation(
            *(cell_distribution(schema, d, [a, b]) for d in (raw, synthetic))
        )
        for a, b in itertools.combinations(columns, 2)
    }
    return {"1-way": one, "2-way": two}


def range_counts(data: pd.DataFrame, queries: list[dict[str, Any]]) -> AnyArray:
    """Rows inside each query; a query maps column -> (low, high), both ends included."""
    answers = np.empty(len(queries))
    for i, query in enumerate(queries):
        inside = np.ones(len(data), dtype=bool)
        for column, (low, high) in query.items():
            values = pd.to_numeric(data[column], errors="coerce").to_numpy()
            inside &= (values >= low) & (values <= high)
        answers[i] = inside.sum()
    return answers


def range_query_errors(true_answers: Any, released_answers: Any) -> dict[str, Any]:
    """Mean and max absolute error over a set of range queries."""
    error = np.abs(np.asarray(released_answers, float) - np.asarray(true_answers, float))
    if error.size == 0:
        raise MechanismError("range_query_errors needs at least one query")
    return {"mean_abs_error": float(error.mean()), "max_abs_error": float(error.max())}


def synthetic_range_errors(
    raw: pd.DataFrame, synthetic: pd.DataFrame, queries: list[dict[str, Any]]
) -> dict[str, Any]:
    """Errors of range counts answered from synthetic rows, rescaled to the raw row count."""
    scale = len(raw) / len(synthetic) if len(synthetic) else 0.0
    return range_query_errors(range_counts(raw, queries), range_counts(synthetic, queries) * scale)
