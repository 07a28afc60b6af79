"""CSV and TSV files into a typed Parquet copy, parsed and written block by block.

Problems raise `IngestError` with a message that says what is wrong, where (line, column) and
how to fix it.
"""

import csv
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dpportal.core import files
from dpportal.ingest.detect import DELIMITERS, TextFormat, detect_format
from dpportal.ingest.profile import ColumnProfile
from dpportal.ingest.scan import ByteScan, IngestError

MAX_FIELD_BYTES = 131072
BLOCK_BYTES = 4 << 20
NO_ROWS = "The file has column names but no data rows; add the data and try again."


@dataclass
class IngestResult:
    row_count: int
    columns: list[str]
    details: dict  # format, encoding, delimiter, header: how the file was read
    proposals: list[dict]


def ingest_text(
    path: Path, scan: ByteScan, parquet_path: Path, *, suffix: str, header: bool | None = None
) -> IngestResult:
    """Validate a CSV/TSV file and write its typed Parquet copy to `parquet_path`."""
    fmt = detect_format(path, scan, suffix=suffix, header=header)
    if fmt.quoted:  # pyarrow accepts text after a closing quote and unclosed quotes silently
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
    with (
        files.PrivateWriter(parquet_path) as sink,
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
            if "expected after" in str(exc):
                return _text_after_quote(handle, fmt, row_start)
            return _csv_error_message(str(exc), row_start, reader.line_num)
    return None


def _text_after_quote(handle, fmt: TextFormat, row_start: int) -> str:
    """Where in the record starting on line `row_start` a closing quote is followed by text."""
    handle.seek(0)
    for _ in range(row_start - 1):
        handle.readline()
    line, column, state, previous = row_start, 1, "start", ""
    for text in iter(lambda: handle.read(1 << 16), ""):
        for char in text:
            if char == "\r" or (char == "\n" and previous != "\r"):
                line += 1
            if state == "closed" and char not in (fmt.delimiter, '"', "\r", "\n"):
                name = fmt.names[column - 1] if column <= len(fmt.names) else "?"
                return (
                    f"Line {line}, column {column} ({name!r}) has text after a closing quote "
                    f"({char!r} follows the quote); put the whole value in quotes and double "
                    'any quote inside it (write "" for ").'
                )
            state, column = _next_state(state, char, fmt.delimiter, column)
            previous = char
    return _generic_problem()


def _next_state(state: str, char: str, delimiter: str, column: int) -> tuple[str, int]:
    """One step of RFC 4180 quoting: start of a field, unquoted, quoted, just after a quote."""
    if state in ("start", "unquoted", "closed") and char == delimiter:
        return "start", column + 1
    if state == "start":
        return ("quoted" if char == '"' else "unquoted"), column
    if state == "quoted":
        return ("closed" if char == '"' else "quoted"), column
    if state == "closed":  # a doubled quote inside a quoted value, or the end of the record
        return ("start", 1) if char in "\r\n" else ("quoted", column)
    return state, column


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
    return f"Line {line} cannot be read as CSV ({error}); fix that line and upload again."
