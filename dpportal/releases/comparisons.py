"""CUSTODIAN-ONLY comparisons of a release's public files with the raw table.

The building blocks of the utility report (`dpportal.releases.utility`): each release kind
(`dpportal.releases.kinds`) picks the ones that fit its files. They run in the worker against
the raw data; the result is stored for the dataset's owner alone, never in a public package.
"""

import itertools

import numpy as np
import pandas as pd

import mechanisms
from mechanisms import metrics

MAX_PAIRS = 15
OUTSIDE_LABEL = "(outside the bounds)"
MAX_SCATTER_POINTS = 2000


def synthetic_comparisons(schema, columns, frame, synthetic) -> dict:
    """Columns, pairs and numeric ranges of the synthetic rows against the raw ones."""
    return {
        "synthetic_rows": len(synthetic),
        "columns": [column_comparison(schema, c, frame, synthetic) for c in columns],
        "pairs": pair_comparisons(schema, columns, frame, synthetic),
        "ranges": [
            range_errors(schema, c, frame, synthetic)
            for c in columns
            if isinstance(schema.column(c), mechanisms.schema.NumericColumn)
        ],
    }


def _numeric(schema, column) -> bool:
    return isinstance(schema.column(column), mechanisms.schema.NumericColumn)


def column_comparison(schema, column, frame, synthetic) -> dict:
    """Shares per cell of the raw and the synthetic column, and their distances.

    Measured against the raw values before clamping: raw values outside a numeric column's
    bounds get a cell of their own ("outside the bounds"), which the release never fills, so
    too-narrow bounds show up in the TVD (and in the KS distance, on unclamped values)."""
    original = metrics.cell_distribution(schema, frame, [column])
    released = metrics.cell_distribution(schema, synthetic, [column])
    labels = schema.axis_labels(column)
    outside = _outside_share(schema.column(column), frame[column])
    if outside:
        original = np.append(original * (1 - outside), outside)
        released = np.append(released, 0.0)
        labels = [*labels, OUTSIDE_LABEL]
    return {
        "column": column,
        "labels": labels,
        "original": original.tolist(),
        "release": released.tolist(),
        "tvd": metrics.total_variation(original, released),
        "ks": _ks(schema.column(column), frame, synthetic) if _numeric(schema, column) else None,
    }


def _outside_share(spec, values) -> float:
    """Share of the rows whose numeric value lies outside the declared bounds (clamped)."""
    if not isinstance(spec, mechanisms.schema.NumericColumn) or not len(values):
        return 0.0
    numbers = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        return float(((numbers < spec.lower) | (numbers > spec.upper)).mean())


def _ks(spec, frame, synthetic) -> float | None:
    """KS distance of the present values: the raw ones as they are (not clamped), so values
    that bounds cut off count as error."""
    raw = pd.Series(frame[spec.name], dtype=float)
    released = pd.Series(synthetic[spec.name], dtype=float)
    if not len(raw.dropna()) or not len(released.dropna()):
        return None
    return metrics.ks_distance(raw.dropna().to_numpy(), released.dropna().to_numpy())


def pair_comparisons(schema, columns, frame, synthetic) -> list[dict]:
    pairs = list(itertools.combinations(columns, 2))[:MAX_PAIRS]
    return [
        {
            "columns": [a, b],
            "tvd": metrics.total_variation(
                *(metrics.cell_distribution(schema, data, [a, b]) for data in (frame, synthetic))
            ),
        }
        for a, b in pairs
    ]


def range_errors(schema, column, frame, synthetic) -> dict:
    """Error (rows) of every interval of whole bins on one numeric column, answered from the
    synthetic rows rescaled to the raw row count."""
    edges = schema.column(column).edges
    queries = [
        {column: (edges[i], edges[j])}
        for i in range(len(edges) - 1)
        for j in range(i + 1, len(edges))
    ]
    errors = metrics.synthetic_range_errors(frame, synthetic, queries)
    return {"column": column, "intervals": len(queries), **errors}


def cell_errors(schema, columns, frame, noisy_table) -> dict:
    """True against released count per cell (the histogram's workload), for a scatter plot."""
    true = schema.cell_counts(frame, columns).ravel()
    noisy = pd.to_numeric(noisy_table["noisy_count"]).to_numpy()
    error = noisy - true
    keep = slice(0, MAX_SCATTER_POINTS)
    return {
        "true": true[keep].tolist(),
        "noisy": noisy[keep].tolist(),
        "shown": len(true[keep]),
        "cells": len(true),
        "mean_abs_error": float(np.mean(np.abs(error))),
        "rmse": float(np.sqrt(np.mean(error.astype(float) ** 2))),
    }


def measurement_errors(schema, frame, measurements) -> dict:
    """Each noisy count MWEM measured against the true count (marginal cells in row-major
    order, or a box's single count)."""
    true, noisy = [], []
    for measurement in measurements:
        query = measurement["query"]
        counts = schema.cell_counts(frame, query["columns"])
        if query["type"] == "box":
            counts = counts[tuple(slice(lo, hi + 1) for lo, hi in query["bins"])].sum()
        true.extend(np.atleast_1d(counts).ravel().tolist())
        noisy.extend(measurement["noisy_answer"])
    error = np.asarray(noisy, dtype=float) - np.asarray(true, dtype=float)
    return {
        "true": true[:MAX_SCATTER_POINTS],
        "noisy": noisy[:MAX_SCATTER_POINTS],
        "shown": min(len(true), MAX_SCATTER_POINTS),
        "cells": len(true),
        "mean_abs_error": float(np.mean(np.abs(error))) if len(error) else 0.0,
        "rmse": float(np.sqrt(np.mean(error**2))) if len(error) else 0.0,
    }
