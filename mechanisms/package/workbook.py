"""release.xlsx: an "About" sheet with the guarantee, then one sheet per released table.

Numbers are stored as numbers (whole counts with a whole-number format), text cells as text
(never as formulas, whatever they start with), intervals beside their estimates (the Table's
order), each header frozen on screen.

openpyxl writes the About sheet and each table's header (widths, bold, frozen pane); the
tables' rows are written as sheet XML a column at a time by pyarrow (`_rows_xml`), not cell
by cell through openpyxl: 100,000 rows of 7 columns took 10.7 CPU s that way, most of a
release's package (benchmarks/package_build.py). A sheet holds the first MAX_ROWS rows of
its table; the About sheet and README.txt say so where a table is longer, and its CSV has
every row.

Every part of the workbook is deflated at zlib's level 3 (LEVEL), not its default 6: on a
sheet of 100,000 synthetic rows of 8 columns (35.6 MB of XML) level 6 took .19 CPU s and
made release.xlsx 1.56 MB, level 3 .07 s and 2.01 MB (29% larger; the portal's zip stores
it as it is, 3% of that download of 13.5 MB). Level 1 took as long as 3 (.07 s) for 2.42 MB;
levels 4 and 5 .11 and .12 s for 2.07 and 1.83 MB.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.cell.cell import Cell as SheetCell
from openpyxl.styles import Font
from openpyxl.worksheet._write_only import WriteOnlyWorksheet

from mechanisms.package.columns import column_descriptions
from mechanisms.package.context import (
    PackageContext,
    budget_sentence,
    guarantee_sentences,
    mechanism_title,
    publisher_sentences,
    released_columns,
)
from mechanisms.package.readme import file_descriptions
from mechanisms.package.tables import (
    NEGATIVE_NOTE,
    PRECISION_NOTES,
    WORKBOOK_ROWS,
    Cell,
    Table,
    column_fields,
    joined_lines,
)

MAX_ROWS = WORKBOOK_ROWS  # per sheet: the CSV beside it has every row
LEVEL = 3  # zlib's level for every part of the workbook (the module docstring gives the trade)
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
    rows = {f"xl/worksheets/sheet{k + 2}.xml": _rows_xml(t) for k, t in enumerate(tables)}
    return _with_rows(out.getvalue(), rows)


_HEADINGS = ("The privacy guarantee", "Privacy budget of the dataset", "Numbers", "Sheets")


def _about_lines(
    manifest: dict[str, Any], tables: list[Table], context: PackageContext
) -> list[str]:
    described = file_descriptions(manifest)
    lines = [
        context.title,
        f"{mechanism_title(manifest)} of the columns {', '.join(released_columns(manifest))}"
        + (f" (dataset: {context.dataset})" if context.dataset else ""),
        *publisher_sentences(context),
        *([context.note] if context.note else []),
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
        lines += [f"  {name}: {words}" for name, words in column_descriptions(manifest, table)]
    return lines


def sheet_name(file_name: str) -> str:
    """A valid sheet name for a released file: its stem, at most 31 allowed characters."""
    return re.sub(r"[\[\]:*?/\\]", "_", file_name.removesuffix(".csv"))[:31] or "table"


def _table_sheet(sheet: WriteOnlyWorksheet, table: Table) -> None:
    """The sheet's header; its rows are added by `_with_rows`."""
    sheet.freeze_panes = "A2"
    for k, name in enumerate(table.header):
        _width(sheet, k, max(12, min(60, len(name) + 4)))
    sheet.append([_cell(sheet, h, bold=True) for h in table.header])


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # no XML 1.0 form
EMPTY_CELL = "<c/>"


def _rows_xml(table: Table) -> list[memoryview]:
    """Rows 2.. of a table's sheet (its first MAX_ROWS rows) as SpreadsheetML, built by column.

    A number is a number cell (`t="n"`), text an inline string (`t="inlineStr"`: text, never
    a formula), an empty value (or empty text) an empty cell; characters XML cannot hold are
    dropped. Rows and cells carry no `r` reference (optional in SpreadsheetML: they follow
    each other), so a cell's XML depends on its value alone and is made once per distinct
    value (`column_fields`, as the CSV's fields are); rows are joined by pyarrow from those
    (`joined_lines`), not cell by cell in Python, and handed to the zip file as views of
    pyarrow's buffers, one per block of rows, not copied.
    """
    if table.frame.head(MAX_ROWS).empty:
        return []
    columns = [
        column_fields(
            table.distinct(name, MAX_ROWS),
            table.is_numeric(name),
            _number_cells,
            _text_cell,
            EMPTY_CELL,
        )
        for name in table.header
    ]
    return joined_lines(columns, "", "<row>", "</row>")


def _number_cells(values: pa.Array) -> pa.Array:
    """Number cells (`t="n"`) of distinct numbers."""
    return pc.binary_join_element_wise('<c t="n"><v>', pc.cast(values, pa.string()), "</v></c>", "")


def _text_cell(value: Any) -> str:
    """A text cell (an inline string), or an empty cell for empty text."""
    text = (
        _NOT_XML.sub("", str(value)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    )
    if not text:
        return EMPTY_CELL
    return '<c t="inlineStr"><is><t xml:space="preserve">' + text + "</t></is></c>"


def _with_rows(content: bytes, rows: dict[str, list[memoryview]]) -> bytes:
    """The workbook `content` with each named sheet's rows written after its header."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(content)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for item in source.infolist():
            head, end, tail = source.read(item).partition(b"</sheetData>")
            added = rows.get(item.filename, []) if end else []
            member = b"".join([head, *added, end, tail])
            target.writestr(item, member, zipfile.ZIP_DEFLATED, LEVEL)
    return out.getvalue()


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


def _cell(sheet: WriteOnlyWorksheet, value: Cell, *, bold: bool = False) -> SheetCell:
    """A cell of the About sheet or a header, text without the characters XML cannot hold.

    A control character typed into a dataset's publishing details (stored before they were
    refused) must not stop every package of its releases from being built.
    """
    if isinstance(value, str):
        value = _NOT_XML.sub("", value)
    cell = WriteOnlyCell(sheet, value=value)
    if isinstance(value, str):
        cell.data_type = "s"  # text is text: "=..." must not become a formula
    if bold:
        cell.font = BOLD
    return cell
