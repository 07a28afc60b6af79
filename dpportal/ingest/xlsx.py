"""Excel workbooks (.xlsx): the container checked first, then the first sheet's values
written out as a UTF-8 CSV (which `text.ingest_text` then reads).

XML safety, twice over: every XML part is parsed in full here and refused if it declares a
DOCTYPE or an entity (anywhere, in any encoding), and openpyxl itself parses through defusedxml
(pinned; openpyxl uses it whenever it is installed), which forbids entities and external
references.
"""

import csv
import zipfile
from pathlib import Path
from xml.parsers import expat

from dpportal.core import files
from dpportal.ingest.detect import MAX_COLUMNS
from dpportal.ingest.scan import IngestError

# XLSX (a zip of XML parts): limits checked on the zip directory before anything is parsed.
XLSX_MAX_MEMBERS = 500
XLSX_MAX_TOTAL_BYTES = 1 << 30
XLSX_MAX_SHARED_STRINGS_BYTES = 32 << 20
XLSX_MAX_RATIO = 200
XLSX_RATIO_FLOOR = 1 << 20  # parts smaller than this may compress as well as they like
EXCEL_MAX_ROWS = 1_048_576
CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # Excel's encrypted workbooks and old .xls
# Parts that are not XML (images, embedded objects, printer settings); every other part is
# parsed in full before openpyxl sees the workbook.
NOT_XML_FOLDERS = ("xl/media/", "xl/embeddings/", "xl/printerSettings/", "docProps/thumbnail")
NOT_XML_SUFFIXES = (".bin", ".png", ".jpeg", ".jpg", ".gif", ".bmp", ".tif", ".tiff", ".emf")


def check_xlsx_container(path: Path) -> None:
    """Refuse zip bombs, external links, macros and XML entity tricks before parsing."""
    with open(path, "rb") as handle:
        if handle.read(len(CFB_MAGIC)) == CFB_MAGIC:
            raise IngestError(
                "The workbook is password-protected (encrypted) or an old .xls file; remove "
                "the password or save it as .xlsx (Excel Workbook), then upload again."
            )
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        raise IngestError(
            "The file is not a valid .xlsx workbook (it is not a zip archive); "
            "save it again from your spreadsheet program."
        ) from None
    with archive:
        members = archive.infolist()
        _check_xlsx_members(members)
        for member in members:
            _refuse_doctype(archive, member)


def _check_xlsx_members(members) -> None:
    names = {m.filename for m in members}
    for name in names:
        if name.startswith(("/", "\\")) or "\\" in name or ".." in name.split("/"):
            raise IngestError(
                f"The workbook has a part named {name!r}, a path outside the workbook that "
                "Excel never writes; save the workbook again from Excel."
            )
    if any(m.flag_bits & 0x1 for m in members):
        raise IngestError(
            "The workbook's parts are encrypted (password-protected zip); remove the password "
            "and upload again."
        )
    if len(members) > XLSX_MAX_MEMBERS:
        raise IngestError(
            f"The workbook has {len(members)} parts; the limit is "
            f"{XLSX_MAX_MEMBERS}. Save the sheet on its own and upload again."
        )
    if "xl/workbook.xml" not in names:
        raise IngestError(
            "The file is a zip archive but not an Excel workbook (no "
            "xl/workbook.xml); save it as .xlsx and upload again."
        )
    if any(n.startswith("xl/externalLinks/") for n in names):
        raise IngestError(
            "The workbook links to other files (external links); copy the values "
            "into this workbook (Paste values), remove the links, and upload again."
        )
    if any(n.lower().endswith("vbaproject.bin") for n in names):
        raise IngestError("The workbook contains macros; save it as a plain .xlsx workbook.")
    total = sum(m.file_size for m in members)
    if total > XLSX_MAX_TOTAL_BYTES:
        raise IngestError(
            f"The workbook unpacks to {total:,} bytes; the limit is "
            f"{XLSX_MAX_TOTAL_BYTES:,}. Upload it as CSV instead."
        )
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > XLSX_RATIO_FLOOR and ratio > XLSX_MAX_RATIO:
            raise IngestError(
                f"The workbook part {member.filename!r} unpacks {ratio:,.0f} times "
                "larger than its stored size (a 'zip bomb'); upload CSV instead."
            )
        if (
            "sharedstrings" in member.filename.lower()
            and member.file_size > XLSX_MAX_SHARED_STRINGS_BYTES
        ):
            raise IngestError(
                f"The workbook's text table (shared strings) is "
                f"{member.file_size:,} bytes; the limit is "
                f"{XLSX_MAX_SHARED_STRINGS_BYTES:,}. Upload it as CSV instead."
            )


