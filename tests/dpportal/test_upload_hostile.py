"""T22/T24: a corpus of malformed and hostile uploads. Each is refused through the upload page
with a 4xx and a message saying what is wrong (and where), never a 500, and nothing stays in
private storage or temporary folders."""

import codecs
import gzip
import html
import io
import subprocess
import sys
import tempfile
import zipfile

import openpyxl
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from dpportal import ingest
from dpportal.models import AuditEvent, Dataset
from tests.conftest import REPO_ROOT
from tests.helpers import make_user


def workbook_bytes(rows, formula_cell=None) -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    for row in rows:
        sheet.append(row)
    if formula_cell:
        sheet[formula_cell] = "=SUM(A2:A3)"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def rezip(data: bytes, add=None, replace=None, compresslevel=6) -> bytes:
    """A copy of a zip with parts added or replaced."""
    add, replace = add or {}, replace or {}
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=compresslevel) as target:
        for item in source.infolist():
            target.writestr(item.filename, replace.get(item.filename, source.read(item)))
        for name, content in add.items():
            target.writestr(name, content)
    return out.getvalue()


GOOD_BOOK = [["age", "sex"], [34, "F"], [51, "M"]]
BOMB = b"a\n" + b"0\n" * (8 << 20)  # 16 MB of one line: packs about 1000 to 1
NOISY_TABLE = b"a\n" + b"".join(b"%d\n" % (i * 7919 % 1000003) for i in range(300_000))


def deflated_zip(parts: dict) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, content in parts.items():
            archive.writestr(name, content)
    return out.getvalue()


def marked_encrypted(data: bytes) -> bytes:
    """The zip with its entries flagged encrypted (bit 0), as a zip password sets it."""
    data = bytearray(data)
    for marker, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        data[data.index(marker) + offset] |= 0x1
    return bytes(data)


def sheet_with_entities() -> bytes:
    book = workbook_bytes(GOOD_BOOK)
    sheet = zipfile.ZipFile(io.BytesIO(book)).read("xl/worksheets/sheet1.xml")
    evil = (
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    )
    body = sheet.split(b"?>", 1)[1] if sheet.startswith(b"<?xml") else sheet
    return rezip(book, replace={"xl/worksheets/sheet1.xml": evil + body})


def zip_bomb() -> bytes:
    return rezip(
        workbook_bytes(GOOD_BOOK),
        replace={"xl/worksheets/sheet1.xml": b" " * (20 << 20)},
        compresslevel=9,
    )


def many_parts() -> bytes:
    return rezip(
        workbook_bytes(GOOD_BOOK),
        add={f"xl/media/p{i}.bin": b"x" for i in range(ingest.XLSX_MAX_MEMBERS)},
    )


def huge_shared_strings() -> bytes:
    import os

    strings = "".join(f"<si><t>{os.urandom(40).hex()}</t></si>" for _ in range(4000))
    xml = (
        '<?xml version="1.0"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml'
        f'/2006/main">{strings}</sst>'
    ).encode()
    return rezip(workbook_bytes(GOOD_BOOK), add={"xl/sharedStrings.xml": xml})


def lower_shared_strings_limit(monkeypatch):
    monkeypatch.setattr(ingest.xlsx, "XLSX_MAX_SHARED_STRINGS_BYTES", 100_000)


def wide_header(columns: int) -> bytes:
    return (",".join(f"c{i}" for i in range(columns)) + "\n").encode() + b"1" * 1 + b"\n"


MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


