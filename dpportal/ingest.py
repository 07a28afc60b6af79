"""Reading uploaded tables: CSV, TSV and XLSX into one typed, columnar (Parquet) copy.

Everything streams in bounded memory: bytes are checked while they are written (`ByteScan`),
the text is parsed in blocks by pyarrow and written block by block to Parquet, and the profile
used for schema proposals is accumulated per block. Problems raise `IngestError` with a message
for the custodian that says what is wrong, where (line, column) and how to fix it.

The profile is computed from the raw data: it is shown to the owner only, marked "from your
data", and never becomes part of a release.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import os
import re
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

MAX_COLUMNS = 1000
MAX_FIELD_BYTES = 131072
MAX_NAME_CHARS = 200
HEAD_BYTES = 1 << 20
BLOCK_BYTES = 4 << 20
SAMPLE_ROWS = 1000
MAX_PROPOSED_CATEGORIES = 50
MAX_CATEGORY_CHARS = 100
DEFAULT_BINS = 10
DELIMITERS = {",": "comma", "\t": "tab", ";": "semicolon", "|": "vertical bar"}

# XLSX (a zip of XML parts): limits checked on the zip directory before anything is parsed.
XLSX_MAX_MEMBERS = 500
XLSX_MAX_TOTAL_BYTES = 1 << 30
XLSX_MAX_SHARED_STRINGS_BYTES = 32 << 20
XLSX_MAX_RATIO = 200
XLSX_RATIO_FLOOR = 1 << 20  # parts smaller than this may compress as well as they like
EXCEL_MAX_ROWS = 1_048_576

INT_RE = re.compile(r"[+-]?(0|[1-9][0-9]{0,17})")
FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
CP1252_UNDEFINED = re.compile(rb"[\x81\x8d\x8f\x90\x9d]")


NO_ROWS = "The file has column names but no data rows; add the data and try again."


class IngestError(Exception):
    """The file cannot be used; the message tells the custodian what is wrong and where."""


# ---------------------------------------------------------------- bytes, as they arrive


class ByteScan:
    """Facts gathered while the bytes stream past: hash, size, NUL bytes, UTF-8 validity.

    Kept cheap (plain ASCII chunks skip the UTF-8 decoder); positions are worked out later, and
    only for files that are refused.
    """

    def __init__(self):
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.quotes = 0
        self.head = bytearray()
        self.nul_offset: int | None = None
        self.utf8_valid = True
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def update(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        if len(self.head) < HEAD_BYTES:
            self.head += chunk[: HEAD_BYTES - len(self.head)]
        if self.nul_offset is None and b"\0" in chunk:
            self.nul_offset = self.size + chunk.index(b"\0")
        if self.utf8_valid and not (chunk.isascii() and not self._utf8.getstate()[0]):
            try:
                self._utf8.decode(chunk)
            except UnicodeDecodeError:
                self.utf8_valid = False
        if b'"' in chunk:
            self.quotes += chunk.count(b'"')
        self.size += len(chunk)

    def finish(self) -> None:
        if self.utf8_valid:
            try:
                self._utf8.decode(b"", final=True)
            except UnicodeDecodeError:
                self.utf8_valid = False

    @property
    def hexdigest(self) -> str:
        return self.sha256.hexdigest()


def scan_file(path: Path) -> ByteScan:
    """A `ByteScan` of a file already on disk."""
    scan = ByteScan()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            scan.update(chunk)
    scan.finish()
    return scan


# ---------------------------------------------------------------- results


@dataclass
class ColumnProfile:
    """What the data says about one column (owner-only; feeds the schema proposal)."""

    name: str
    kind: str  # "int", "float" or "text"
    rows: int = 0
    missing: int = 0
    minimum: float | None = None
    maximum: float | None = None
    categories: set | None = field(default_factory=set)  # None once there are too many

    @property
    def present(self) -> int:
        return self.rows - self.missing

    def update(self, column: pa.ChunkedArray | pa.Array) -> None:
        self.rows += len(column)
        if self.kind == "text":
            self.missing += pc.sum(pc.equal(column, "")).as_py() or 0
            if self.categories is not None:
                self.categories.update(v for v in pc.unique(column).to_pylist() if v != "")
                if len(self.categories) > MAX_PROPOSED_CATEGORIES:
                    self.categories = None
            return
        self.missing += column.null_count
        if self.kind == "float":  # inf (also 1e309) and NaN never reach the profile or its JSON
            column = pc.filter(column, pc.is_finite(column))
        extremes = pc.min_max(column)
        low, high = extremes["min"].as_py(), extremes["max"].as_py()
        if low is not None:
            self.minimum = low if self.minimum is None else min(self.minimum, low)
            self.maximum = high if self.maximum is None else max(self.maximum, high)

    def proposal(self) -> dict:
        """A proposed schema entry; `from_data` lists the values that came from the data.

        Text with a few repeated values is proposed as categorical; text whose values are all
        different (identifiers, free text) or too many is proposed as ignored.
        """
        base = {"name": self.name, "missing": self.missing}
        if self.kind != "text" and self.minimum is not None:
            upper = self.maximum if self.maximum > self.minimum else self.minimum + 1
            proposal = base | {
                "type": "numeric",
                "lower": _plain(self.minimum),
                "upper": _plain(upper),
                "bins": DEFAULT_BINS,
                "from_data": ["lower", "upper"],
            }
            if self.kind == "int" and upper - self.minimum < DEFAULT_BINS:
                proposal["bins"] = int(upper - self.minimum) + 1  # one bin per whole number
                proposal["from_data"].append("bins")
            return proposal
        usable = (
            self.categories
            and all(len(c) <= MAX_CATEGORY_CHARS for c in self.categories)
            and (len(self.categories) == 1 or len(self.categories) < self.present)
        )
        if usable:
            return base | {
                "type": "categorical",
                "categories": sorted(self.categories),
                "unknown": "other",
                "from_data": ["categories"],
            }
        return base | {"type": "ignored", "from_data": []}


def _plain(value):
    """An integral float as an int, so proposals read 17 rather than 17.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


