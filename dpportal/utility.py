"""The custodian-only utility report: how close a release is to the raw data.

Computed by the worker right after a release is published, against the raw table, and stored
apart from the public package (DATA_DIR/custodian/, owner-only file modes). It is shown only to
the dataset's owner and is never part of a public package.
"""

import io
import itertools
import json
import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd
from django.conf import settings

import mechanisms

from . import packaging, release_engine

logger = logging.getLogger(__name__)

MAX_PAIRS = 15
MAX_SCATTER_POINTS = 2000


def report_path(release) -> Path:
    return Path(settings.DATA_DIR) / "custodian" / f"release-{release.pk}-utility.json"


def load_report(release) -> dict | None:
    """The stored report, or None if it has not been computed (yet)."""
    path = report_path(release)
    if not path.exists():
        return None
    return json.loads(path.read_text())


def compute_and_store(release) -> dict:
    """Compare the published files with the raw data and store the report privately."""
    schema = mechanisms.Schema.from_dict(release.dataset.schema)
    frame = release_engine.load_columns(release.dataset, release.columns)
    report = build_report(schema, release.columns, frame, packaging.stored_files(release),
                          release.mechanism)
    _write_private(report_path(release), json.dumps(report).encode())
    return report


def _write_private(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(content)
    temp.replace(path)


def build_report(schema, columns, frame, files, mechanism) -> dict:
    """Per-column and per-pair comparisons, and the error of the released counts."""
    report = {"rows": len(frame), "columns": [], "pairs": [], "ranges": [], "cells": None}
    if "synthetic.csv" in files:
        synthetic = read_csv(files["synthetic.csv"])
        report["synthetic_rows"] = len(synthetic)
        report["columns"] = [_column_comparison(schema, c, frame, synthetic) for c in columns]
        report["pairs"] = _pair_comparisons(schema, columns, frame, synthetic)
        report["ranges"] = [_range_errors(schema, c, frame, synthetic) for c in columns
                            if isinstance(schema.column(c), mechanisms.schema.NumericColumn)]
    if "noisy_counts.csv" in files and mechanism == "perturbed_histogram":
        report["cells"] = _cell_errors(schema, columns, frame, read_csv(files["noisy_counts.csv"]))
    return report


def read_csv(content: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False)


def cell_shares(schema, columns, frame) -> np.ndarray:
    counts = schema.cell_counts(frame, columns).astype(float)
    total = counts.sum()
    return counts / total if total else counts


def _column_comparison(schema, column, frame, synthetic) -> dict:
    original = cell_shares(schema, [column], frame)
    released = cell_shares(schema, [column], synthetic)
    numeric = isinstance(schema.column(column), mechanisms.schema.NumericColumn)
    return {
        "column": column,
        "labels": schema.axis_labels(column),
        "original": original.tolist(),
        "release": released.tolist(),
        "tvd": total_variation(original, released),
        "ks": ks_distance(original, released) if numeric else None,
    }


def _pair_comparisons(schema, columns, frame, synthetic) -> list[dict]:
    pairs = list(itertools.combinations(columns, 2))[:MAX_PAIRS]
    result = []
    for a, b in pairs:
        original = cell_shares(schema, [a, b], frame)
        released = cell_shares(schema, [a, b], synthetic)
        result.append({"columns": [a, b], "original": original.tolist(),
                       "tvd": total_variation(original.ravel(), released.ravel())})
    return result


def _range_errors(schema, column, frame, synthetic) -> dict:
    """Error of every interval of bins (as a share of all rows) on one numeric column."""
    errors = interval_errors(cell_shares(schema, [column], frame),
                                     cell_shares(schema, [column], synthetic))
    return {"column": column, "intervals": len(errors), "mean_error": float(np.mean(errors)),
            "max_error": float(np.max(errors))}


def _cell_errors(schema, columns, frame, noisy_table) -> dict:
    """True against released count per cell (the histogram's workload), for a scatter plot."""
    true = schema.cell_counts(frame, columns).ravel()
    noisy = pd.to_numeric(noisy_table.iloc[:, -1]).to_numpy()
    error = noisy - true
    keep = slice(0, MAX_SCATTER_POINTS)
    return {"true": true[keep].tolist(), "noisy": noisy[keep].tolist(), "shown": len(true[keep]),
            "cells": len(true), "mean_abs_error": float(np.mean(np.abs(error))),
            "rmse": float(np.sqrt(np.mean(error.astype(float) ** 2)))}


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Half the L1 distance between two distributions over the same cells."""
    return float(0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum())


def ks_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Largest gap between the cumulative distributions over ordered bins."""
    return float(np.abs(np.cumsum(p) - np.cumsum(q)).max())


def interval_errors(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """|p(I) - q(I)| for every interval I of consecutive bins."""
    gap = np.concatenate([[0.0], np.cumsum(np.asarray(p) - np.asarray(q))])
    upper = np.triu_indices(len(gap), k=1)
    return np.abs(gap[upper[1]] - gap[upper[0]])


def try_compute_and_store(release) -> None:
    """Compute the report; a failure only leaves the report missing (the release stands)."""
    try:
        compute_and_store(release)
    except Exception:
        logger.exception("Utility report for release %s failed", release.pk)
