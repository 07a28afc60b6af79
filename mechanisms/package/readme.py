"""README.txt of a package: the release and its guarantee in plain words, and its files."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from mechanisms.accuracy import CONFIDENCE
from mechanisms.package.columns import description_lines
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
from mechanisms.package.tables import NEGATIVE_NOTE, PRECISION_NOTES, WORKBOOK_ROWS, Table

PACKAGE_FILES = {
    "manifest.json": "the technical record: mechanism, settings and privacy guarantee",
    "README.txt": "this file",
    "report.html": "the report: what was released, the guarantee, charts, how to read them",
    "report.pdf": "the same report as PDF, to print or deposit",
    "release.xlsx": "every table as a spreadsheet sheet, with an About sheet",
}


def _paragraph(text: str) -> str:
    return textwrap.fill(
        " ".join(text.split()),
        width=78,
        initial_indent="  ",
        subsequent_indent="  ",
        break_on_hyphens=False,
    )


def file_descriptions(manifest: dict[str, Any]) -> dict[str, str]:
    """What each file of the package holds: the mechanism's own words, then the package's."""
    return {**{str(k): str(v) for k, v in manifest.get("files", {}).items()}, **PACKAGE_FILES}


def readme_text(
    manifest: dict[str, Any],
    names: list[str],
    context: PackageContext,
    tables: Sequence[Table] = (),
) -> str:
    """A plain-language explanation of the package and its privacy guarantee.

    With what each column of its CSV `tables` holds (`columns.column_descriptions`).
    """
    described = file_descriptions(manifest)
    listing = "\n".join(
        textwrap.fill(
            f"{name}: {described.get(name, 'part of the release')}",
            width=78,
            initial_indent="  ",
            subsequent_indent="    ",
        )
        for name in names
    )
    what = _paragraph(
        f'A release of the kind "{mechanism_title(manifest)}", made from the columns '
        f"{', '.join(released_columns(manifest))} of a private table"
        + (f" ({context.dataset})" if context.dataset else "")
        + "."
    )
    guarantee = "\n".join(_paragraph(s) for s in guarantee_sentences(manifest))
    risk = "\n".join(_paragraph(s) for s in risk_of_release(manifest))
    budget = (
        "\nBudget\n"
        + "\n".join(
            _paragraph(s)
            for s in [budget_sentence(context.budget), *risk_of_budget(manifest, context.budget)]
        )
        + "\n"
        if context.budget
        else ""
    )
    limits = _paragraph(
        "The numbers are not exact: small counts in particular can be far off. Where a noisy "
        f"count is negative, its row says so in a note column ({NEGATIVE_NOTE}). Patterns that "
        "involve many rows are usually reliable. Where a file has ci_lower and ci_upper, "
        f"they are a {CONFIDENCE:.0%} margin of error: the true value they are for (see "
        f"Columns below) lies between them {round(100 * CONFIDENCE)} times in 100. Nothing in "
        "these files was computed by comparing with the private table."
    )
    columns = "\n".join(
        textwrap.fill(line, width=78, initial_indent="  ", subsequent_indent="    ")
        for line in description_lines(manifest, list(tables))
    )
    numbers = "\n".join(_paragraph(s) for s in PRECISION_NOTES)
    spreadsheets = _paragraph(
        "Text cells that begin with = + - @ or a tab were prefixed with an apostrophe (') so "
        "that a spreadsheet does not run them as formulas. release.xlsx holds the same tables "
        "with numbers as numbers" + _workbook_cap(tables) + "."
    )
    title = context.title
    about = "\n".join(
        _paragraph(s) for s in [context.reference, *publisher_sentences(context), context.note] if s
    )
    return f"""{title}
{"=" * len(title)}
{about}

What this is
{what}

What the guarantee means, in plain words
{guarantee}

The risk in words
{risk}
{budget}
What it does not mean
{limits}

Numbers
{numbers}

Files
{listing}

Columns
{columns or "  (no CSV files)"}

Spreadsheets
{spreadsheets}
"""


def _workbook_cap(tables: Sequence[Table]) -> str:
    """What release.xlsx leaves out of tables longer than a sheet holds, in words ("": none)."""
    long = [t for t in tables if len(t.frame) > WORKBOOK_ROWS]
    if not long:
        return ""
    which = ", ".join(f"{t.name} ({len(t.frame):,} rows)" for t in long)
    return f", but only the first {WORKBOOK_ROWS:,} rows of {which}: the CSV file has every row"