@dataclass
class IngestResult:
    row_count: int
    columns: list[str]
    details: dict  # format, encoding, delimiter, header: how the file was read
    proposals: list[dict]


@dataclass
class TextFormat:
    encoding: str
    delimiter: str
    header: bool
    names: list[str]
    kinds: list[str]
    quoted: bool


# ---------------------------------------------------------------- content fingerprint
# The budget belongs to the data, not to the file: uploads with the same fingerprint share one.

FINGERPRINT_HASH_KEYS = ("dpportal-rows-k1", "dpportal-rows-k2")  # two 64-bit row hashes
FINGERPRINT_BATCH_ROWS = 1 << 16


def content_fingerprint(parquet_path: Path) -> str:
    """A hash of the parsed table that does not depend on the file that carried it.

    The same rows give the same fingerprint whatever their order, the column order, the format
    (CSV, TSV, XLSX), the encoding, a byte-order mark, quoting or line endings: each row is
    hashed (columns in name order, numbers as float64 so that 1, 1.0 and 1e0 agree) and the row
    hashes are summed modulo 2^64, twice with independent keys (so duplicate rows count).
    It cannot catch a changed table: one row edited, added or removed, a column dropped,
    renamed or re-coded all give a new fingerprint (and a new budget). Streams in batches.
    """
    import numpy as np
    from pandas.util import hash_pandas_object

    sums = np.zeros(len(FINGERPRINT_HASH_KEYS), dtype=np.uint64)
    with pq.ParquetFile(parquet_path) as parquet:
        names = sorted(parquet.schema_arrow.names)
        rows = parquet.metadata.num_rows
        for batch in parquet.iter_batches(batch_size=FINGERPRINT_BATCH_ROWS, columns=names):
            frame = batch.to_pandas()
            for name in names:
                if frame[name].dtype.kind in "iuf":
                    frame[name] = frame[name].astype("float64") + 0.0  # -0.0 becomes 0.0
            sums += np.array(
                [
                    hash_pandas_object(frame[names], index=False, hash_key=key)
                    .to_numpy()
                    .sum(dtype=np.uint64)
                    for key in FINGERPRINT_HASH_KEYS
                ],
                dtype=np.uint64,
            )  # arrays wrap around silently: sums modulo 2^64
    summary = "\x1f".join([*names, str(rows), *(str(int(total)) for total in sums)])
    return hashlib.sha256(summary.encode()).hexdigest()


# ---------------------------------------------------------------- CSV / TSV


