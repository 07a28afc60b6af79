"""Static SVG charts of a release's own tables, for the report (HTML and PDF; no script).

Only released numbers are drawn: estimates with their intervals where the table has them, and
the share of synthetic rows per bin. SVG presentation attributes only (no `style`), so the
charts pass the portal's Content-Security-Policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.errors import MechanismError
from mechanisms.package.tables import Table, interval_owner, is_estimate, is_interval
from mechanisms.schema import Schema

MAX_BARS = 40
WIDTH, LABEL_WIDTH, ROW, TOP = 680, 230, 18, 28
BAR, INTERVAL, AXIS = "#0b5cad", "#1a1a1a", "#6b6b6b"


@dataclass(frozen=True)
class Chart:
    """One chart: a title, the SVG markup, and a sentence on what it shows."""

    title: str
    svg: str
    note: str


def table_charts(table: Table, manifest: dict[str, Any]) -> list[Chart]:
    """Charts of one released table.

    Its estimates (with intervals), or, for a table of
    synthetic rows, each column's share of rows per bin.
    """
    estimates = [h for h in table.header if is_estimate(h)]
    if estimates:
        return [_estimate_chart(table, interval_owner(table) or estimates[0])]
    schema = Schema.from_dict(manifest.get("schema", {"columns": []}))
    columns = [c for c in table.header if c in schema.columns]
    if not columns or table.frame.empty:
        return []
    charts = []
    for column in columns:
        labels = schema.axis_labels(column)
        counts = cell_counts(schema, table.frame, column)
        shares = (counts / max(1, counts.sum())).tolist()
        title = f"{column}: share of the synthetic rows ({table.name})"
        charts.append(
            Chart(
                title,
                bar_svg(labels, shares, None, title=title, percent=True),
                "Each bar is the share of the released synthetic rows in that bin. Synthetic "
                "rows carry no interval of their own: their uncertainty is that of the model "
                "they were drawn from.",
            )
        )
    return charts


def cell_counts(schema: Schema, frame: pd.DataFrame, column: str) -> np.ndarray:
    """`schema.cell_counts(frame, [column])`, each distinct value encoded once.

    The cells counted per distinct value (a categorical column's codes counted, another
    column's values hashed once), the distinct values put in their cells by the schema, the
    counts added up per cell. Where the schema refuses a value (a missing one where it
    rejects them), `schema.cell_counts` says so, naming the first row as it does.
    """
    values = frame[column]
    counted = values.value_counts(dropna=False, sort=False)
    distinct = counted.index
    once = pd.Series(
        np.asarray(distinct, dtype=object)
        if isinstance(values.dtype, pd.CategoricalDtype)
        else distinct.array
    )
    try:
        codes = schema.column(column).encode(once)
    except MechanismError:
        return schema.cell_counts(frame, [column])
    shape = schema.domain_shape([column])
    counts = np.bincount(codes, weights=counted.to_numpy(dtype=np.float64), minlength=shape[0])
    return np.rint(counts).astype(np.int64).reshape(shape)


def _estimate_chart(table: Table, estimate: str) -> Chart:
    labels_from = [h for h in table.header if not table.is_numeric(h) and h != "note"]
    rows = list(table.head_rows(MAX_BARS))
    index = {h: i for i, h in enumerate(table.header)}
    labels = [
        " · ".join(str(r[index[h]]) for h in labels_from) or str(k) for k, r in enumerate(rows)
    ]
    values = [float(r[index[estimate]] or 0) for r in rows]
    bounds = [h for h in table.header if is_interval(h)]
    intervals = None
    if len(bounds) >= 2:
        lo, hi = index[bounds[0]], index[bounds[1]]
        intervals = [(float(r[lo] or 0), float(r[hi] or 0)) for r in rows]
    shown = (
        f"the first {len(rows)} of {len(table.frame)} rows"
        if len(rows) < len(table.frame)
        else "every row"
    )
    note = f"{estimate} of {shown}" + (
        f", with the interval from {bounds[0]} to {bounds[1]} as a black line."
        if intervals
        else "; this table has no interval columns."
    )
    title = f"{table.title}: {estimate}"
    return Chart(title, bar_svg(labels, values, intervals, title=title), note)


def bar_svg(
    labels: list[str],
    values: list[float],
    intervals: list[tuple[float, float]] | None,
    *,
    title: str,
    percent: bool = False,
) -> str:
    """Horizontal bars (one per label) from 0, with optional interval lines, as SVG markup."""
    ends = [*values, 0.0, *(b for pair in intervals or [] for b in pair)]
    low, high = min(ends), max(ends)
    span = (high - low) or 1.0
    plot = WIDTH - LABEL_WIDTH - 20

    def x(v: float) -> float:
        return LABEL_WIDTH + (v - low) / span * plot

    height = TOP + ROW * len(labels) + 24
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}" '
        'font-family="sans-serif" font-size="11">'
    ]
    zero = x(0.0)
    parts.append(
        f'<line x1="{zero:.1f}" y1="{TOP - 6}" x2="{zero:.1f}" y2="{height - 20}" stroke="{AXIS}"/>'
    )
    for k, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = TOP + k * ROW
        left, right = sorted((zero, x(value)))
        text = f"{value:.1%}" if percent else f"{value:,.0f}"
        parts += [
            f'<text x="{LABEL_WIDTH - 6}" y="{y + 12}" text-anchor="end">'
            f"{escape(_cut(label))}</text>",
            f'<rect x="{left:.1f}" y="{y + 3}" width="{max(right - left, 0.5):.1f}" '
            f'height="{ROW - 6}" fill="{BAR}"><title>{escape(label)}: {text}</title></rect>',
        ]
        if intervals:
            a, b = x(intervals[k][0]), x(intervals[k][1])
            parts.append(
                f'<line x1="{a:.1f}" y1="{y + 9}" x2="{b:.1f}" y2="{y + 9}" '
                f'stroke="{INTERVAL}" stroke-width="1.5"/>'
            )
    for v in (low, high):
        tick = f"{v:.0%}" if percent else f"{v:,.0f}"
        parts.append(
            f'<text x="{x(v):.1f}" y="{height - 6}" text-anchor="middle" '
            f'fill="{AXIS}">{tick}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _cut(label: str, width: int = 36) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"
