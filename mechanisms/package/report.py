"""The release report: one HTML page and the same page as PDF (WeasyPrint).

The page is styled, printable, with no external resource and no script.

Built only from the release's public files, its manifest and the package context: what was
released, the guarantee and the risk it means in plain words (mechanisms.risk), the dataset's
cumulative budget and its risk, the release's own
charts with their intervals, how to read them, and the method with its paper. Every text is
HTML-escaped; charts are inline SVG with presentation attributes only, so the page passes a
Content-Security-Policy without 'unsafe-inline' once its stylesheet is linked, not inlined.
"""

from __future__ import annotations

import functools
import logging
import threading
from html import escape
from importlib import resources
from typing import Any

from mechanisms.accuracy import CONFIDENCE
from mechanisms.package.charts import Chart, table_charts
from mechanisms.package.columns import column_descriptions
from mechanisms.package.context import (
    PackageContext,
    budget_sentence,
    guarantee_sentences,
    mechanism_title,
    publisher_sentences,
    released_columns,
    risk_of_budget,
    risk_of_release,
)
from mechanisms.package.methods import method, setting_notes
from mechanisms.package.readme import file_descriptions
from mechanisms.package.tables import NEGATIVE_NOTE, PRECISION_NOTES, Table

NOTHING_FROM_RAW = (
    "Everything in this report comes from the released files themselves. Nothing in it was "
    "computed from the private table or by comparing with it."
)


def stylesheet() -> str:
    """The report's CSS (inlined in report.html and the PDF; linked from the public page)."""
    return resources.files("mechanisms.package").joinpath("report.css").read_text("utf-8")


