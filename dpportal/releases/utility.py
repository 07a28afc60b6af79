"""The custodian-only utility report: how close a release is to the raw data.

Computed by the worker right after a release is published, against the raw table, and stored
apart from the public package (DATA_DIR/custodian/, owner-only file modes). It is shown only to
the dataset's owner and is never part of a public package.
"""

import itertools
import json

import numpy as np
import pandas as pd

import mechanisms
from dpportal.core import files, object_store
from dpportal.releases import engine as release_engine
from dpportal.releases import packaging, verdict
from dpportal.releases.kinds.range_count import verdict as range_verdict
from dpportal.releases.packaging import read_csv, with_numbers
from mechanisms import metrics, validation
from mechanisms.range_count import api

MAX_PAIRS = 15
OUTSIDE_LABEL = "(outside the bounds)"
MAX_SCATTER_POINTS = 2000


def load_report(release) -> dict | None:
    """The stored report, or None if it has not been computed (yet)."""
    path = files.utility_report_path(release)
    if not object_store.exists(path):
        return None
    return json.loads(object_store.read_bytes(path))


def compute(release) -> bytes:
    """Compare the published files with the raw data: the report, as JSON to store privately
    (`services.publishing` stores it, ordered with the dataset's deletion)."""
    schema = mechanisms.Schema.from_dict(release.dataset.schema)
    frame = release_engine.load_columns(release.dataset, release.columns)
    stored = packaging.stored_files(release)
    report = build_report(schema, release.columns, frame, stored, release.mechanism)
    grade = range_verdict.assess if "structure.json" in stored else verdict.assess
    report["verdict"] = grade(
        schema,
        release.columns,
        frame,
        stored,
        epsilon=float(release.epsilon),
        neighbouring=release.neighbouring,
    )
    return json.dumps(report).encode()


def build_report(schema, columns, frame, files, mechanism) -> dict:
    """Per-column and per-pair comparisons, and the error of the released counts."""
    report = {"rows": len(frame), "columns": [], "pairs": [], "ranges": [], "cells": None}
    report["clamping"] = [
        c.to_dict() for c in validation.clamping_report(frame, schema, columns) if c.moved
    ]
    frame = with_numbers(frame, schema)
    if "synthetic.csv" in files:
        synthetic = read_csv(files["synthetic.csv"], schema)
        report["synthetic_rows"] = len(synthetic)
        report["columns"] = [_column_comparison(schema, c, frame, synthetic) for c in columns]
        report["pairs"] = _pair_comparisons(schema, columns, frame, synthetic)
        report["ranges"] = [
            _range_errors(schema, c, frame, synthetic)
            for c in columns
            if isinstance(schema.column(c), mechanisms.schema.NumericColumn)
        ]
    if "noisy_counts.csv" in files and mechanism == "perturbed_histogram":
        report["cells"] = _cell_errors(schema, columns, frame, read_csv(files["noisy_counts.csv"]))
    if "measurements.json" in files:
        report["workload"] = _measurement_errors(
            schema, frame, json.loads(files["measurements.json"])["measurements"]
        )
    if "structure.json" in files and "answers.csv" in files:
        report["answers"] = _range_answer_errors(columns, frame, files)
    return report


def _numeric(schema, column) -> bool:
    return isinstance(schema.column(column), mechanisms.schema.NumericColumn)


def _column_comparison(schema, column, frame, synthetic) -> dict:
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


def _pair_comparisons(schema, columns, frame, synthetic) -> list[dict]:
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


def _range_errors(schema, column, frame, synthetic) -> dict:
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


def _cell_errors(schema, columns, frame, noisy_table) -> dict:
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


def _measurement_errors(schema, frame, measurements) -> dict:
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


def _range_answer_errors(columns, frame, files) -> dict:
    """Each released range answer against the true count of raw rows in the range as asked
    (not the grid-rounded count), with the answer's noise variance and whether its 95%
    interval holds the truth (custodian only)."""
    structure = json.loads(files["structure.json"])
    support, _plan, _noisy = api.load_structure(structure)
    true = range_verdict.true_counts(
        support, range_verdict.raw_values(columns, frame), structure["workload"]
    )
    answers = read_csv(files["answers.csv"])
    released = pd.to_numeric(answers["estimate"]).to_numpy()
    variances = pd.to_numeric(answers["noise_sd"]).to_numpy() ** 2
    low = pd.to_numeric(answers["ci_lower"]).to_numpy()
    high = pd.to_numeric(answers["ci_upper"]).to_numpy()
    squared = (released - true) ** 2
    keep = slice(0, MAX_SCATTER_POINTS)
    return {
        "count": len(true),
        "squared_errors": squared[keep].tolist(),
        "variances": variances[keep].tolist(),
        "mean_abs_error": float(np.mean(np.sqrt(squared))),
        "rmse": float(np.sqrt(np.mean(squared))),
        "predicted_rmse": float(np.sqrt(np.mean(variances))),
        "coverage": float(np.mean((low <= true) & (true <= high))),
    }