def with_entities(part: str, padding: int = 0, encoding: str = "utf-8", bom: bool = False):
    """A good workbook whose `part` declares a DOCTYPE with entities, after `padding` bytes of
    whitespace in its prolog, written in `encoding` (with a byte-order mark if asked)."""
    book = workbook_bytes(GOOD_BOOK)
    names = zipfile.ZipFile(io.BytesIO(book)).namelist()
    original = (
        zipfile.ZipFile(io.BytesIO(book)).read(part).decode("utf-8")
        if part in names
        else f'<sst xmlns="{MAIN_NS}" count="0" uniqueCount="0"/>'
    )
    body = original.split("?>", 1)[1] if original.startswith("<?xml") else original
    text = (
        f'<?xml version="1.0" encoding="{encoding}"?>'
        + " " * padding
        + '<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">]>'
        + body
    )
    data = text.encode(encoding)
    if bom and encoding == "utf-8":
        data = codecs.BOM_UTF8 + data
    if part in names:
        return lambda: rezip(book, replace={part: data})
    return lambda: rezip(book, add={part: data})


ENTITY_CASES = [
    ("xlsx-doctype-after-4096-bytes", "xl/worksheets/sheet1.xml", 5000, "utf-8", False),
    ("xlsx-doctype-in-workbook-xml", "xl/workbook.xml", 5000, "utf-8", False),
    ("xlsx-doctype-in-shared-strings", "xl/sharedStrings.xml", 5000, "utf-8", False),
    ("xlsx-doctype-in-rels", "_rels/.rels", 5000, "utf-8", False),
    ("xlsx-doctype-in-content-types", "[Content_Types].xml", 5000, "utf-8", False),
    ("xlsx-doctype-with-bom", "xl/worksheets/sheet1.xml", 5000, "utf-8", True),
    ("xlsx-doctype-utf16-part", "xl/worksheets/sheet1.xml", 0, "utf-16", False),
]