def ingest_text(
    path: Path, scan: ByteScan, parquet_path: Path, *, suffix: str, header: bool | None = None
) -> IngestResult:
    """Validate a CSV/TSV file and write its typed Parquet copy to `parquet_path`."""
    fmt = detect_format(path, scan, suffix=suffix, header=header)
    if scan.quotes % 2:  # an odd number of quotes: look for one that is never closed
        problem = _diagnose(path, fmt, quotes_only=True)
        if problem:
            raise IngestError(problem)
    try:
        rows, profiles = _write_parquet(path, fmt, parquet_path)
    except BaseException:
        parquet_path.unlink(missing_ok=True)
        raise
    if rows == 0:
        parquet_path.unlink(missing_ok=True)
        raise IngestError(NO_ROWS)
    details = {
        "format": "TSV" if fmt.delimiter == "\t" else "CSV",
        "encoding": "UTF-8" if fmt.encoding == "utf-8" else "Latin-1 / Windows-1252",
        "delimiter": DELIMITERS[fmt.delimiter],
        "header": fmt.header,
    }
    return IngestResult(rows, fmt.names, details, [p.proposal() for p in profiles])


def detect_format(path: Path, scan: ByteScan, *, suffix: str, header: bool | None) -> TextFormat:
    """Encoding, delimiter, header and column types, from the bytes and the first lines."""
    _refuse_binary(path, scan)
    encoding = _detect_encoding(path, scan)
    text = _head_text(scan, encoding)
    if not text.strip():
        raise IngestError("The file is empty; upload a table with column names in its first line.")
    delimiter = "\t" if suffix == ".tsv" else _detect_delimiter(text)
    rows = _sample_rows(text, delimiter)
    first = rows[0] if rows else []
    _check_width(first, text, delimiter)
    data_rows = rows[1:]
    kinds = [_kind_of([r[i] for r in data_rows if i < len(r)]) for i in range(len(first))]
    if header is None:
        header = _looks_like_header(first, kinds)
    names = _column_names(first) if header else [f"column_{i + 1}" for i in range(len(first))]
    if not header:
        kinds = [_kind_of([r[i] for r in rows if i < len(r)]) for i in range(len(first))]
    return TextFormat(encoding, delimiter, header, names, kinds, quoted=scan.quotes > 0)


def _refuse_binary(path: Path, scan: ByteScan) -> None:
    head = bytes(scan.head[:4])
    if scan.size == 0:
        raise IngestError("The file is empty; upload a table with column names in its first line.")
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise IngestError("The file is UTF-16 text; save it as 'CSV UTF-8' and upload again.")
    if head.startswith(b"PK\x03\x04"):
        raise IngestError(
            "This is a zip or Excel file, not CSV text; upload it with the "
            "extension .xlsx, or save it as CSV."
        )
    if head.startswith(b"\x1f\x8b"):
        raise IngestError("The file is compressed (gzip); uncompress it and upload the CSV.")
    if scan.nul_offset is not None:
        line = _line_at(path, scan.nul_offset)
        raise IngestError(
            f"Line {line} contains a NUL byte (\\0), so this is not a plain text "
            "table; save it as 'CSV UTF-8' and upload again."
        )


def _line_at(path: Path, offset: int) -> int:
    """The line number of a byte offset (counts newlines up to it; refused files only)."""
    newlines = 0
    with open(path, "rb") as handle:
        while offset > 0:
            chunk = handle.read(min(offset, 1 << 20))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            offset -= len(chunk)
    return newlines + 1


def _detect_encoding(path: Path, scan: ByteScan) -> str:
    """UTF-8 (with or without BOM) if valid, else Windows-1252 (a superset of Latin-1)."""
    if scan.utf8_valid:
        return "utf-8"
    newlines = 0
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            match = CP1252_UNDEFINED.search(chunk)
            if match:
                line = newlines + chunk.count(b"\n", 0, match.start()) + 1
                raise IngestError(
                    f"Line {line} has a byte (0x{match.group()[0]:02x}) that is neither UTF-8 "
                    "nor Latin-1 text; save the file as 'CSV UTF-8' and upload again."
                )
            newlines += chunk.count(b"\n")
    return "cp1252"


def _head_text(scan: ByteScan, encoding: str) -> str:
    head = bytes(scan.head)
    if scan.size > len(head) and b"\n" in head:
        head = head[: head.rindex(b"\n") + 1]  # whole lines only
    text = head.decode("utf-8-sig" if encoding == "utf-8" else encoding, errors="replace")
    return text


def _sample_rows(text: str, delimiter: str) -> list[list[str]]:
    rows = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        for row in reader:
            if row:
                rows.append(row)
            if len(rows) > SAMPLE_ROWS:
                break
    except csv.Error:
        pass  # e.g. a quoted value running past the sample; the full parse will say where
    return rows


