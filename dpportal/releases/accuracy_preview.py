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

CONFIDENCE_TEXT = f"{accuracy.CONFIDENCE:.0%}"
SPREAD_NOTE = "assuming rows spread evenly over the cells (uneven data: rare cells are worse)"
MEAN_ABS_NORMAL = math.sqrt(2 / math.pi)  # E|X| / sd for a normal X


def table(kind, plan, schema, columns, row_count) -> dict:
    """{"confidence", "rows": [{"output", "within", "note"}], "marginals": [{"marginal",
    "tvd", "note"}]}: the preview's table (intervals) and expected marginal errors, from the
    release kind's `preview_table` (dpportal.releases.kinds)."""
    n = max(int(row_count or 0), 1)
    rows, marginals = kind.preview_table(plan, schema, columns, n)
    return {"confidence": CONFIDENCE_TEXT, "rows": rows, "marginals": marginals}


def interval_row(output, half, note="") -> dict:
    return {"output": output, "within": f"±{half:,.0f} rows", "note": note}


def marginal_row(name, tvd, note) -> dict:
    return {"marginal": name, "tvd": f"{min(tvd, 1.0):.3f}", "note": note}


def even_table_tvd(cells: int, noise_var: float, n: int, rows: int) -> float:
    """Expected TVD of an even table of `cells` cells estimated with per-cell noise variance
    `noise_var` (rows²) and `rows` sampled rows: ½·cells·E|error|, error ≈ normal."""
    p = 1.0 / cells
    sd = math.sqrt(noise_var / n**2 + (p * (1 - p) / rows if rows else 0.0))
    return 0.5 * cells * MEAN_ABS_NORMAL * sd
