"""Charts of range-count answers: estimates with their 95% intervals, and box answers drawn as
regions over the released grid (two numeric columns as axes, such as longitude and latitude;
no map tiles, which would need the internet). Public: built from answers.csv and the
structure's public grid only."""

import json

import pandas as pd

from dpportal.releases.chart_style import RELEASE_COLOUR
from dpportal.releases.chart_style import layout as _layout
from dpportal.releases.chart_style import plotly_text as _text

MAX_REGIONS = 30  # boxes drawn as rectangles; the rest are listed in answers.csv
MAX_GRID_MARKERS = 4096  # grid points drawn as dots (every k-th point per axis beyond)


def answers_figure(answers: pd.DataFrame) -> dict:
    """Each range's estimate with its 95% interval (noise plus grid rounding) as error bars."""
    estimate = pd.to_numeric(answers["estimate"])
    low, high = pd.to_numeric(answers["ci_lower"]), pd.to_numeric(answers["ci_upper"])
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "markers",
                "x": list(range(len(answers))),
                "y": estimate.tolist(),
                "text": [_text(d) for d in answers["description"]],
                "hovertemplate": "%{text}<br>%{y:.0f} rows<extra></extra>",
                "marker": {"color": RELEASE_COLOUR},
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": (high - estimate).tolist(),
                    "arrayminus": (estimate - low).tolist(),
                    "visible": True,
                    "color": "#888",
                },
            }
        ],
        "layout": _layout(
            "Range answers with their 95% intervals",
            xaxis={"title": {"text": "range number"}},
            yaxis={"title": {"text": "rows"}},
        ),
    }


def _axes_order(columns: list[str]) -> tuple[int, int]:
    """(x, y) column indices: longitude-like names across, latitude-like names up."""
    first = columns[0].lower()
    return (1, 0) if first.startswith("lat") else (0, 1)


def regions_figure(answers: pd.DataFrame, structure_json: bytes) -> dict | None:
    """Box answers on two columns as rectangles over the grid's points, for a grid release."""
    support = json.loads(structure_json).get("support", {})
    columns, grid = support.get("columns", []), support.get("grid")
    boxes = answers[answers["type"] == "box"].head(MAX_REGIONS)
    if len(columns) != 2 or grid is None or boxes.empty:
        return None
    ix, iy = _axes_order(columns)
    lower, upper = support["lower"], support["upper"]
    axes = []
    for j in (ix, iy):
        step = max(1, int(grid[j] / MAX_GRID_MARKERS**0.5))
        width = (upper[j] - lower[j]) / grid[j]
        axes.append([lower[j] + (k + 0.5) * width for k in range(0, grid[j], step)])
    xs = [x for x in axes[0] for _ in axes[1]]
    ys = [y for _ in axes[0] for y in axes[1]]
    cx, cy = columns[ix], columns[iy]
    shapes, centre_x, centre_y, labels = [], [], [], []
    for _, row in boxes.iterrows():
        x0, x1 = float(row[f"lo_{cx}"]), float(row[f"hi_{cx}"])
        y0, y1 = float(row[f"lo_{cy}"]), float(row[f"hi_{cy}"])
        x0, x1 = max(x0, lower[ix]), min(x1, upper[ix])
        y0, y1 = max(y0, lower[iy]), min(y1, upper[iy])
        shapes.append(
            {
                "type": "rect",
                "x0": x0,
                "x1": x1,
                "y0": y0,
                "y1": y1,
                "line": {"color": RELEASE_COLOUR, "width": 1},
                "fillcolor": "rgba(11, 92, 173, 0.08)",
            }
        )
        centre_x.append((x0 + x1) / 2)
        centre_y.append((y0 + y1) / 2)
        labels.append(
            _text(
                f"{row['description']}: about {float(row['estimate']):.0f} rows "
                f"(95%: {row['ci_lower']} to {row['ci_upper']})"
            )
        )
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "markers",
                "name": "grid points",
                "x": xs,
                "y": ys,
                "hoverinfo": "skip",
                "marker": {"color": "#bbb", "size": 3},
            },
            {
                "type": "scatter",
                "mode": "markers",
                "name": "ranges (hover for the answer)",
                "x": centre_x,
                "y": centre_y,
                "text": labels,
                "hovertemplate": "%{text}<extra></extra>",
                "marker": {"color": RELEASE_COLOUR, "size": 8, "symbol": "cross"},
            },
        ],
        "layout": _layout(
            f"Ranges answered, drawn over the grid ({_text(cx)} across, {_text(cy)} up)",
            xaxis={"title": {"text": _text(cx)}, "range": [lower[ix], upper[ix]]},
            yaxis={"title": {"text": _text(cy)}, "range": [lower[iy], upper[iy]]},
            shapes=shapes,
            height=480,
            showlegend=True,
            legend={"orientation": "h", "y": -0.2},
        ),
    }