def report_html(
    manifest: dict[str, Any],
    tables: list[Table],
    names: list[str],
    context: PackageContext,
    *,
    stylesheet_url: str | None = None,
    downloads: dict[str, str] | None = None,
    notice: str = "",
) -> str:
    """The report as a whole HTML document.

    `stylesheet_url` links the CSS instead of inlining
    it (for a page under a strict CSP); `downloads` maps file names to links shown beside them;
    `notice` is a highlighted line at the top (e.g. a withdrawal).
    """
    style = (
        f'<link rel="stylesheet" href="{escape(stylesheet_url)}">'
        if stylesheet_url
        else f"<style>{stylesheet()}</style>"
    )
    charts = [chart for table in tables for chart in table_charts(table, manifest)]
    body = "".join(
        [
            f"<h1>{escape(context.title)}</h1>",
            _subtitle(manifest, context),
            f'<p class="notice">{escape(notice)}</p>' if notice else "",
            _publisher(context),
            _section("What was released", _released(manifest, names, downloads)),
            _section("The privacy guarantee", _list(guarantee_sentences(manifest))),
            _section("The risk in words", _list(risk_of_release(manifest))),
            _section(
                "Privacy budget of the dataset",
                _p(budget_sentence(context.budget))
                + _list(risk_of_budget(manifest, context.budget)),
            )
            if context.budget
            else "",
            _section("The results", "".join(_figure(c) for c in charts) or _p("No charts.")),
            _section("How to read them", _reading(tables)),
            _section("What each column holds", _columns(manifest, tables)) if tables else "",
            _section("Method", _method(manifest)),
            f"<footer>{escape(NOTHING_FROM_RAW)}</footer>",
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no icon to fetch: the page stands alone
        f"<title>{escape(context.title)}</title>{style}</head>"
        f'<body><main class="report">{body}</main></body></html>\n'
    )


# One PDF at a time per process: the web server runs threads, and WeasyPrint (through pango and
# fontconfig) does not promise to be thread-safe.
_PDF_LOCK = threading.Lock()


def report_pdf(html: str) -> bytes:
    """The report as PDF (A4), rendered by WeasyPrint from the self-contained HTML.

    Every PDF of a process is laid out with the same fonts (`_fonts`), so pango's font and
    glyph caches are kept from one report to the next: about a tenth less CPU time a report
    (least of 8 in one process, .25 → .23 s), the same PDF but for its dates
    (tests/mechanisms/test_package.py).
    """
    logging.getLogger("weasyprint.progress").setLevel(logging.WARNING)  # not per-step chatter
    import weasyprint  # imported here: loading it (and pango) takes a moment

    with _PDF_LOCK:
        document: bytes = weasyprint.HTML(string=html).write_pdf(font_config=_fonts())
    return document


@functools.cache
def _fonts() -> Any:
    """The process's WeasyPrint font configuration, made on first use (under `_PDF_LOCK`).

    It would also hold the fonts of @font-face rules, which the report's stylesheet has none
    of: every report sees the system's fonts only, as with a configuration of its own.
    """
    from weasyprint.text.fonts import FontConfiguration

    return FontConfiguration()


def _p(text: str) -> str:
    return f"<p>{escape(text)}</p>"


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>"


def _section(title: str, content: str) -> str:
    return f"<section><h2>{escape(title)}</h2>{content}</section>"


def _publisher(context: PackageContext) -> str:
    """Who publishes it, how to reach them, and their note (nothing when none is given)."""
    lines = publisher_sentences(context)
    who = f'<p class="publisher">{escape(" ".join(lines))}</p>' if lines else ""
    note = "".join(_p(part) for part in context.note.split("\n\n") if part.strip())
    return who + (f'<div class="publisher-note">{note}</div>' if note else "")


def _subtitle(manifest: dict[str, Any], context: PackageContext) -> str:
    bits = [context.reference] if context.reference else []
    bits.append(mechanism_title(manifest))
    if context.dataset:
        bits.append(f"dataset: {context.dataset}")
    if context.made_on:
        bits.append(context.made_on)
    return f'<p class="subtitle">{escape(" · ".join(bits))}</p>'


def _released(manifest: dict[str, Any], names: list[str], downloads: dict[str, str] | None) -> str:
    described = file_descriptions(manifest)
    rows = "".join(
        f"<tr><td>{_file_cell(name, downloads)}</td>"
        f"<td>{escape(described.get(name, 'part of the release'))}</td></tr>"
        for name in names
    )
    intro = _p(
        f"A release of the kind “{mechanism_title(manifest)}” of the columns "
        f"{', '.join(released_columns(manifest))}."
    )
    head = "<tr><th>File</th><th>What it holds</th></tr>"
    return f'{intro}<table class="downloads">{head}{rows}</table>'


def _file_cell(name: str, downloads: dict[str, str] | None) -> str:
    if downloads and name in downloads:
        return f'<a href="{escape(downloads[name])}">{escape(name)}</a>'
    return escape(name)


def _figure(chart: Chart) -> str:
    return (
        f"<figure><figcaption>{escape(chart.title)}</figcaption>{chart.svg}"
        f'<p class="note">{escape(chart.note)}</p></figure>'
    )


def _reading(tables: list[Table]) -> str:
    points = [
        "Every number was made with random noise, so it is close to, not equal to, the true "
        "value. Large counts are relatively more reliable than small ones.",
        "Where a table has interval columns (ci_lower and ci_upper), they are a "
        f"{CONFIDENCE:.0%} margin of error: the true value they are for (see what each column "
        f"holds, below) lies between them {CONFIDENCE:.0%} of the time. The black line across "
        "each bar shows that interval.",
        f"A negative noisy count is possible: {NEGATIVE_NOTE}.",
        *PRECISION_NOTES,
        *(f"{t.name}: {note}" for t in tables for note in t.notes),
    ]
    return _list(points)


def _columns(manifest: dict[str, Any], tables: list[Table]) -> str:
    """Per CSV file, each column and what it holds (`columns.column_descriptions`)."""
    parts = []
    for table in tables:
        items = "".join(
            f"<dt>{escape(name)}</dt><dd>{escape(words)}</dd>"
            for name, words in column_descriptions(manifest, table)
        )
        parts.append(f"<h3>{escape(table.name)}</h3><dl>{items}</dl>")
    return "".join(parts)


def _method(manifest: dict[str, Any]) -> str:
    m = method(str(manifest.get("mechanism", "")))
    return (
        "".join(_p(p) for p in (*m.paragraphs, *setting_notes(manifest)))
        + f"<p><strong>Paper:</strong> {escape(m.paper)}</p>"
    )
