"""Plotly figures for the release pages, built as plain JSON-ready dicts.

The page embeds each figure with `json_script` and draws it with the vendored plotly.js
(static/js/release_detail.js). Public charts use only the release's public files and trace;
custodian-only charts use the stored utility report and are shown to the owner only.
"""

import itertools

import numpy as np

from dpportal.releases.chart_labels import category_axis
from dpportal.releases.chart_style import RELEASE_COLOUR, plotly_text
from dpportal.releases.chart_style import layout as _layout

ORIGINAL_COLOUR = "#a35a00"
MAX_HEATMAPS = 6
MAX_LABELLED_CELLS = 120


def _texts(values) -> list[str]:
    return [plotly_text(v) for v in values]


def _axis(title) -> dict:
    """An axis whose title stays clear of its tick labels (automargin with a standoff)."""
    return {"title": {"text": plotly_text(title), "standoff": 12}, "automargin": True}


def chart(title: str, figure: dict, note: str = "", good: str = "") -> dict:
    """A chart for a page: `good` says what a good result looks like on it."""
    return {"title": title, "figure": figure, "note": note, "good": good}


def distribution_figure(column, labels, release, original=None) -> dict:
    """Bars of each bin's share of rows: the release, and the original when given."""
    labels = _texts(labels)
    data = [
        {
            "type": "bar",
            "name": "Release",
            "x": labels,
            "y": list(release),
            "marker": {"color": RELEASE_COLOUR},
        }
    ]
    if original is not None:
        data.append(
            {
                "type": "bar",
                "name": "Original (custodian-only)",
                "x": labels,
                "y": list(original),
                "marker": {"color": ORIGINAL_COLOUR},
            }
        )
    for trace in data:
        trace["hovertemplate"] = "%{x}: %{y:.1%}<extra>" + trace["name"] + "</extra>"
    return {
        "data": data,
        "layout": _layout(
            f"{column}: share of rows per bin",
            barmode="group",
            xaxis=category_axis(column, labels, across=True),
            yaxis={**_axis("share of rows"), "tickformat": ".0%"},
        ),
    }


def heatmap_figure(columns, labels, shares, title) -> dict:
    """A 2-way table of shares as a heatmap (rows: first column, across: second).

    No colour bar and gaps between cells: plotly draws both of those with inline style
    attributes, which the pages' Content-Security-Policy forbids; each cell shows its value.
    """
    shares = np.asarray(shares)
    trace = {
        "type": "heatmap",
        "z": shares.tolist(),
        "x": _texts(labels[1]),
        "y": _texts(labels[0]),
        "colorscale": "Blues",
        "reversescale": True,
        "showscale": False,
        "xgap": 1,
        "ygap": 1,
        "hovertemplate": "%{y} × %{x}: %{z:.1%}<extra></extra>",
    }
    if shares.size <= MAX_LABELLED_CELLS:
        trace["texttemplate"] = "%{z:.1%}"
    rows = len(labels[0])
    return {
        "data": [trace],
        "layout": _layout(
            title,
            height=max(340, 26 * rows + 160),
            xaxis=category_axis(columns[1], trace["x"], across=True),
            yaxis=category_axis(columns[0], trace["y"], across=False),
        ),
    }


def scatter_against_truth_figure(true, noisy, title, x_title, y_title) -> dict:
    """Released value against the true one; points on the diagonal are exact."""
    top = max([1, *true, *noisy])
    low = min([0, *true, *noisy])
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "markers",
                "name": "cells",
                "x": list(true),
                "y": list(noisy),
                "marker": {"color": RELEASE_COLOUR, "size": 6, "opacity": 0.7},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "exact",
                "x": [low, top],
                "y": [low, top],
                "line": {"color": "#888", "dash": "dash"},
            },
        ],
        "layout": _layout(title, xaxis=_axis(x_title), yaxis=_axis(y_title)),
    }