def _detect_delimiter(text: str) -> str:
    """The candidate that splits the first lines into the same number (> 1) of fields."""
    best, best_score = ",", (0, 0)
    for delimiter in DELIMITERS:
        rows = _sample_rows(text, delimiter)[:50]
        if not rows:
            continue
        width = len(rows[0])
        consistent = sum(len(r) == width for r in rows)
        score = (consistent, width) if width > 1 else (0, 0)
        if score > best_score:
            best, best_score = delimiter, score
    return best


def _check_width(first: list[str], text: str, delimiter: str) -> None:
    first_line = text.split("\n", 1)[0]
    width = max(len(first), first_line.count(delimiter) + 1)
    if width > MAX_COLUMNS:
        raise IngestError(
            f"The file has {width} columns; the limit is {MAX_COLUMNS}. "
            "Keep only the columns you need and upload again."
        )
    if not first:
        raise IngestError(
            "The first line could not be read as column names; check the file is a CSV table."
        )


def _kind_of(values: list[str]) -> str:
    present = [v for v in values if v != ""]
    if not present:
        return "text"
    if all(INT_RE.fullmatch(v) for v in present):
        return "int"
    if all(FLOAT_RE.fullmatch(v) and not re.match(r"[+-]?0[0-9]", v) for v in present):
        return "float"
    return "text"


def _looks_like_header(first: list[str], kinds: list[str]) -> bool:
    """No header when a numeric column's first value is a number too (data, not a name)."""
    return not any(
        k != "text" and _kind_of([v]) != "text" for v, k in zip(first, kinds, strict=False)
    )


def _column_names(first: list[str]) -> list[str]:
    names = [n.strip() for n in first]
    seen: dict[str, int] = {}
    for position, name in enumerate(names, start=1):
        if not name:
            raise IngestError(
                f"Column {position} has no name in the first line; give every column a name."
            )
        if len(name) > MAX_NAME_CHARS:
            raise IngestError(
                f"Column {position}'s name is {len(name)} characters long; the "
                f"limit is {MAX_NAME_CHARS}."
            )
        if name in seen:
            raise IngestError(
                f"Column names must be unique: {name!r} is the name of columns "
                f"{seen[name]} and {position}; rename one of them."
            )
        seen[name] = position
    return names


ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "text": pa.string()}
WIDER = {"int": "float", "float": "text"}


def _write_parquet(path: Path, fmt: TextFormat, parquet_path: Path):
    """Parse in blocks and write the Parquet copy; a column whose type guess fails is widened."""
    while True:
        try:
            return _write_parquet_once(path, fmt, parquet_path)
        except pa.ArrowInvalid as exc:
            if "Empty CSV file" in str(exc) or "Could not skip initial" in str(exc):
                raise IngestError(NO_ROWS) from None
            index = _failed_conversion_column(str(exc))
            if index is None or fmt.kinds[index] == "text":
                raise IngestError(_diagnose(path, fmt) or _generic_problem()) from None
            fmt.kinds[index] = WIDER[fmt.kinds[index]]


def _failed_conversion_column(message: str) -> int | None:
    match = re.search(r"In CSV column #(\d+): .*conversion error", message)
    return int(match.group(1)) if match else None


def _generic_problem() -> str:
    return (
        "The file could not be read as a table; check it is a CSV or TSV file with the same "
        "number of values on every line."
    )


