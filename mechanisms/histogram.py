"""Histogram release mechanisms of Wasserman & Zhou (2010): perturbed and smoothed histograms.

Cells are the product of the schema's bins/categories over the chosen columns (any number r).

Perturbed histogram (Sec. 4.2, Thm 4.4; Dwork et al. 2006): every cell count gets discrete
Laplace noise of scale sensitivity/epsilon (2/epsilon under replace-one, where one changed row
moves two counts by 1; 1/epsilon under add-remove). The unclipped noisy counts are released
(unbiased); clipping at zero and renormalising gives the distribution from which k synthetic
rows are drawn (post-processing), after the "(missing)"/"(other)" slices the noisy counts do
not tell from zero are set to 0 (MWEM's rule, `_supported`). The minimax-rate number of bins
per dimension is about n^(1/(2+r)): see `recommended_bins`.

Smoothed histogram (Sec. 4.1, Thm 4.1): k i.i.d. rows from (1 - mix) * histogram + mix * uniform
over the cells. It is epsilon-DP when k * log(1 + (1 - mix) * m / (n * mix)) <= epsilon (eq. 6),
m the number of cells; the row count n must be public, so only replace-one is offered. `mix` is
the paper's delta: a mixing weight, not DP's delta. With unequal bins or categories "uniform"
means uniform over cells (each cell gets mix/m), for which the theorem's proof holds as is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mechanisms import accuracy
from mechanisms.accounting import check_epsilon, check_neighbouring, noise_scale
from mechanisms.arrays import AnyArray
from mechanisms.chunks import ChunkedTable, EngineTable
from mechanisms.errors import MechanismError
from mechanisms.mwem.structural import rule_text, structural_cells, unsupported_slices
from mechanisms.noise import RandomSource, check_count_noise, resolve_rng
from mechanisms.release import DEFAULT_SYNTHETIC_ROWS, ReleaseOutput, csv_bytes
from mechanisms.release_request import MechanismInputs, Table
from mechanisms.schema import NumericColumn, Schema

if TYPE_CHECKING:
    from mechanisms.release import Progress


@dataclass
class HistogramRelease:
    """What a histogram mechanism publishes, plus the parameters that produced it."""

    columns: list[str]
    shape: tuple[int, ...]
    released_counts: AnyArray  # noisy counts (perturbed) or synthetic-row counts (smoothed)
    probabilities: AnyArray | None  # sampling distribution; public for the perturbed only
    synthetic: pd.DataFrame
    parameters: dict[str, Any]
    spent: dict[str, Any]  # the privacy loss this release realises: epsilon, delta and how
    row_count_public: bool
    noise_scale: float | None = None  # discrete Laplace scale on each count (perturbed only)


def count_sensitivity(neighbouring: str) -> int:
    """L1 sensitivity of the vector of cell counts: 2 under replace-one, 1 under add-remove."""
    return 2 if check_neighbouring(neighbouring) == "replace-one" else 1


def recommended_bins(n: int, dimensions: int) -> int:
    """Rate-optimal bins per dimension, h ~ n^(-1/(2+r)) (Thm 4.4): round(n^(1/(2+r)))."""
    if n < 0 or dimensions < 1:
        raise MechanismError(f"n ({n}) must be >= 0 and dimensions ({dimensions}) >= 1")
    return max(1, round(math.pow(n, 1.0 / (2 + dimensions))))


def perturb_counts(
    counts: AnyArray, *, epsilon: float, neighbouring: str, rng: RandomSource
) -> AnyArray:
    """Add discrete Laplace noise of scale count_sensitivity / epsilon to every count.

    Privacy: epsilon-DP (pure), unit one row, under `neighbouring`; L1 sensitivity of the count
    vector 2 (replace-one) or 1 (add-remove); the scale is rounded up, and the noise is added
    inside the random source (OpenDP's measurement on 64-bit integers for the secure source).
    An epsilon whose scale 64-bit counts cannot carry is refused. epsilon = inf adds no noise.
    """
    counts = np.asarray(counts, dtype=np.int64)
    if math.isinf(epsilon):
        return counts.copy()
    return rng.add_discrete_laplace(counts, _scale(count_sensitivity(neighbouring), epsilon))


def _scale(sensitivity: int, epsilon: float) -> float:
    return check_count_noise(noise_scale(sensitivity, epsilon), epsilon)


def clipped_distribution(noisy_counts: AnyArray) -> AnyArray:
    """Noisy counts clipped at zero and renormalised, uniform if none is left (post-processing)."""
    clipped = np.maximum(np.asarray(noisy_counts, dtype=np.float64), 0.0)
    total = clipped.sum()
    return clipped / total if total > 0 else np.full(clipped.shape, 1.0 / clipped.size)


def sample_cells(probabilities: AnyArray, rows: int, rng: RandomSource) -> AnyArray:
    """Flat indices of `rows` cells drawn i.i.d. from `probabilities`, in random order."""
    p = np.asarray(probabilities, dtype=np.float64).ravel()
    per_cell = rng.multinomial(rows, p / p.sum())
    dtype = np.int32 if p.size < 2**31 else np.int64
    cells = np.repeat(np.arange(p.size, dtype=dtype), per_cell)
    rng.shuffle(cells)
    return cells


def _check_rows(rows: int, name: str = "rows") -> int:
    if isinstance(rows, bool) or not isinstance(rows, int | np.integer) or rows < 0:
        raise MechanismError(f"{name} ({rows!r}) must be a whole number >= 0")
    return int(rows)


def _epsilon_text(epsilon: float) -> str | float:
    return "inf" if math.isinf(epsilon) else epsilon


def perturbed_histogram(
    data: pd.DataFrame | ChunkedTable | EngineTable,
    schema: Schema,
    *,
    columns: Sequence[str] | None,
    epsilon: float,
    rows: int | None = None,
    neighbouring: str = "replace-one",
    rng: RandomSource | None = None,
) -> HistogramRelease:
    """Noisy cell counts and `rows` synthetic rows sampled from their clipped distribution.

    Privacy: epsilon-DP (pure), unit one row, neighbouring replace-one (default; count
    sensitivity 2, noise scale 2/epsilon) or add-remove (sensitivity 1, scale 1/epsilon).
    Bounds, bins and categories come from `schema` only. `rows` defaults to the row count under
    replace-one (public there) and to the rounded noisy total under add-remove, at most
    DEFAULT_SYNTHETIC_ROWS. `data` may be
    a ChunkedTable or an EngineTable: only the cell counts are taken from it, in one pass.
    """
    epsilon, neighbouring = check_epsilon(epsilon), check_neighbouring(neighbouring)
    rng = resolve_rng(rng)
    columns = schema.resolve_columns(columns)
    counts = schema.cell_counts(data, columns)
    n = int(counts.sum())  # every row is in exactly one cell
    noisy = perturb_counts(counts, epsilon=epsilon, neighbouring=neighbouring, rng=rng)
    row_count_public = neighbouring == "replace-one"
    if rows is None:
        rows = min(n if row_count_public else max(0, int(noisy.sum())), DEFAULT_SYNTHETIC_ROWS)
    rows = _check_rows(rows)
    supported, zeroed = _supported(noisy, schema, columns, epsilon, neighbouring)
    probabilities = clipped_distribution(supported)
    synthetic = schema.decode_cells(sample_cells(probabilities, rows, rng), columns, rng)
    sensitivity = count_sensitivity(neighbouring)
    return HistogramRelease(
        columns=columns,
        shape=counts.shape,
        released_counts=noisy,
        probabilities=probabilities,
        synthetic=synthetic,
        parameters={
            "columns": columns,
            "rows": rows,
            "cells": int(counts.size),
            "structural_cells": {"rule": rule_text(), "zeroed": zeroed},
            **_bins_advice(schema, columns, n, row_count_public),
        },
        spent={
            # sensitivity / scale, rounded up: noise_scale(a, b) is the smallest float >= a / b
            "epsilon": _epsilon_text(
                epsilon
                if math.isinf(epsilon)
                else noise_scale(sensitivity, _scale(sensitivity, epsilon))
            ),
            "delta": 0.0,
            "noise": f"discrete Laplace of scale {sensitivity}/epsilon on every cell count",
        },
        row_count_public=row_count_public,
        noise_scale=0.0 if math.isinf(epsilon) else _scale(sensitivity, epsilon),
    )


def _supported(
    noisy: AnyArray, schema: Schema, columns: list[str], epsilon: float, neighbouring: str
) -> tuple[AnyArray, list[str]]:
    """The noisy counts with each "(missing)"/"(other)" slice they do not tell from 0 set to 0.

    MWEM's rule (mechanisms.mwem.structural): a structural cell's noisy count, here the sum
    of the noisy counts of its slice, must be above the one-sided 99.9% quantile of that sum's
    noise at a true count of 0, or the cell gets no synthetic rows (a complete column's
    "(missing)" slice would otherwise get the positive noise of all its empty cells). The
    released noisy counts are unchanged. Post-processing only. Returns (counts, zeroed cells).
    """
    if math.isinf(epsilon):
        return noisy, []
    scale = _scale(count_sensitivity(neighbouring), epsilon)
    kept, zeroed = np.array(noisy, copy=True), []
    for a, found in structural_cells(schema, columns).items():
        for cell in unsupported_slices(noisy, a, found, scale):
            index: list[Any] = [slice(None)] * kept.ndim
            index[a] = cell
            kept[tuple(index)] = 0
            zeroed.append(f"{columns[a]}: {schema.axis_labels(columns[a])[cell]}")
    return kept, zeroed


def _bins_advice(
    schema: Schema, columns: Sequence[str], n: int, row_count_public: bool
) -> dict[str, Any]:
    """Rate-optimal bins per numeric column, only where the row count is public."""
    numeric = [c for c in columns if isinstance(schema.column(c), NumericColumn)]
    if not (numeric and row_count_public):
        return {}
    return {"recommended_bins_per_numeric_column": recommended_bins(n, len(numeric))}


MAX_EXPONENT = 700.0  # min_admissible_mix: e^700 is about 10^304, a float


def max_rows(epsilon: float, n: int, m: int, mix: float) -> float:
    """Largest k allowed by eq. (6): epsilon / log((1 - mix) * m / (n * mix) + 1)."""
    if mix <= 0:
        return math.inf if math.isinf(epsilon) else 0.0
    if mix >= 1:
        return math.inf
    return epsilon / math.log1p((1 - mix) * m / (n * mix))


def min_admissible_mix(epsilon: float, n: int, m: int, rows: int) -> float:
    """Smallest mix for which `rows` draws satisfy eq. (6): m / (n (e^(epsilon/rows) - 1) + m).

    epsilon / rows is taken at most MAX_EXPONENT (e^710 is not a float): the mix for that is
    admissible at any larger epsilon / rows too, and below 10^-300 of the smallest share m / n.
    """
    if rows == 0 or math.isinf(epsilon):
        return 0.0
    mix = m / (n * math.expm1(min(epsilon / rows, MAX_EXPONENT)) + m)
    while not _admissible(epsilon, n, m, mix, rows):  # step past floating-point rounding
        mix = math.nextafter(mix, 1.0)
    return mix


def _admissible(epsilon: float, n: int, m: int, mix: float, rows: int) -> bool:
    if rows == 0 or math.isinf(epsilon):
        return True
    return mix > 0 and rows * math.log1p((1 - mix) * m / (n * mix)) <= epsilon


def smoothed_distribution(counts: AnyArray, mix: float) -> AnyArray:
    """(1 - mix) * counts / n + mix / m for every cell (counts must not all be zero)."""
    counts = np.asarray(counts, dtype=np.float64)
    smoothed: AnyArray = (1 - mix) * counts / counts.sum() + mix / counts.size
    return smoothed


def _smoothed_parameters(
    epsilon: float, n: int, m: int, rows: int | None, mix: float | None
) -> tuple[int, float]:
    if rows is None and mix is None:
        if math.isinf(epsilon):
            return n, 0.0
        raise MechanismError("give rows, mix or both for the smoothed histogram")
    if mix is not None and not (isinstance(mix, int | float) and 0 <= mix <= 1):
        raise MechanismError(f"mix ({mix!r}) must be a number between 0 and 1")
    if rows is None:
        assert mix is not None  # rows and mix both None returned or raised above
        limit = max_rows(epsilon, n, m, mix)
        if limit < 1:
            raise MechanismError(
                f"mix ({mix}) allows {limit:.3g} rows at epsilon={epsilon}, n={n}, m={m}; "
                f"one row needs mix >= {min_admissible_mix(epsilon, n, m, 1):.6g}"
            )
        most = n if math.isinf(limit) else math.floor(limit)
        return min(most, DEFAULT_SYNTHETIC_ROWS), float(mix)
    rows = _check_rows(rows)
    if mix is None:
        return rows, min_admissible_mix(epsilon, n, m, rows)
    if not _admissible(epsilon, n, m, mix, rows):
        raise MechanismError(
            f"rows ({rows}) with mix ({mix}) breaks epsilon={epsilon} (eq. 6, n={n}, m={m}); "
            f"use rows <= {math.floor(max_rows(epsilon, n, m, mix))} or "
            f"mix >= {min_admissible_mix(epsilon, n, m, rows):.6g}"
        )
    return rows, float(mix)


def smoothed_histogram(
    data: pd.DataFrame | ChunkedTable | EngineTable,
    schema: Schema,
    *,
    columns: Sequence[str] | None,
    epsilon: float,
    rows: int | None = None,
    mix: float | None = None,
    rng: RandomSource | None = None,
) -> HistogramRelease:
    """`rows` i.i.d. synthetic rows from (1 - mix) * histogram + mix * uniform over cells.

    Privacy: epsilon-DP (pure), unit one row, neighbouring replace-one with the row count n
    public (Thm 4.1): requires rows * log(1 + (1 - mix) * m / (n * mix)) <= epsilon, m cells.
    Parameters that break this are refused. Given only rows, mix is the smallest admissible;
    given only mix, rows is the largest admissible, at most DEFAULT_SYNTHETIC_ROWS (a larger
    `rows` may be asked for). The rows are drawn by the random source's
    `smoothed_cells` (os.urandom for the secure source), with mix rounded up to a multiple of
    2^-62, which keeps the condition. `data` may be a ChunkedTable (one pass) or an EngineTable
    (its cell counts).
    """
    epsilon, rng = check_epsilon(epsilon), resolve_rng(rng)
    columns = schema.resolve_columns(columns)
    counts = schema.cell_counts(data, columns)
    n, m = int(counts.sum()), int(counts.size)  # every row is in exactly one cell
    if n == 0:
        raise MechanismError("the smoothed histogram needs at least one row of data (n = 0)")
    rows, mix = _smoothed_parameters(epsilon, n, m, rows, mix)
    cells = rng.smoothed_cells(counts, mix, rows)  # the private step: see smoothed_cells
    released = np.bincount(cells, minlength=m).astype(np.int64).reshape(counts.shape)
    return HistogramRelease(
        columns=columns,
        shape=counts.shape,
        released_counts=released,
        probabilities=None,  # the mixture itself is computed from raw counts: never public
        synthetic=schema.decode_cells(cells, columns, rng),
        parameters={"columns": columns, "rows": rows, "mix": mix, "cells": m, "n": n},
        spent={
            "epsilon": rows * math.log1p((1 - mix) * m / (n * mix)) if mix > 0 else "inf",
            "delta": 0.0,
            "condition": "rows * log(1 + (1 - mix) * cells / (n * mix)) <= epsilon (Thm 4.1)",
            "note": "requires the row count n to be public; mix is a mixing weight, not DP delta",
        },
        row_count_public=True,
    )


def cell_table(schema: Schema, release: HistogramRelease, value_name: str) -> pd.DataFrame:
    """One row per cell: each column's label, the released count and its 95% interval.

    Perturbed: noisy count ∓ the discrete Laplace half-width of its noise scale (about the true
    count; `accuracy.count_intervals`). Smoothed: the estimate of the cell's real count from the
    synthetic rows and its interval (`accuracy.smoothed_intervals`, sampling variation only).
    Both are post-processing of the release and public parameters.
    """
    grids = np.meshgrid(*[np.arange(s) for s in release.shape], indexing="ij")
    table: dict[str, Any] = {
        name: np.asarray(schema.axis_labels(name), dtype=object)[grid.ravel()]
        for name, grid in zip(release.columns, grids, strict=True)
    }
    counts = release.released_counts.ravel()
    table[value_name] = counts
    if release.noise_scale is not None:
        table["ci_lower"], table["ci_upper"] = accuracy.count_intervals(counts, release.noise_scale)
    else:
        parameters = release.parameters
        estimate, lower, upper = accuracy.smoothed_intervals(
            counts, rows=parameters["rows"], mix=parameters["mix"], n=parameters["n"]
        )
        table["real_count_estimate"] = np.round(estimate, 1)
        table["ci_lower"], table["ci_upper"] = np.round(lower, 1), np.round(upper, 1)
    return pd.DataFrame(table)


PERTURBED_FILES = {
    "noisy_counts.csv": "unclipped noisy count of every cell (unbiased), with its 95% interval "
    "(ci_lower, ci_upper) from the discrete Laplace noise",
    "synthetic.csv": "rows sampled from the clipped, renormalised noisy histogram",
}
CELL = "the cell's bin or category of {column}"
PERTURBED_COLUMNS = {
    "noisy_counts.csv": {
        "*": CELL,
        "noisy_count": "the number of rows in the cell plus discrete Laplace noise (unbiased: "
        "kept when negative)",
        "ci_lower": "lower end of a 95% interval for the cell's true number of rows, from the "
        "noise's exact distribution",
        "ci_upper": "upper end of that 95% interval for the cell's true number of rows",
    },
    "synthetic.csv": {
        "*": "a made-up value of {column}, sampled from the noisy histogram (a numeric value "
        "drawn evenly within its bin)"
    },
}
SMOOTHED_COLUMNS = {
    "noisy_counts.csv": {
        "*": CELL,
        "synthetic_count": "how many of the synthetic rows fell in the cell (no noise is added: "
        "the blend with an even spread protects privacy)",
        "real_count_estimate": "the cell's real number of rows, estimated from its synthetic "
        "rows and the public blend",
        "ci_lower": "lower end of a 95% interval for the cell's real number of rows (the "
        "sampling of the synthetic rows)",
        "ci_upper": "upper end of that 95% interval for the cell's real number of rows",
    },
    "synthetic.csv": {
        "*": "a made-up value of {column}, drawn from a blend of the real histogram and an even "
        "spread (a numeric value drawn evenly within its bin)"
    },
}
SMOOTHED_FILES = {
    "noisy_counts.csv": "number of synthetic rows in every cell (no separate noisy counts "
    "exist for this mechanism), the real count it estimates and a 95% interval for that "
    "real count (sampling variation of the synthetic rows)",
    "synthetic.csv": "rows drawn i.i.d. from (1 - mix) * histogram + mix * uniform",
}


def _release_output(
    schema: Schema,
    release: HistogramRelease,
    progress: Progress | None,
    value_name: str,
    spent: dict[str, Any],
) -> ReleaseOutput:
    """Package a release; `progress` hears (1, 2) once sampled and (2, 2) once files are built."""
    if progress:
        progress(1, 2)
    counts = cell_table(schema, release, value_name)
    files = {
        "synthetic.csv": csv_bytes(release.synthetic),
        "noisy_counts.csv": csv_bytes(counts),
    }
    trace = {"shape": list(release.shape), "counts": release.released_counts.ravel().tolist()}
    if progress:
        progress(2, 2)
    return ReleaseOutput(
        files=files, manifest={"parameters": release.parameters}, trace=trace, spent=spent
    )


def _only_params(params: dict[str, Any], allowed: set[str], mechanism: str) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise MechanismError(
            f"parameter ({unknown[0]!r}) is not used by {mechanism}; allowed: {sorted(allowed)}"
        )


def _pure_only(delta: float, mechanism: str) -> None:
    if delta != 0:
        raise MechanismError(f"delta ({delta}) must be 0: {mechanism} is pure epsilon-DP")


def run_perturbed(inputs: MechanismInputs[Table]) -> ReleaseOutput:
    _only_params(inputs.params, {"rows"}, "perturbed_histogram")
    _pure_only(inputs.delta, "perturbed_histogram")
    release = perturbed_histogram(
        inputs.data,
        inputs.schema,
        columns=inputs.columns,
        epsilon=inputs.epsilon,
        rows=inputs.params.get("rows"),
        neighbouring=inputs.neighbouring,
        rng=inputs.rng,
    )
    return _release_output(inputs.schema, release, inputs.progress, "noisy_count", release.spent)


def run_smoothed(inputs: MechanismInputs[Table]) -> ReleaseOutput:
    _only_params(inputs.params, {"rows", "mix"}, "smoothed_histogram")
    _pure_only(inputs.delta, "smoothed_histogram")
    if inputs.neighbouring != "replace-one":
        raise MechanismError(
            f"neighbouring ({inputs.neighbouring!r}) must be replace-one for smoothed_histogram: "
            "its guarantee needs the row count public"
        )
    release = smoothed_histogram(
        inputs.data,
        inputs.schema,
        columns=inputs.columns,
        epsilon=inputs.epsilon,
        rows=inputs.params.get("rows"),
        mix=inputs.params.get("mix"),
        rng=inputs.rng,
    )
    return _release_output(
        inputs.schema, release, inputs.progress, "synthetic_count", release.spent
    )


__all__ = [
    "HistogramRelease",
    "clipped_distribution",
    "count_sensitivity",
    "max_rows",
    "min_admissible_mix",
    "perturb_counts",
    "perturbed_histogram",
    "recommended_bins",
    "sample_cells",
    "smoothed_distribution",
    "smoothed_histogram",
]