def mwem_rounds_figure(trace_rounds) -> dict:
    """MWEM's estimated error before each round (public trace: noisy measurements only).

    The query each round measures is the one the model gets (about) most wrong; the gap between
    its noisy answer and the model's guess, as a TVD, falls as the model improves, down to the
    part the noise alone explains (dashed).
    """
    rounds = [entry["round"] for entry in trace_rounds]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "estimated error of the worst table",
                "x": rounds,
                "y": [entry["selected_error_estimate"] for entry in trace_rounds],
                "line": {"color": RELEASE_COLOUR},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "noise level of a measurement",
                "x": rounds,
                "y": [entry["noise_level"] for entry in trace_rounds],
                "line": {"color": "#888", "dash": "dash"},
            },
        ],
        "layout": _layout(
            "MWEM: estimated error of the table measured in each round",
            xaxis={**_axis("round"), "dtick": 1},
            yaxis={**_axis("TVD (share of rows off)"), "tickformat": ".1%"},
        ),
    }


def range_error_figure(squared_errors, variances) -> dict:
    """Squared error of each range answer against its predicted variance (public)."""
    top = max([1.0, *variances, *squared_errors])
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "markers",
                "name": "answers",
                "x": list(variances),
                "y": list(squared_errors),
                "marker": {"color": RELEASE_COLOUR, "opacity": 0.6},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "error = predicted",
                "x": [0, top],
                "y": [0, top],
                "line": {"color": "#888", "dash": "dash"},
            },
        ],
        "layout": _layout(
            "Range answers: squared error against predicted variance",
            xaxis={"title": {"text": "predicted variance"}},
            yaxis={"title": {"text": "squared error"}},
        ),
    }


# ---------------------------------------------------------------- chart sets for a page


def synthetic_charts(schema, columns, synthetic) -> list[dict]:
    """Charts of public synthetic rows: each column's distribution and pair heatmaps."""
    charts = []
    codes = schema.encode(synthetic, columns)  # once: every marginal below is a bincount
    for j, column in enumerate(columns):
        shares = _shares(codes[:, [j]], schema.domain_shape([column]))
        charts.append(
            chart(
                f"{column} in the release",
                distribution_figure(column, schema.axis_labels(column), shares.tolist()),
                good="Good: the bars look like what you know of this column from public "
                "sources (a thin even spread over rare bins is the privacy noise).",
            )
        )
    for (i, a), (j, b) in list(itertools.combinations(enumerate(columns), 2))[:MAX_HEATMAPS]:
        labels = [schema.axis_labels(a), schema.axis_labels(b)]
        shares = _shares(codes[:, [i, j]], schema.domain_shape([a, b]))
        charts.append(
            chart(
                f"{a} × {b} in the release",
                heatmap_figure([a, b], labels, shares, f"{a} × {b} (release)"),
                good="Good: the pattern across cells matches what you expect of these two "
                "columns together; an even wash of colour means the link was lost.",
            )
        )
    return charts


def _shares(codes: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Share of rows per cell of `shape`, from per-row cell codes (n, len(shape))."""
    flat = np.ravel_multi_index(tuple(codes.T), shape) if len(codes) else np.zeros(0, int)
    counts = np.bincount(flat, minlength=int(np.prod(shape))).astype(float).reshape(shape)
    return counts / counts.sum() if counts.sum() else counts


def custodian_charts(schema, report) -> list[dict]:
    """Charts that compare the release with the raw data (owner only, never public)."""
    if not report:
        return []
    charts = [
        chart(
            f"{entry['column']}: release against original",
            distribution_figure(
                entry["column"], entry["labels"], entry["release"], entry["original"]
            ),
            good=f"Good: each pair of bars about equal (TVD {entry['tvd']:.3f}; under 0.05 is "
            "close, above 0.1 visibly off).",
        )
        for entry in report.get("columns", [])
    ]
    for key, title in (
        ("cells", "Noisy counts against true counts"),
        ("workload", "Workload queries: noisy measurements against true counts"),
    ):
        points = report.get(key)
        if points:
            note = (
                f"Showing {points['shown']:,} of {points['cells']:,} counts."
                if points["shown"] < points["cells"]
                else ""
            )
            charts.append(
                chart(
                    title,
                    scatter_against_truth_figure(
                        points["true"], points["noisy"], title, "true count", "released count"
                    ),
                    note,
                    good="Good: points hug the dashed diagonal; their spread is the noise, "
                    "95% of them within the stated ± of it.",
                )
            )
    answers = report.get("answers")
    if answers:
        charts.append(
            chart(
                "Range answers: error against prediction",
                range_error_figure(answers["squared_errors"], answers["variances"]),
            )
        )
    return charts