def _write_parquet_once(path: Path, fmt: TextFormat, parquet_path: Path):
    reader = pa_csv.open_csv(
        path,
        read_options=pa_csv.ReadOptions(
            column_names=fmt.names,
            skip_rows=int(fmt.header),
            block_size=BLOCK_BYTES,
            encoding="utf8" if fmt.encoding == "utf-8" else "cp1252",
        ),
        parse_options=pa_csv.ParseOptions(delimiter=fmt.delimiter, newlines_in_values=fmt.quoted),
        convert_options=pa_csv.ConvertOptions(
            column_types={n: ARROW_TYPES[k] for n, k in zip(fmt.names, fmt.kinds, strict=True)},
            null_values=[""],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            check_utf8=fmt.encoding != "utf-8",
        ),
    )
    profiles = [ColumnProfile(n, k) for n, k in zip(fmt.names, fmt.kinds, strict=True)]
    text_columns = [n for n, k in zip(fmt.names, fmt.kinds, strict=True) if k == "text"]
    rows, pending = 0, None
    fd = os.open(parquet_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with (
        os.fdopen(fd, "wb") as sink,
        pq.ParquetWriter(sink, reader.schema, use_dictionary=text_columns) as writer,
        ThreadPoolExecutor(max_workers=1) as write_thread,
    ):
        for batch in reader:  # parse the next block while the previous one is written
            _check_field_sizes(batch, fmt, rows)
            for profile, column in zip(profiles, batch.columns, strict=True):
                profile.update(column)
            if pending is not None:
                pending.result()
            pending = write_thread.submit(writer.write_batch, batch)
            rows += batch.num_rows
        if pending is not None:
            pending.result()
    return rows, profiles


def _check_field_sizes(batch: pa.RecordBatch, fmt: TextFormat, rows_before: int) -> None:
    for name, kind, column in zip(fmt.names, fmt.kinds, batch.columns, strict=True):
        if kind != "text" or not len(column):
            continue
        lengths = pc.binary_length(column)
        longest = pc.max(lengths).as_py()
        if longest > MAX_FIELD_BYTES:
            row = rows_before + pc.index(lengths, longest).as_py() + 1
            raise IngestError(
                f"The value in column {name!r} on data row {row:,} is "
                f"{longest:,} bytes long; the limit is {MAX_FIELD_BYTES:,}. "
                "Shorten it, or remove the column before uploading."
            )


def _diagnose(path: Path, fmt: TextFormat, quotes_only: bool = False) -> str | None:
    """Find the first malformed line with Python's strict CSV reader (slow; failures only)."""
    csv.field_size_limit(MAX_FIELD_BYTES)
    encoding = "utf-8-sig" if fmt.encoding == "utf-8" else fmt.encoding
    with open(path, encoding=encoding, newline="") as handle:
        reader = csv.reader(handle, delimiter=fmt.delimiter, strict=True)
        row_start = 1
        try:
            for row in reader:
                problem = None if quotes_only else _row_problem(row, fmt, reader.line_num)
                if problem:
                    return problem
                row_start = reader.line_num + 1
        except csv.Error as exc:
            return _csv_error_message(str(exc), row_start, reader.line_num)
    return None


def _row_problem(row: list[str], fmt: TextFormat, line: int) -> str | None:
    if row and len(row) != len(fmt.names):
        return (
            f"Line {line} has {len(row)} values but the first line has {len(fmt.names)} "
            "columns; every line needs one value per column (quote values that contain "
            f"the {DELIMITERS[fmt.delimiter]})."
        )
    return None


def _csv_error_message(error: str, row_start: int, line: int) -> str:
    if "field larger than field limit" in error:
        return (
            f"Line {row_start} starts a value longer than {MAX_FIELD_BYTES} characters, "
            'usually a quote (") that is never closed; close the quote or shorten the value.'
        )
    if "unexpected end of data" in error or "EOF" in error:
        return (
            f'Line {row_start} starts a quoted value whose closing quote (") is missing; '
            "add the closing quote."
        )
    if "expected after" in error:
        return (
            f"Line {line} has a closing quote followed by other characters; double the "
            'quote ("") inside quoted values.'
        )
    return f"Line {line} cannot be read as CSV ({error}); fix that line and upload again."


# ---------------------------------------------------------------- XLSX


def check_xlsx_container(path: Path) -> None:
    """Refuse zip bombs, external links, macros and XML entity tricks before parsing."""
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
            if member.filename.endswith((".xml", ".rels")):
                _refuse_doctype(archive, member)


def _check_xlsx_members(members) -> None:
    names = {m.filename for m in members}
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
    with archive.open(member) as part:
        start = part.read(4096)
    if b"<!DOCTYPE" in start.upper() or b"<!ENTITY" in start.upper():
        raise IngestError(
            f"The workbook part {member.filename!r} declares XML entities, which "
            "Excel never writes; save the workbook again from Excel."
        )


def xlsx_to_csv(path: Path, csv_path: Path) -> None:
    """Write the first sheet's values to a UTF-8 CSV; refuse formulas (values only)."""
    import openpyxl

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
        fd = os.open(csv_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
                _write_sheet(workbook.worksheets[0], csv.writer(out))
        finally:
            workbook.close()


def _write_sheet(sheet, writer) -> None:
    sheet.reset_dimensions()  # trust the cells, not the sheet's declared size
    width, blank = None, None
    for number, row in enumerate(sheet.iter_rows(max_col=MAX_COLUMNS + 1), start=1):
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