# (id, filename, content or factory, fragment of the message, expected status, setup)
CORPUS = [
    (
        "over-limit-by-one-byte",
        "t.csv",
        b"a,b\n1,2\n" + b"3" * 10,
        "larger than the limit",
        413,
        "limit",
    ),
    ("empty", "t.csv", b"", "The file is empty", 400, None),
    ("blank-lines-only", "t.csv", b"\n\n   \r\n", "The file is empty", 400, None),
    ("header-only", "t.csv", b"a,b\n", "no data rows", 400, None),
    ("header-only-no-newline", "t.csv", b"a,b", "no data rows", 400, None),
    ("header-only-with-bom", "t.csv", codecs.BOM_UTF8 + b"a,b\r\n", "no data rows", 400, None),
    (
        "unterminated-quote",
        "t.csv",
        b'a,b\n1,"abc\n2,3\n4,5\n',
        "Line 2 starts a quoted value",
        400,
        None,
    ),
    (
        "long-value-in-multibyte-text",
        "t.csv",
        ("a,b\n1,2\n3," + "é" * 70_000 + "\n").encode(),
        "column 'b' on data row 2 is 140,000 bytes long",
        400,
        None,
    ),
    (
        "unterminated-quote-swallowing-the-file",
        "t.csv",
        b'a,b\n1,"' + b"x,y\n" * 40_000,
        "Line 2",
        400,
        None,
    ),
    ("1e5-columns", "t.csv", lambda: wide_header(100_000), "100000 columns", 400, None),
    ("1001-columns", "t.csv", lambda: wide_header(1001), "1001 columns", 400, None),
    (
        "1MB-field",
        "t.csv",
        b"a,b\n1,2\n3," + b"x" * (1 << 20) + b"\n",
        "The value in column 'b' on data row 2 is 1,048,576 bytes long",
        400,
        None,
    ),
    (
        "field-just-over-131072",
        "t.csv",
        b"a,b\n1," + b"x" * 131073 + b"\n",
        "The value in column 'b' on data row 1 is 131,073 bytes long",
        400,
        None,
    ),
    ("nul-byte-in-data", "t.csv", b"a,b\n1,2\n3,\x004\n", "Line 3 contains a NUL byte", 400, None),
    ("nul-byte-in-header", "t.csv", b"a\x00,b\n1,2\n", "Line 1 contains a NUL byte", 400, None),
    (
        "neither-utf8-nor-latin1",
        "t.csv",
        b"a,b\n1,2\n3,\x81\x8d\n",
        "Line 3 has a byte (0x81)",
        400,
        None,
    ),
    ("utf16", "t.csv", codecs.BOM_UTF16_LE + "a,b\n1,2\n".encode("utf-16-le"), "UTF-16", 400, None),
    ("png-named-csv", "t.csv", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "NUL byte", 400, None),
    ("gzip-bomb", "t.csv.gz", lambda: gzip.compress(BOMB, 9), "as a 'zip bomb' does", 400, None),
    ("zip-bomb", "t.zip", lambda: deflated_zip({"t.csv": BOMB}), "as a 'zip bomb' does", 400, None),
    (
        "gzip-unpacks-past-the-limit",
        "t.csv.gz",
        lambda: gzip.compress(NOISY_TABLE),
        "unpacks to more than the limit of 1 MB",
        400,
        "unpacked-limit",
    ),
    (
        "zip-unpacks-past-the-limit",
        "t.zip",
        lambda: deflated_zip({"t.csv": NOISY_TABLE}),
        "unpacks to more than the limit of 1 MB",
        400,
        "unpacked-limit",
    ),
    (
        "gzip-in-gzip",
        "t.csv.gz",
        lambda: gzip.compress(gzip.compress(b"a,b\n1,2\n")),
        "archives inside archives are refused",
        400,
        None,
    ),
    (
        "zip-of-two-tables",
        "t.zip",
        lambda: deflated_zip({"a.csv": b"a\n1\n", "b.csv": b"a\n1\n"}),
        "holds 2 files",
        400,
        None,
    ),
    (
        "zip-path-traversal",
        "t.zip",
        lambda: deflated_zip({"../../../etc/cron.d/t.csv": b"a\n1\n"}),
        "path traversal",
        400,
        None,
    ),
    (
        "zip-encrypted",
        "t.zip",
        lambda: marked_encrypted(deflated_zip({"t.csv": b"a\n1\n"})),
        "is encrypted (password-protected)",
        400,
        None,
    ),
    ("xlsx-named-csv", "t.csv", lambda: workbook_bytes(GOOD_BOOK), "zip or Excel file", 400, None),
    (
        "duplicate-headers",
        "t.csv",
        b"a,b,a\n1,2,3\n",
        "'a' is the name of columns 1 and 3",
        400,
        None,
    ),
    (
        "duplicate-headers-after-trim",
        "t.csv",
        b"a, a\n1,2\n",
        "'a' is the name of columns 1 and 2",
        400,
        None,
    ),
    ("empty-header-name", "t.csv", b"a,,c\n1,2,3\n", "Column 2 has no name", 400, None),
    ("overlong-column-name", "t.csv", b"a," + b"n" * 300 + b"\n1,2\n", "300 characters", 400, None),
    ("too-many-values", "t.csv", b"a,b\n1,2\n3,4,5\n", "Line 3 has 3 values", 400, None),
    ("too-few-values", "t.csv", b"a,b,c\n1,2,3\n4,5\n", "Line 3 has 2 values", 400, None),
    ("unsupported-extension", "t.json", b'{"a": 1}', "cannot be read", 400, None),
    ("no-extension", "datafile", b"a,b\n1,2\n", "cannot be read", 400, None),
    ("xlsx-not-a-zip", "t.xlsx", b"a,b\n1,2\n", "not a zip archive", 400, None),
    ("zip-without-workbook", "t.xlsx", lambda: _plain_zip(), "not an Excel workbook", 400, None),
    (
        "xlsx-external-link",
        "t.xlsx",
        lambda: rezip(
            workbook_bytes(GOOD_BOOK),
            add={"xl/externalLinks/externalLink1.xml": b"<externalLink/>"},
        ),
        "external links",
        400,
        None,
    ),
    (
        "xlsx-macros",
        "t.xlsx",
        lambda: rezip(workbook_bytes(GOOD_BOOK), add={"xl/vbaProject.bin": b"\x00" * 10}),
        "macros",
        400,
        None,
    ),
    ("xlsx-zip-bomb", "t.xlsx", zip_bomb, "zip bomb", 400, None),
    (
        "xlsx-huge-shared-strings",
        "t.xlsx",
        huge_shared_strings,
        "shared strings",
        400,
        "shared-strings",
    ),
    ("xlsx-xml-entities", "t.xlsx", sheet_with_entities, "declares XML entities", 400, None),
    ("xlsx-too-many-parts", "t.xlsx", many_parts, "parts; the limit", 400, None),
    (
        "xlsx-formula-cell",
        "t.xlsx",
        lambda: workbook_bytes(GOOD_BOOK, formula_cell="A4"),
        "Cell A4 holds a formula",
        400,
        None,
    ),
    ("xlsx-empty-sheet", "t.xlsx", lambda: workbook_bytes([]), "The file is empty", 400, None),
    (
        "xlsx-header-only",
        "t.xlsx",
        lambda: workbook_bytes([["age", "sex"]]),
        "no data rows",
        400,
        None,
    ),
    (
        "xlsx-duplicate-headers",
        "t.xlsx",
        lambda: workbook_bytes([["a", "a"], [1, 2]]),
        "must be unique",
        400,
        None,
    ),
    (
        "xlsx-value-beyond-last-column",
        "t.xlsx",
        lambda: workbook_bytes([["a", "b"], [1, 2, 3]]),
        "Row 2 has a value in column 3",
        400,
        None,
    ),
    (
        "xlsx-damaged",
        "t.xlsx",
        lambda: rezip(workbook_bytes(GOOD_BOOK), replace={"xl/workbook.xml": b"<not-xml"}),
        "'xl/workbook.xml' is not well-formed XML",
        400,
        None,
    ),
    *[
        (case_id, "t.xlsx", with_entities(part, pad, enc, bom), "declares XML entities", 400, None)
        for case_id, part, pad, enc, bom in ENTITY_CASES
    ],
    (
        "utf8-with-some-latin1-lines",
        "t.csv",
        "name,city\n1,Zürich\n".encode() + "2,Zürich\n".encode("latin-1"),
        "Line 3 is not UTF-8",
        400,
        None,
    ),
    (
        "text-after-closing-quote",
        "t.csv",
        b'a,b\n1,2\n"abc"def,1\n',
        "Line 3, column 1 ('a') has text after a closing quote",
        400,
        None,
    ),
    (
        "text-after-closing-quote-in-a-multiline-value",
        "t.csv",
        b'a,b\n1,"x\ny"z\n',
        "Line 3, column 2 ('b') has text after a closing quote",
        400,
        None,
    ),
]


