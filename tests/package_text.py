"""The text a reader sees in each file of a release package, for scanning it for leaks.

A PDF's text is extracted (pypdf), a workbook's cells are read back (openpyxl), a zip's members
are uncompressed; any other file is its bytes decoded. Compression and binary formats would
otherwise hide a leaked value from a byte search.
"""

import functools
import io
import zipfile

import openpyxl
import pypdf


@functools.lru_cache(maxsize=32)
def pdf_text(content: bytes) -> str:
    """The PDF's text, page by page. Kept per content: scans download the same report many
    times (every role, the zip and the file), and pypdf's extraction takes a while."""
    return "\n".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(content)).pages)


def xlsx_cells(content: bytes) -> dict[str, list[list]]:
    """Every sheet's rows of cell values (numbers as numbers), by sheet name."""
    book = openpyxl.load_workbook(io.BytesIO(content), read_only=True)
    return {s.title: [list(r) for r in s.iter_rows(values_only=True)] for s in book.worksheets}


def readable_text(name: str, content: bytes) -> str:
    if content.startswith(b"%PDF"):
        return pdf_text(content)
    if name.endswith(".xlsx"):
        return "\n".join(
            "\t".join("" if v is None else str(v) for v in row)
            for rows in xlsx_cells(content).values()
            for row in rows
        )
    if content.startswith(b"PK\x03\x04"):
        with zipfile.ZipFile(io.BytesIO(content)) as archive:
            return "\n".join(readable_text(n, archive.read(n)) for n in archive.namelist())
    return content.decode("utf-8", "replace")
