"""Worker side of a release: read the stored table and run the requested mechanism on it.

The only bridge between the portal and the `mechanisms` package.
"""

import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from django.conf import settings

import mechanisms
from mechanisms.accounting import float_at_most, noise_scale
from mechanisms.noise import check_count_noise
from mechanisms.schema import CHUNK_ROWS


class ReleaseInputError(Exception):
    """The release cannot run on this input; the message is shown to the custodian."""


def dataset_path(dataset) -> Path:
    """The dataset's typed columnar copy (Parquet), which every release reads."""
    return Path(settings.DATASET_STORAGE_DIR) / dataset.parquet_name


def _stored_columns(dataset, columns) -> Path:
    """The Parquet copy's path, once it is known to exist and hold `columns`."""
    path = dataset_path(dataset)
    if not dataset.parquet_name or not path.exists():
        raise ReleaseInputError("The dataset's file is no longer stored, so it cannot be read.")
    missing = [c for c in columns if c not in dataset.columns]
    if missing:
        raise ReleaseInputError(
            f"Column {missing[0]!r} is not in the dataset; choose among "
            f"{', '.join(dataset.columns)}."
        )
    return path


def _to_frame(table, columns) -> pd.DataFrame:
    """Whole numbers with gaps read as text ("1", not 1.0 or "1.0"), so they match declared
    categories; a chunk without gaps keeps integers, which encode to the same cells."""
    frame = table.to_pandas()
    for name in columns:
        if pa.types.is_integer(table.schema.field(name).type) and table.column(name).null_count:
            frame[name] = table.column(name).cast(pa.string()).to_pandas()
    return frame


def load_columns(dataset, columns) -> pd.DataFrame:
    """Read only the requested columns of the stored Parquet copy."""
    path = _stored_columns(dataset, columns)
    return _to_frame(pq.read_table(path, columns=list(columns)), columns)


def read_in_chunks(dataset, columns) -> mechanisms.ChunkedTable:
    """The requested columns of the Parquet copy as record batches of CHUNK_ROWS rows, for
    mechanisms that only count: memory holds one batch, whatever the row count."""
    path = _stored_columns(dataset, columns)
    return mechanisms.ChunkedTable(_batches(path, list(columns), CHUNK_ROWS))


def _batches(path, columns, chunk_rows):
    with pq.ParquetFile(path, pre_buffer=False) as parquet:  # pre-buffering grows with the file
        for batch in parquet.iter_batches(batch_size=chunk_rows, columns=columns):
            yield _to_frame(batch, columns)


def compute(release, progress):
    """Run the release's mechanism and return its `mechanisms.ReleaseOutput` (public files).

    Counting mechanisms (histograms, range counts) read the data in chunks; others whole."""
    dataset = release.dataset
    progress(0, 1, "reading data")
    chunked = dataset.sha256 and mechanisms.reads_in_chunks(release.mechanism)
    read = read_in_chunks if chunked else load_columns
    data = read(dataset, release.columns)
    try:
        schema = mechanisms.Schema.from_dict(dataset.schema)
        return mechanisms.run_release(
            release.mechanism,
            data,
            schema,
            columns=release.columns,
            params=release.params,
            epsilon=float_at_most(release.epsilon),  # never above the debited budget
            delta=float_at_most(release.delta),
            neighbouring=release.neighbouring,
            rng=None,
            progress=lambda done, total: progress(done, total, "running"),
        )
    except mechanisms.MechanismError as exc:
        raise ReleaseInputError(str(exc)) from exc


# ---------------------------------------------------------------- release pages: expected accuracy
# Expected accuracy uses public information only (schema, parameters, the public row count
# under replace-one): it never opens the raw file.


def discrete_laplace_std(scale: float) -> float:
    """Standard deviation of the discrete Laplace noise P(k) ∝ exp(-|k|/scale)."""
    if scale <= 0:
        return 0.0
    alpha = math.exp(-1.0 / scale)
    return math.sqrt(2.0 * alpha) / -math.expm1(-1.0 / scale)  # 1 - alpha, also at huge scales


def expected_accuracy(dataset, *, mechanism, columns, params, epsilon, delta=0.0) -> list[str]:
    """Plain sentences predicting the release's accuracy from public information only.

    Raises MechanismError for settings the mechanism would refuse (such as an epsilon whose
    noise 64-bit counts cannot carry), so the form shows them before any budget is spent.
    """
    schema = mechanisms.Schema.from_dict(dataset.schema)
    epsilon, delta = float_at_most(epsilon), float_at_most(delta)
    if mechanism == "range_count":
        return _range_count_accuracy(schema, columns, params, epsilon, delta, dataset)
    shape = schema.domain_shape(columns)
    cells = math.prod(shape)
    sensitivity = mechanisms.histogram.count_sensitivity(dataset.neighbouring)
    if mechanism == "mwem":
        return _mwem_accuracy(schema, columns, params, epsilon, dataset, shape)
    if mechanism == "smoothed_histogram":
        return _smoothed_accuracy(dataset, params["rows"], cells, epsilon)
    noise = discrete_laplace_std(check_count_noise(noise_scale(sensitivity, epsilon), epsilon))
    lines = [
        f"The chosen columns make {combinations(schema, columns)}. Each combination's "
        f"count gets random noise of typically ±{noise:,.1f} rows."
    ]
    lines.append(_relative_error_line(noise, dataset.row_count / cells))
    return lines


def combinations(schema, columns) -> str:
    """'24 combinations (8 age bins × 3 sex values)': the cells, in words."""
    parts = []
    for name in columns:
        spec = schema.column(name)
        unit = "bins" if isinstance(spec, mechanisms.schema.NumericColumn) else "values"
        parts.append(f"{spec.n_cells} {name} {unit}")
    total = math.prod(schema.column(name).n_cells for name in columns)
    return f"{total:,} combinations ({' × '.join(parts)})"


