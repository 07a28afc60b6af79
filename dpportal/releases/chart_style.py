"""Shared look of the portal's plotly figures: colours, base layout, safe label text."""

RELEASE_COLOUR = "#0b5cad"
BASE_LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 40, "b": 80},
    "height": 340,
    "font": {"family": "system-ui, sans-serif", "size": 13},
}


def plotly_text(value) -> str:
    """Text for a plotly label, title or hover value, shown as written: plotly renders a
    subset of HTML in these (`<a href>` becomes a live link, `<b>` bold), so & < > are sent as
    entities, which plotly displays as the characters themselves."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def layout(title, **extra) -> dict:
    return {**BASE_LAYOUT, "title": {"text": plotly_text(title)}, **extra}