def _plain_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("readme.txt", "hello")
    return out.getvalue()


@pytest.fixture
def clean_dirs(settings, tmp_path, monkeypatch):
    """Fresh private storage and temporary folders, to check nothing is left in either."""
    storage, temp = tmp_path / "storage", tmp_path / "tmp"
    temp.mkdir()
    settings.DATASET_STORAGE_DIR = storage
    settings.FILE_UPLOAD_TEMP_DIR = str(temp)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return storage, temp


def test_the_corpus_has_at_least_30_refused_files():
    assert len(CORPUS) >= 30
    assert len({case[0] for case in CORPUS}) == len(CORPUS)


@pytest.mark.django_db
@pytest.mark.parametrize("case", CORPUS, ids=[c[0] for c in CORPUS])
def test_hostile_upload_is_refused_cleanly(case, clean_dirs, settings, monkeypatch):
    _id, filename, content, message, status, setup = case
    content = content() if callable(content) else content
    if setup == "limit":
        settings.MAX_UPLOAD_BYTES = len(content) - 1
    if setup == "unpacked-limit":  # the packed upload fits; the table inside does not
        settings.MAX_UPLOAD_BYTES = 1 << 20
        assert len(content) < settings.MAX_UPLOAD_BYTES < len(NOISY_TABLE)
    if setup == "shared-strings":
        lower_shared_strings_limit(monkeypatch)
    user = make_user("alice", "x")  # a custodian
    client = Client(raise_request_exception=False)
    client.force_login(user)
    response = client.post(
        reverse("dataset_upload"),
        {
            "name": "Hostile",
            "header": "auto",
            "epsilon_total": "1",
            "delta_total": "0",
            "neighbouring": "replace-one",
            "file": SimpleUploadedFile(filename, content),
        },
    )
    text = html.unescape(response.content.decode())
    assert response.status_code == status, text[-3000:]
    assert message in text, text[-3000:]
    assert "Nothing was stored" in text
    storage, temp = clean_dirs
    assert not storage.exists() or list(storage.iterdir()) == []
    assert list(temp.iterdir()) == []
    assert Dataset.objects.count() == 0
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.UPLOAD).exists()


