"""How a text table is written: encoding, delimiter, header, column names and types,
worked out from its bytes and first lines."""

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from dpportal.ingest.scan import ByteScan, IngestError
from mechanisms.archives import other_compressor

MAX_COLUMNS = 1000
MAX_NAME_CHARS = 200
SAMPLE_ROWS = 1000
DELIMITERS = {",": "comma", "\t": "tab", ";": "semicolon", "|": "vertical bar"}
INT_RE = re.compile(r"[+-]?(0|[1-9][0-9]{0,17})")
FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
CP1252_UNDEFINED = re.compile(rb"[\x81\x8d\x8f\x90\x9d]")
# One well-formed multi-byte UTF-8 character (no overlong forms, surrogates or code points
# above U+10FFFF). Latin-1 text almost never contains one (it would read like "Ã¼").
UTF8_MULTIBYTE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}"
    rb"|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}"
    rb"|\xf4[\x80-\x8f][\x80-\xbf]{2}"
)
# Text that is neither UTF-8 nor Latin-1, read as Windows-1252, shows two signs. (1) Runs of
# non-ASCII bytes: accented Latin letters come one or two at a time (Zürich, ação), while a word
# in Cyrillic or Greek code pages, or in a double-byte encoding (GBK, Big5, EUC-KR, EUC-JP,
# Shift-JIS), is a run of them (no-break space aside: "«\xa0" is French typography).
FOREIGN_RUN = re.compile(rb"[\x80-\x9f\xa1-\xff]{4}")
# (2) Shift-JIS, whose second bytes may be ASCII: two characters in a row whose first bytes are
# 0x81-0x9F (kana, common kanji, fullwidth signs), in a line that decodes as Shift-JIS (cp932).
SHIFT_JIS_PAIR = re.compile(rb"[\x81-\x9f][\x40-\x7e\x80-\xfc][\x81-\x9f][\x40-\x7e\x80-\xfc]")
EMPTY = "The file is empty; upload a table with column names in its first line."


@dataclass
class TextFormat:
    encoding: str
    delimiter: str
    header: bool
    names: list[str]
    kinds: list[str]
    quoted: bool


def detect_format(path: Path, scan: ByteScan, *, suffix: str, header: bool | None) -> TextFormat:
    """Encoding, delimiter, header and column types, from the bytes and the first lines."""
    _refuse_binary(path, scan)
    encoding = _detect_encoding(path, scan)
    text = _head_text(scan, encoding)
    if not text.strip():
        raise IngestError(EMPTY)
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
    head = bytes(scan.head[:6])
    if scan.size == 0:
        raise IngestError(EMPTY)
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise IngestError("The file is UTF-16 text; save it as 'CSV UTF-8' and upload again.")
    if head.startswith(b"PK\x03\x04"):
        raise IngestError(
            "This is a zip or Excel file, not CSV text; upload it with the "
            "extension .xlsx (a workbook) or .zip (an archive holding one table), or save it "
            "as CSV."
        )
    compressor = other_compressor(head)  # gzip and zip were unpacked before (`archive`)
    if compressor:
        raise IngestError(
            f"The file is compressed ({compressor}), which cannot be unpacked here; uncompress "
            "it and upload the CSV, or compress it with gzip (.csv.gz) or zip instead."
        )
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
    """UTF-8 (with or without BOM) if valid, else Windows-1252 (a superset of Latin-1).

    A file that is not valid UTF-8 but holds valid multi-byte UTF-8 sequences (such as ü as
    C3 BC) is a mix of encodings: read as Latin-1 it would turn Zürich into ZÃ¼rich, so it is
    refused, naming the first line that is not UTF-8. Text in another encoding (Shift-JIS,
    GBK, a Cyrillic code page: `_foreign_line`) is refused too, never read as Latin-1.
    """
    if scan.utf8_valid:
        return "utf-8"
    newlines, first_bad, mixed, undefined, foreign = 0, None, False, None, None
    for chunk in _whole_line_chunks(path):
        if first_bad is None:
            try:
                chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                first_bad = newlines + chunk.count(b"\n", 0, exc.start) + 1
        mixed = mixed or UTF8_MULTIBYTE.search(chunk) is not None
        match = undefined is None and CP1252_UNDEFINED.search(chunk)
        if match:
            undefined = (newlines + chunk.count(b"\n", 0, match.start()) + 1, match.group()[0])
        foreign = foreign or _foreign_line(chunk, newlines)
        newlines += chunk.count(b"\n")
    if foreign:
        raise IngestError(foreign)
    if mixed:
        raise IngestError(
            f"Line {first_bad} is not UTF-8, but other lines are: the file mixes two "
            "encodings. Open it in a spreadsheet or text editor, fix that line (and any "
            "others), and save the whole file as 'CSV UTF-8'."
        )
    if undefined:
        line, byte = undefined
        raise IngestError(
            f"Line {line} has a byte (0x{byte:02x}) that is neither UTF-8 "
            "nor Latin-1 text; save the file as 'CSV UTF-8' and upload again."
        )
    return "cp1252"


def _foreign_line(chunk: bytes, newlines_before: int) -> str | None:
    """A refusal naming the first line of `chunk` that is text in another encoding than
    Latin-1 (FOREIGN_RUN, or SHIFT_JIS_PAIR in a line that reads as Shift-JIS), or None.
    Lines that are UTF-8 are left to the mixed-encoding check."""
    starts = [
        _first_in_line(chunk, FOREIGN_RUN, lambda line: not _decodes(line, "utf-8")),
        _first_in_line(
            chunk,
            SHIFT_JIS_PAIR,
            lambda line: _decodes(line, "cp932") and not _decodes(line, "utf-8"),
        ),
    ]
    at = min((start for start in starts if start is not None), default=None)
    if at is None:
        return None
    line = newlines_before + chunk.count(b"\n", 0, at) + 1
    shown = chunk[at : at + 8].split(b"\n")[0].decode("cp1252", errors="replace")
    return (
        f"Line {line} is not UTF-8 and does not read as Latin-1 text either (read that way it "
        f"shows {shown!r}): the file seems to be in another encoding, such as Shift-JIS "
        "(Japanese), GBK or Big5 (Chinese), EUC-KR (Korean) or a Cyrillic or Greek code page. "
        "Open it in a spreadsheet or text editor and save it as 'CSV UTF-8', then upload again."
    )


def _first_in_line(chunk: bytes, pattern: re.Pattern, line_test) -> int | None:
    """Where `pattern` first matches in a line of `chunk` that passes `line_test` (each line is
    tested once, however often the pattern matches in it)."""
    tested_until = 0
    for match in pattern.finditer(chunk):
        if match.start() < tested_until:
            continue
        start = chunk.rfind(b"\n", 0, match.start()) + 1
        end = chunk.find(b"\n", match.start())
        tested_until = end if end >= 0 else len(chunk)
        if line_test(chunk[start:tested_until]):
            return match.start()
    return None


def _decodes(data: bytes, encoding: str) -> bool:
    try:
        data.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def _whole_line_chunks(path: Path):
    """The file in blocks of about 1 MB that end at a newline (so no character is split)."""
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            yield chunk + (handle.readline() if not chunk.endswith(b"\n") else b"")


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
