"""The error-bar charts of a summary-statistics release, from its public statistics.csv only."""

import math

import pandas as pd

from dpportal.releases import packaging
from dpportal.releases.chart_style import BASE_LAYOUT, RELEASE_COLOUR, plotly_text
from mechanisms import statistics as statistics_mechanism

MAX_CHARTS = 12


def release_charts(release) -> list[dict]:
    """The error-bar charts of a statistics release, from its public statistics.csv."""
    if "statistics.csv" not in packaging.stored_names(release):
        return []
    table = packaging.read_csv(packaging.stored_file(release, "statistics.csv"))
    parameters = (release.manifest or {}).get("parameters") or {}
    missing = parameters.get("missing_values_left_out") or []
    return statistics_charts(table.fillna({"column": ""}), missing)


def statistics_charts(table, missing=()) -> list[dict]:
    """One chart per statistic and column: each group's estimate with its 95% interval.

    `missing`: the columns whose missing values were left out (from the manifest); their
    charts say so. A group with no estimate ("too few rows to publish") gets no marker; the
    chart's note names it.
    """
    by = [c for c in table.columns if c not in statistics_mechanism.TABLE_COLUMNS]
    charts = []
    for (stat, column), rows in table.groupby(["statistic", "column"], sort=False):
        labels = (
            [" · ".join(str(v) for v in values) for values in rows[by].itertuples(index=False)]
            if by
            else ["all rows"]
        )
        title = f"{stat} of {column}" if isinstance(column, str) and column else str(stat)
        shown = pd.to_numeric(rows["estimate"], errors="coerce").notna().to_numpy()
        withheld = [label for label, keep in zip(labels, shown, strict=True) if not keep]
        kept = [label for label, keep in zip(labels, shown, strict=True) if keep]
        charts.append(
            {
                "title": title,
                "figure": _error_bar_figure(title, kept, rows[shown], by),
                "note": "Bars: the 95% interval of each released value."
                + (" Missing values left out." if column in missing else "")
                + (
                    f" Too few rows to publish (no estimate): {', '.join(withheld)}."
                    if withheld
                    else ""
                ),
            }
        )
    return charts[:MAX_CHARTS]


def _error_bar_figure(title, labels, rows, by) -> dict:
    estimate = [float(v) for v in rows["estimate"]]
    upper = [max(float(u) - e, 0.0) for u, e in zip(rows["ci_upper"], estimate, strict=True)]
    lower = [max(e - float(v), 0.0) for v, e in zip(rows["ci_lower"], estimate, strict=True)]
    finite = all(math.isfinite(v) for v in [*estimate, *upper, *lower])
    trace = {
        "type": "scatter",
        "mode": "markers",
        "name": "Release",
        "x": [plotly_text(v) for v in labels],
        "y": estimate,
        "marker": {"color": RELEASE_COLOUR, "size": 9},
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": upper,
            "arrayminus": lower,
            "visible": finite,
        },
    }
    layout = {
        **BASE_LAYOUT,
        "title": {"text": plotly_text(title)},
        "xaxis": {"title": {"text": plotly_text(" × ".join(by) or "")}},
        "yaxis": {"title": {"text": plotly_text(title)}},
    }
    return {"data": [trace], "layout": layout}