def _share_text(share: float) -> str:
    return "under 1%" if share < 0.01 else f"about {share:.0%}"


def _relative_error_line(noise: float, rows_per_cell: float) -> str:
    if rows_per_cell <= 0:
        return "The table is empty, so every count will be pure noise."
    share = noise / rows_per_cell
    verdict = (
        "small"
        if share < 0.1
        else "noticeable"
        if share < 0.5
        else "large: consider fewer columns, fewer bins or a larger ε"
    )
    return (
        f"An average combination holds about {rows_per_cell:,.0f} rows, so the typical "
        f"error is {_share_text(share)} of that ({verdict}). Rare combinations are "
        "affected more."
    )


def _mwem_accuracy(schema, columns, params, epsilon, dataset, shape) -> list[str]:
    """MWEM's own public defaults (budget split, rounds) applied to the public row count."""
    from mechanisms.mwem import (
        ADD_REMOVE_INIT_FRACTION,
        SELECT_FRACTION,
        default_init_fraction,
        default_rounds,
    )
    from mechanisms.workload import expand_workload

    ordered = {c for c in columns if isinstance(schema.column(c), mechanisms.schema.NumericColumn)}
    workload = expand_workload(params["workload"], list(columns), shape, ordered)
    n = max(dataset.row_count, 1)
    sensitivity = mechanisms.histogram.count_sensitivity(dataset.neighbouring)
    select_fraction = SELECT_FRACTION
    init_fraction = (
        default_init_fraction(n, epsilon, shape, workload)
        if dataset.neighbouring == "replace-one"
        else ADD_REMOVE_INIT_FRACTION
    )
    rounds = params.get("rounds") or default_rounds(
        n, epsilon, shape, workload, init_fraction, select_fraction, sensitivity
    )
    measure_epsilon = epsilon * (1 - init_fraction) * (1 - select_fraction) / rounds
    scale = check_count_noise(noise_scale(sensitivity, measure_epsilon), epsilon)
    noise = discrete_laplace_std(scale)
    cells = sorted(q.cells(shape) for q in workload)[len(workload) // 2]
    return [
        f"The workload has {len(workload)} patterns (tables of counts); MWEM will measure "
        f"{rounds} of them, the ones its model gets most wrong, one per round.",
        f"Each measured count gets random noise of typically ±{noise:,.1f} rows.",
        _relative_error_line(noise, dataset.row_count / cells),
        "Patterns that are not measured are only as good as the model's guess from the others.",
    ]


RANGE_METHOD_NAMES = {
    "identity": "a noisy count per grid point",
    "tree": "a hierarchy of noisy counts",
    "mn12": "the halfspace decomposition",
    "mn12_laplace": "the halfspace decomposition with Laplace noise",
    "path_tree": "a hierarchy of noisy counts along a path through the points",
    "per_query": "a noisy answer per range",
}


def _range_count_accuracy(schema, columns, params, epsilon, delta, dataset) -> list[str]:
    """Plan the release on public inputs (schema bounds, grid, a workload drawn like the real
    one) and report the plan's predicted error; counts are never looked at."""
    from mechanisms.range_count import api
    from mechanisms.range_count.core import privacy_target
    from mechanisms.range_count.inputs import incidence

    support = api.support_from_schema(schema, columns, params)
    queries = api.workload_from_params(support, params, mechanisms.secure_source())
    target = privacy_target(epsilon=epsilon, delta=delta, neighbouring=dataset.neighbouring)
    plan, predicted = api.choose_plan(
        params.get("mechanism", "auto"), support, queries, incidence(support, queries), target
    )
    typical = math.sqrt(predicted[plan.name])
    return [
        f"{len(queries):,} ranges over a grid of {support.n:,} points. The method used will be "
        f"{RANGE_METHOD_NAMES.get(plan.name, plan.name)}, chosen from public information only.",
        f"Each answer will be off by typically ±{typical:,.1f} rows (predicted from the "
        f"method's noise), out of {dataset.row_count:,} rows in the table.",
    ]


def smoothed_default_rows(n: int, cells: int, epsilon: float) -> int:
    """Rows for the smoothed histogram that balance its two errors (public inputs only).

    More rows need more uniform mixing (bias about mix/2 in total variation); fewer rows
    mean more sampling error (about 0.4·sqrt(cells/rows)). Pick the best on a grid of sizes.
    """
    from mechanisms.histogram import min_admissible_mix

    sizes = sorted({max(1, round(n * 10 ** (-k / 8))) for k in range(33)})
    return min(
        sizes,
        key=lambda rows: (
            0.5 * min_admissible_mix(epsilon, n, cells, rows) + 0.4 * math.sqrt(cells / rows)
        ),
    )


def _smoothed_accuracy(dataset, rows, cells, epsilon) -> list[str]:
    from mechanisms.histogram import min_admissible_mix

    mix = min_admissible_mix(epsilon, max(dataset.row_count, 1), cells, rows)
    per_cell = rows / cells
    lines = [
        f"{rows:,} synthetic rows will be drawn over {cells:,} cells. To protect privacy, "
        f"{mix:.0%} of them are spread evenly over all cells, whatever the data.",
        f"The rest follow the real distribution, with a sampling error of about "
        f"±{math.sqrt(per_cell):,.1f} rows in an average cell of {per_cell:,.1f} rows.",
    ]
    if mix > 0.5:
        lines.append(
            "That is a lot of evenly spread rows: ask for fewer rows, fewer columns or a larger ε."
        )
    return lines