MEMORY_SCRIPT = """
import resource
import sys
from pathlib import Path
# Address space: pyarrow's thread pools reserve much more than they use. Set here, not in a
# preexec_fn: a preexec_fn makes subprocess fork() rather than vfork(), and fork() runs the
# at-fork handlers of libraries the test worker has loaded (gRPC, from the Spark tests, restarts
# its poller in the child, which then aborts when close_fds closes the poller's epoll descriptor).
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from dpportal import ingest
path, out = Path(sys.argv[1]), Path(sys.argv[2])
scan = ingest.scan_file(path)
try:
    if path.suffix == ".xlsx":
        ingest.xlsx_to_csv(path, out.with_suffix(".csv"))
    else:
        ingest.ingest_text(path, scan, out, suffix=path.suffix, header=None)
    print("accepted")
except ingest.IngestError as exc:
    print("refused:", exc)
# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over from the forked parent (the
# whole pytest process) across exec, so it would measure the test runner, not the ingest.
status = Path("/proc/self/status").read_text().splitlines()
print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) // 1024)
"""
MEMORY_CAP_MB = 400


@pytest.mark.parametrize(
    "name, content",
    [
        ("bomb.xlsx", zip_bomb),
        ("field.csv", lambda: b"a,b\n1," + b"x" * (1 << 24) + b"\n"),
        ("wide.csv", lambda: wide_header(100_000)),
        ("lines.csv", lambda: b"a,b\n" + b"1,2\n" * 10**6),
    ],
)
def test_hostile_files_stay_under_a_memory_cap(tmp_path, name, content):
    """Ingest in a child process that caps its own address space (RLIMIT_AS); print and check
    its peak resident memory."""
    path = tmp_path / name
    path.write_bytes(content())

    result = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(path), str(tmp_path / "out.parquet")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.settings"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    verdict, peak_mb = result.stdout.splitlines()[0], int(result.stdout.splitlines()[-1])
    print(f"{name}: {verdict[:60]} peak RSS {peak_mb} MB (cap {MEMORY_CAP_MB} MB)")
    assert peak_mb < MEMORY_CAP_MB
    assert verdict.startswith("refused") == (name != "lines.csv")


def test_openpyxl_parses_workbooks_through_defusedxml():
    """defusedxml is pinned in requirements.txt; openpyxl uses it only when it is importable."""
    import openpyxl

    assert openpyxl.DEFUSEDXML is True


def test_the_encoding_check_reads_each_line_once(tmp_path):
    """Issue 41, item 14: the check that refuses Shift-JIS tests the line of each candidate
    pair once. A 1 MB line of 500,000 candidate pairs that is not Shift-JIS (its last pair is
    not) is read as Windows-1252 in well under a second, not 500,000 times over."""
    import time

    from dpportal.ingest.detect import _detect_encoding
    from dpportal.ingest.scan import scan_file

    path = tmp_path / "pairs.csv"
    path.write_bytes(b"a\n" + b"\x92A" * 500_000 + b"\x92 \n")
    started = time.perf_counter()
    assert _detect_encoding(path, scan_file(path)) == "cp1252"
    elapsed = time.perf_counter() - started
    print(f"\n1 MB line of 500,000 candidate pairs: {elapsed:.3f} s")
    assert elapsed < 2