def _refuse_doctype(archive: zipfile.ZipFile, member) -> None:
    """Parse the whole part (streaming, any encoding the XML declares or its byte-order mark
    says) and refuse a document type declaration or entity anywhere in it."""
    name = member.filename
    if name.startswith(NOT_XML_FOLDERS) or name.lower().endswith(NOT_XML_SUFFIXES):
        return  # openpyxl never parses these
    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = _forbidden
    parser.EntityDeclHandler = _forbidden
    parser.ExternalEntityRefHandler = _forbidden
    try:
        with archive.open(member) as part:
            for chunk in iter(lambda: part.read(1 << 20), b""):
                parser.Parse(chunk, False)
            parser.Parse(b"", True)
    except _Declared:
        raise IngestError(
            f"The workbook part {member.filename!r} declares XML entities or a document type "
            "(<!DOCTYPE>), which Excel never writes; save the workbook again from Excel."
        ) from None
    except expat.ExpatError as exc:
        raise IngestError(
            f"The workbook part {member.filename!r} is not well-formed XML (line {exc.lineno}); "
            "save the workbook again from Excel."
        ) from None


class _Declared(Exception):
    """A part declares a DOCTYPE or an entity."""


def _forbidden(*_args):
    raise _Declared


def xlsx_to_csv(path: Path, csv_path: Path) -> None:
    """Write the first sheet's values to a UTF-8 CSV; refuse formulas (values only)."""
    import openpyxl  # here, not at the top: most processes that load the portal read no workbook

    check_xlsx_container(path)
    with open(path, "rb") as source:  # a handle: openpyxl would judge a path by its suffix
        try:
            workbook = openpyxl.load_workbook(
                source, read_only=True, data_only=False, keep_links=False
            )
        except Exception as exc:  # openpyxl raises many kinds on damaged files
            raise IngestError(
                f"The workbook could not be opened; save it again as .xlsx ({type(exc).__name__})."
            ) from None
        try:
            with files.PrivateWriter(csv_path, "w", encoding="utf-8", newline="") as out:
                _write_sheet(workbook.worksheets[0], csv.writer(out))
        finally:
            workbook.close()


def _write_sheet(sheet, writer) -> None:
    sheet.reset_dimensions()  # trust the cells, not the sheet's declared size
    width, blank = None, None
    for number, row in enumerate(_rows(sheet), start=1):
        if number > EXCEL_MAX_ROWS:
            raise IngestError(
                f"The sheet has more than {EXCEL_MAX_ROWS:,} rows, more than "
                "Excel allows; save it again from your spreadsheet program."
            )
        if row is blank:
            continue
        values = [_cell_value(cell) for cell in row]
        while values and values[-1] == "":
            values.pop()
        if not values:
            blank = row  # openpyxl repeats one tuple for missing rows: skip those fast
            continue
        if width is None:
            width = len(values)
            if width > MAX_COLUMNS:
                raise IngestError(
                    f"The sheet has more than {MAX_COLUMNS} columns; keep only "
                    "the columns you need and upload again."
                )
        elif len(values) > width:
            raise IngestError(
                f"Row {number} has a value in column {len(values)}, to the right "
                f"of the last named column ({width}); remove it or name the column."
            )
        writer.writerow(values + [""] * (width - len(values)))


def _rows(sheet):
    """The sheet's rows as openpyxl reads them (lazily); a cell it cannot read is refused."""
    rows = sheet.iter_rows(max_col=MAX_COLUMNS + 1)
    number = 1
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except (ValueError, IndexError, KeyError, TypeError, OverflowError):
            raise IngestError(_unreadable_row(number)) from None
        yield row
        number += 1


def _unreadable_row(number: int) -> str:
    return (
        f"Row {number} of the sheet has a cell that cannot be read: a text cell whose text is "
        "missing from the workbook, a date that does not exist (such as 29 February 1900, "
        "which Excel shows but which never was), or a number that is not a number. Open the "
        "workbook in your spreadsheet program, check that row, save it again as .xlsx (or as "
        "CSV UTF-8) and upload again."
    )


def _cell_value(cell) -> str:
    if getattr(cell, "data_type", None) == "f":
        raise IngestError(
            f"Cell {cell.coordinate} holds a formula; turn formulas into plain "
            "numbers (Copy, then Paste special: values) and upload again."
        )
    return _cell_text(getattr(cell, "value", None))


def _cell_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
