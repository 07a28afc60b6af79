"""The accuracy preview's table: per output, "within ±k rows with 95% probability".

Built from a mechanism's public noise plan (mechanisms.plans) and the interval rules of
mechanisms.accuracy, the same rules that put ci_lower / ci_upper into the release files, so the
preview states the intervals the release will publish. For synthetic data it adds the expected
error (total variation distance) on the chosen marginals, from public quantities only (the
schema's cells, the row count, the noise scales); these assume counts spread evenly over the
cells, which the table says.
"""

import math

from mechanisms import accuracy
from mechanisms.mwem import _expected_abs_noise
from mechanisms.plans import discrete_laplace_std

CONFIDENCE_TEXT = f"{accuracy.CONFIDENCE:.0%}"
SPREAD_NOTE = "assuming rows spread evenly over the cells (uneven data: rare cells are worse)"
MEAN_ABS_NORMAL = math.sqrt(2 / math.pi)  # E|X| / sd for a normal X


def table(mechanism, plan, schema, columns, row_count) -> dict:
    """{"confidence", "rows": [{"output", "within", "note"}], "marginals": [{"marginal",
    "tvd", "note"}]}: the preview's table (intervals) and expected marginal errors."""
    n = max(int(row_count or 0), 1)
    rows, marginals = [], []
    if mechanism == "perturbed_histogram":
        rows, marginals = _perturbed(plan, schema, columns, n)
    elif mechanism == "smoothed_histogram":
        rows, marginals = _smoothed(plan, schema, columns, n)
    elif mechanism == "mwem":
        rows, marginals = _mwem(plan, n)
    else:
        half = accuracy.plan_half_width(plan, n)
        if half is not None:
            approx = "" if plan.noise == "discrete Laplace" else " (normal approximation)"
            rows = [_row(f"Each of the {plan.outputs:,} outputs", half, f"{plan.noise}{approx}")]
    return {"confidence": CONFIDENCE_TEXT, "rows": rows, "marginals": marginals}


def _row(output, half, note="") -> dict:
    return {"output": output, "within": f"±{half:,.0f} rows", "note": note}


def _marginal(name, tvd, note) -> dict:
    return {"marginal": name, "tvd": f"{min(tvd, 1.0):.3f}", "note": note}


def _tvd(cells: int, noise_var: float, n: int, rows: int) -> float:
    """Expected TVD of an even table of `cells` cells estimated with per-cell noise variance
    `noise_var` (rows²) and `rows` sampled rows: ½·cells·E|error|, error ≈ normal."""
    p = 1.0 / cells
    sd = math.sqrt(noise_var / n**2 + (p * (1 - p) / rows if rows else 0.0))
    return 0.5 * cells * MEAN_ABS_NORMAL * sd


def _perturbed(plan, schema, columns, n):
    half = accuracy.plan_half_width(plan, n)
    variance, cells = discrete_laplace_std(plan.scale or 0.0) ** 2, plan.support
    rows = [
        _row(
            f"Each of the {cells:,} cell counts (noisy_counts.csv)",
            half,
            f"an average cell holds about {n / cells:,.0f} rows",
        )
    ]
    synthetic = n  # the default synthetic rows
    marginals = [
        _marginal(
            " × ".join(columns),
            _tvd(cells, variance, n, synthetic),
            f"the whole table, noise and sampling, {SPREAD_NOTE}",
        )
    ]
    for name in columns if len(columns) > 1 else []:
        k = schema.column(name).n_cells
        marginals.append(_marginal(name, _tvd(k, variance * cells / k, n, synthetic), SPREAD_NOTE))
    return rows, marginals


def _smoothed(plan, schema, columns, n):
    rows_drawn, mix, cells = plan.details["rows"], plan.details["mix"], plan.support
    half = accuracy.plan_half_width(plan, n)
    rows = [
        _row(
            f"The real count of an average cell, estimated from the {rows_drawn:,} synthetic rows",
            half,
            "sampling variation of the synthetic rows (no noise is added)",
        )
    ]
    marginals = [
        _marginal(
            " × ".join(columns),
            mix + _tvd(cells, 0.0, n, rows_drawn),
            f"at most: {mix:.0%} of rows spread evenly, plus sampling, {SPREAD_NOTE}",
        )
    ]
    return rows, marginals


def _mwem(plan, n):
    details = plan.details
    if details.get("full_table"):
        return _mwem_full_table(plan, n)
    init_scale, rounds = details.get("init_scale", 0.0), details["rounds"]
    rows = []
    if init_scale:
        rows.append(
            _row(
                f"Each count of the {details['columns']} one-way tables measured first",
                accuracy.discrete_laplace_half_width(init_scale),
                "measurements.json",
            )
        )
    rows.append(
        _row(
            f"Each count of the {rounds} tables measured in rounds",
            accuracy.plan_half_width(plan, n),
            "measurements.json; which tables is chosen privately, from the data",
        )
    )
    cells = details["median_cells"]
    measured = 0.5 * cells * _expected_abs_noise(plan.scale or 0.0) / n
    marginals = [
        _marginal(
            f"A measured table of {cells:,} cells",
            measured,
            "at least this (the measurement noise); the synthetic rows add their sampling",
        ),
        {
            "marginal": "Tables not measured",
            "tvd": "depends on the data",
            "note": "only as good as the model's guess from the measured ones: see the verdict "
            "on the results page",
        },
    ]
    return rows, marginals


def _mwem_full_table(plan, n):
    """MWEM's plan when it measures the full table once (mechanisms.mwem.plan.measures_joint)."""
    cells = plan.support
    rows = [
        _row(
            f"Each count of the full table ({cells:,} cells), measured once",
            accuracy.plan_half_width(plan, n),
            "measurements.json",
        )
    ]
    marginals = [
        _marginal(
            f"The full table of {cells:,} cells",
            0.5 * cells * _expected_abs_noise(plan.scale or 0.0) / n,
            "at least this (the measurement noise); the synthetic rows add their sampling",
        ),
        {
            "marginal": "Each table the workload asks for",
            "tvd": "at most the full table's",
            "note": "a sum of measured cells: their noise partly cancels",
        },
    ]
    return rows, marginals
