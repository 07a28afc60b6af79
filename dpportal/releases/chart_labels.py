"""Category axes that read well: every category labelled, none cut off or overlapping.

Long category names are abbreviated on the axis (`short_label`); the chart's tooltip shows the
full name, and plotly's automargin grows the margins to fit the labels.
"""

import html

from dpportal.releases.chart_style import plotly_text

MAX_LABEL = 16  # characters of a category label on an axis; the full label is in the tooltip
MAX_TICKS = 30  # every category up to this many is labelled
CHAR_PX, ROW_PX = 7.5, 900  # a label character's width, and the plot's, in pixels (13px font)


def short_label(label: str, limit: int = MAX_LABEL) -> str:
    """A label (as `plotly_text` made it) cut to `limit` characters with an ellipsis; the
    tooltip shows it in full. Cut as text, so no entity is split."""
    text = html.unescape(label)
    return label if len(text) <= limit else plotly_text(text[: limit - 1].rstrip() + "…")


def category_axis(title, labels, *, across: bool) -> dict:
    """An axis that labels every category (up to MAX_TICKS), abbreviated so that labels never
    overlap or get cut off: margins grow to fit (automargin), and labels across the bottom
    stand upright when side by side they would not fit (slanted ones would overlap).

    Always a category axis: left to guess, plotly reads labels such as "1", "2", "(missing)" as
    numbers, drops the one that is not (a heatmap lost a row and a column, with NaN in the
    browser's console) and spaces the rest by value."""
    # standoff: with automargin, plotly then places the title clear of the tick labels
    axis = {
        "type": "category",
        "title": {"text": plotly_text(title), "standoff": 12},
        "automargin": True,
    }
    shown = [short_label(label) for label in labels]
    if len(labels) <= MAX_TICKS:
        axis.update(tickmode="array", tickvals=list(labels), ticktext=shown)
    if across and len(labels) * (max(map(len, shown), default=0) * CHAR_PX + 12) > ROW_PX:
        axis["tickangle"] = -90
    return axis
