"""release.xlsx: an "About" sheet with the guarantee, then one sheet per released table.

Numbers are stored as numbers (whole counts with a whole-number format), text cells as text
(never as formulas, whatever they start with), intervals beside their estimates (the Table's
order), each header frozen on screen.
"""

from __future__ import annotations

import io
import re
from typing import Any

from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.cell.cell import Cell as SheetCell
from openpyxl.styles import Font
from openpyxl.worksheet._write_only import WriteOnlyWorksheet

from mechanisms.package.context import (
    PackageContext,
    budget_sentence,
    guarantee_sentences,
    mechanism_title,
    released_columns,
)
from mechanisms.package.readme import file_descriptions
from mechanisms.package.tables import NEGATIVE_NOTE, PRECISION_NOTES, Cell, Table

MAX_ROWS = 100_000  # per sheet (Excel's limit is 1,048,575): the CSV beside it has every row
BOLD = Font(bold=True)


def workbook_bytes(manifest: dict[str, Any], tables: list[Table], context: PackageContext) -> bytes:
    """The workbook as .xlsx bytes."""
    book = Workbook(write_only=True)
    about = book.create_sheet("About")
    _width(about, 0, 110)
    for line in _about_lines(manifest, tables, context):
        about.append([_cell(about, line, bold=line in _HEADINGS)])
    for table in tables:
        _table_sheet(book.create_sheet(sheet_name(table.name)), table)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


_HEADINGS = ("The privacy guarantee", "Privacy budget of the dataset", "Numbers", "Sheets")


def _about_lines(
    manifest: dict[str, Any], tables: list[Table], context: PackageContext
) -> list[str]:
    described = file_descriptions(manifest)
    lines = [
        context.title,
        f"{mechanism_title(manifest)} of the columns {', '.join(released_columns(manifest))}"
        + (f" (dataset: {context.dataset})" if context.dataset else ""),
        "",
        "The privacy guarantee",
        *guarantee_sentences(manifest),
    ]
    if context.budget:
        lines += ["", "Privacy budget of the dataset", budget_sentence(context.budget)]
    lines += ["", "Numbers", *PRECISION_NOTES, f"Negative noisy counts: {NEGATIVE_NOTE}."]
    lines += ["", "Sheets"]
    for table in tables:
        rows = len(table.frame)
        shown = (
            "" if rows <= MAX_ROWS else f" (first {MAX_ROWS:,} of {rows:,} rows: the CSV has all)"
        )
        lines.append(f"{sheet_name(table.name)}: {described.get(table.name, table.name)}{shown}")
        lines += [f"  {note}" for note in table.notes]
    return lines


def sheet_name(file_name: str) -> str:
    """A valid sheet name for a released file: its stem, at most 31 allowed characters."""
    return re.sub(r"[\[\]:*?/\\]", "_", file_name.removesuffix(".csv"))[:31] or "table"


def _table_sheet(sheet: WriteOnlyWorksheet, table: Table) -> None:
    sheet.freeze_panes = "A2"
    for k, name in enumerate(table.header):
        _width(sheet, k, max(12, min(60, len(name) + 4)))
    sheet.append([_cell(sheet, h, bold=True) for h in table.header])
    for row in table.head_rows(MAX_ROWS):
        sheet.append([_formula_safe(sheet, value) for value in row])


def _width(sheet: WriteOnlyWorksheet, k: int, width: int) -> None:
    """Set column k's width (write-only sheets have column_dimensions; the stubs omit it)."""
    sheet.column_dimensions[_letter(k)].width = width  # type: ignore[attr-defined]


def _letter(k: int) -> str:
    letters = ""
    k += 1
    while k:
        k, rest = divmod(k - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def _formula_safe(sheet: WriteOnlyWorksheet, value: Cell) -> Cell | SheetCell:
    """The value as it is (fast), or as a text cell if openpyxl would store it as a formula."""
    return _cell(sheet, value) if isinstance(value, str) and value.startswith("=") else value


def _cell(sheet: WriteOnlyWorksheet, value: Cell, *, bold: bool = False) -> SheetCell:
    cell = WriteOnlyCell(sheet, value=value)
    if isinstance(value, str):
        cell.data_type = "s"  # text is text: "=..." must not become a formula
    if bold:
        cell.font = BOLD
    return cell
