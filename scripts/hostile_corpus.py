"""The red team's hostile-upload corpus (issue 13): every case says what the portal must do.

    python scripts/hostile_corpus.py OUT_DIR [--with-slow]

writes each case's bytes to OUT_DIR/<id>.bin and OUT_DIR/manifest.json (id, the file name to
upload it as, the expectation). tests/dpportal/test_hostile_corpus.py runs every case through
the real upload page and asserts the expectation: a refusal (HTTP 400 or 413) whose message
contains the given words, or an acceptance whose stored table holds exactly the given values;
never a server error.

TEXT_PAYLOADS and NUMBER_PAYLOADS are the strings every typed input of TYPED_INPUTS gets
(tests/dpportal/test_hostile_inputs.py): refused with a message that names what is wrong, or
kept and shown escaped on every page and inert in every CSV and workbook; never a server error.
"""

import argparse
import bz2
import codecs
import gzip
import io
import json
import lzma
import os
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import openpyxl

MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
PAYLOADS = {  # values a spreadsheet, a template engine, a browser or a database might run
    "formula_cmd": "=cmd|' /C calc'!A0",
    "formula_at": "@SUM(A1:A9)",
    "formula_plus": "+1+1",
    "formula_minus": "-2+3",
    "formula_hyperlink": '=HYPERLINK("https://evil.example","x")',
    "tab_prefix": "\t=1+1",
    "cr_prefix": "\r=1+1",
    "script": "<script>alert(1)</script>",
    "img": "<img src=x onerror=alert(1)>",
    "jinja": "{{7*7}}",
    "template_literal": "${7*7}",
    "sql": "'; DROP TABLE dpportal_dataset;--",
}
TEXT_PAYLOADS = {  # what people may type into a text box, PAYLOADS and more
    **PAYLOADS,
    "nul": "a\x00b",
    "control": "bell\x07 escape\x1b[31m vertical tab\x0b",
    "huge": "W" * 100_000,
    "bidi_override": "\u202egnp.exe",
    "zero_width": "a\u200bb\u200dc",
    "lookalike": "\u041effice",  # a Cyrillic O, then Latin letters
    "non_bmp": "\U0001d54f \U0001f4ca",
    "combining": "e" + "\u0301" * 40,
    "newlines": "one\r\ntwo\rthree\nfour",
    "fullwidth_formula": '\uff1dHYPERLINK("https://evil.example")',
    "after_separator": "x;=1+1",
    "entities": "&lt;b&gt; &amp;amp;",
    "blank": "   ",
}
NUMBER_PAYLOADS = {  # what people may type into a number box
    "overflow": "1e309",
    "largest": "1.7976931348623157e308",
    "negative_huge": "-1e308",
    "underflow": "1e-400",
    "nan": "NaN",
    "infinity": "Infinity",
    "negative_infinity": "-inf",
    "arabic_digits": "\u0661\u0662",
    "fullwidth_digits": "\uff11\uff12",
    "hex": "0x10",
    "underscore": "1_000",
    "comma_decimal": "0,5",
    "many_digits": "9" * 400,
    "exponent_overflow": "1e+999999999",
    "zero": "0",
    "negative": "-1",
    "padded": " 0.5 ",
}
# The typed inputs besides uploads that get every string above (tests/dpportal/
# test_hostile_inputs.py): the publishing details, the range questions in words and the
# analysts' allotments (its fields, by page).
TYPED_INPUTS = {
    "publishing details": ("publish_title", "publisher", "publish_contact", "publish_note"),
    "range questions in words": ("lo_0", "hi_1", "p1_0", "p2_1", "a_0", "b"),
    "allotments": ("email", "epsilon", "delta"),
}


@dataclass
class Case:
    """One hostile upload and what the portal must do with it."""

    id: str
    filename: str
    make: Callable[[], bytes]
    refuse: tuple[str, ...] = ()  # words the refusal must contain; empty: must be accepted
    table: dict = field(default_factory=dict)  # accepted: column -> exact stored values
    slow: bool = False

    @property
    def accepted(self) -> bool:
        """Whether the portal must accept the file."""
        return not self.refuse


def refused(case_id, filename, content, *words, slow=False) -> Case:
    """Make a case the portal must refuse with a message containing each of `words`."""
    return Case(case_id, filename, _factory(content), refuse=words, slow=slow)


def accepted(case_id, filename, content, table, slow=False) -> Case:
    """Make a case the portal must accept, storing `table` (column -> values) exactly."""
    return Case(case_id, filename, _factory(content), table=table, slow=slow)


def _factory(content) -> Callable[[], bytes]:
    return content if callable(content) else (lambda: content)


# ---------------------------------------------------------------- building blocks


def workbook(rows, formula_cell=None) -> bytes:
    """Return an .xlsx with `rows` in its first sheet (and a formula in `formula_cell`)."""
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    if formula_cell:
        book.active[formula_cell] = "=SUM(A2:A3)"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


GOOD_ROWS = [["age", "sex"], [34, "F"], [51, "M"]]


def rezip(data: bytes, parts: dict, level=6) -> bytes:
    """Return a copy of a zip with `parts` (name -> bytes) replacing or added to its own."""
    source = zipfile.ZipFile(io.BytesIO(data))
    merged = {i.filename: source.read(i) for i in source.infolist()} | parts
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as target:
        for name, content in merged.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(info, content)
    return out.getvalue()


def with_doctype(part: str, padding=0, encoding="utf-8", bom=False, declaration=None):
    """Return a factory of a good workbook whose `part` declares a DOCTYPE in its prolog."""
    declaration = declaration or '<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">]>'

    def make() -> bytes:
        book = workbook(GOOD_ROWS)
        names = zipfile.ZipFile(io.BytesIO(book)).namelist()
        if part in names:
            original = zipfile.ZipFile(io.BytesIO(book)).read(part).decode("utf-8")
        else:
            original = f'<sst xmlns="{MAIN_NS}" count="0" uniqueCount="0"/>'
        body = original.split("?>", 1)[1] if original.startswith("<?xml") else original
        prolog = f'<?xml version="1.0" encoding="{encoding}"?>' + " " * padding
        data = (prolog + declaration + body).encode(encoding)
        return rezip(book, {part: (codecs.BOM_UTF8 if bom else b"") + data})

    return make


def with_cell(old: str, new: str):
    """Return a factory of the good workbook with its cell XML `old` replaced by `new`."""

    def make() -> bytes:
        book = workbook(GOOD_ROWS)
        sheet = zipfile.ZipFile(io.BytesIO(book)).read("xl/worksheets/sheet1.xml").decode()
        assert old in sheet, old
        return rezip(book, {"xl/worksheets/sheet1.xml": sheet.replace(old, new).encode()})

    return make


def shared_strings_bomb() -> bytes:
    """Return a workbook whose text table (sharedStrings.xml) is 40 MB (limit 32 MB)."""
    strings = "".join(f"<si><t>{os.urandom(48).hex()}</t></si>" for _ in range(400_000))
    xml = f'<?xml version="1.0"?><sst xmlns="{MAIN_NS}">{strings}</sst>'.encode()
    return rezip(workbook(GOOD_ROWS), {"xl/sharedStrings.xml": xml})


def marked_encrypted(data: bytes) -> bytes:
    """Return the zip with every part marked encrypted (flag bit 0), as a zip password does."""
    out = bytearray(data)
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = out.find(signature)
        while at != -1:
            out[at + offset] |= 0x1
            at = out.find(signature, at + 4)
    return bytes(out)


def zip_of(parts: dict) -> bytes:
    """Return a plain zip of `parts` (name -> bytes)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, content in parts.items():
            archive.writestr(name, content)
    return out.getvalue()


def csv_of(rows) -> bytes:
    """Return UTF-8 CSV with every value quoted (quotes doubled), CRLF line ends."""
    lines = (",".join('"' + str(v).replace('"', '""') + '"' for v in row) for row in rows)
    return ("\r\n".join(lines) + "\r\n").encode()


SMALL = b"age,city\n34,Leeds\n51,York\n"
SMALL_TABLE = {"age": [34, 51], "city": ["Leeds", "York"]}
UTF8_LINE = "1,Zürich\n".encode()
LATIN1_LINE = "2,Zürich\n".encode("latin-1")
WESTERN = ["Crème brûlée à Orléans", "l’été «\xa0oui\xa0»", "O’Brien “quoted” – ok…", "Ærø Århus"]
CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # an encrypted workbook or an old .xls


def encoding_cases() -> list[Case]:
    """Return the encoding cases.

    UTF-16/32, mixed UTF-8 and Latin-1, Shift-JIS, GBK, EUC-KR and Cyrillic text (never read as
    Latin-1), NUL bytes, overlong forms, lone surrogates.
    """
    bom16 = codecs.BOM_UTF16_LE
    return [
        refused("utf16-le-bom", "t.csv", bom16 + "a,b\n1,2\n".encode("utf-16-le"), "UTF-16"),
        refused(
            "utf16-be-bom",
            "t.csv",
            codecs.BOM_UTF16_BE + "a,b\n1,2\n".encode("utf-16-be"),
            "UTF-16",
        ),
        refused("utf16-le-no-bom", "t.csv", "a,b\n1,2\n".encode("utf-16-le"), "NUL byte", "UTF-8"),
        refused("utf16-be-no-bom", "t.csv", "a,b\n1,2\n".encode("utf-16-be"), "NUL byte", "UTF-8"),
        refused("utf32-bom", "t.csv", "a,b\n1,2\n".encode("utf-32"), "UTF-8"),
        refused(
            "mixed-utf8-then-latin1",
            "t.csv",
            b"n,city\n" + UTF8_LINE + LATIN1_LINE,
            "Line 3 is not UTF-8",
            "save the whole file as 'CSV UTF-8'",
        ),
        refused(
            "mixed-latin1-header",
            "t.csv",
            "Größe,ü\n".encode("latin-1") + "1,ü\n".encode(),
            "Line 1 is not UTF-8",
        ),
        refused(
            "mixed-utf8-after-1mb-of-latin1",
            "t.csv",
            b"n,city\n" + LATIN1_LINE * 120_000 + UTF8_LINE,
            "Line 2 is not UTF-8",
        ),
        accepted("latin1-only", "t.csv", b"n,city\n" + LATIN1_LINE, {"city": ["Zürich"]}),
        refused(
            "shift-jis",
            "t.csv",
            "名前,都市\n田中,東京\n鈴木,大阪\n".encode("shift_jis"),
            "Line 1 is not UTF-8 and does not read as Latin-1",
            "Shift-JIS",
        ),
        refused(
            "shift-jis-ascii-second-bytes",  # 田中 is 93 63 92 86: no run of four high bytes
            "t.csv",
            "name,n\n田中,1\n".encode("shift_jis"),
            "Line 2 is not UTF-8 and does not read as Latin-1",
        ),
        refused("gbk", "t.csv", "名字,城市\n张伟,北京\n".encode("gbk"), "GBK"),
        refused("euc-kr", "t.csv", "이름,n\n김철수,1\n".encode("euc_kr"), "EUC-KR"),
        refused("cp1251", "t.csv", "имя,n\nИван,1\n".encode("cp1251"), "Cyrillic"),
        accepted(
            "cp1252-french-and-english",  # accents, curly quotes, guillemets, no-break spaces
            "t.csv",
            ("n,text\n" + "".join(f"{i},{t}\n" for i, t in enumerate(WESTERN))).encode("cp1252"),
            {"text": WESTERN},
        ),
        accepted(
            "cp1252-only", "t.csv", "n,price\n1,€7 – ok\n".encode("cp1252"), {"price": ["€7 – ok"]}
        ),
        accepted(
            "utf8-bom", "t.csv", codecs.BOM_UTF8 + "név,n\nÁron,1\n".encode(), {"név": ["Áron"]}
        ),
        accepted("utf8-4-byte", "t.csv", "n,e\n1,😀\n".encode(), {"e": ["😀"]}),
        refused("nul-byte", "t.csv", b"a,b\n1,2\n3,\x004\n", "Line 3 contains a NUL byte"),
        accepted("overlong-utf8-only", "t.csv", b"a,b\n1,\xc0\xaf\n", {"b": ["À¯"]}),
        refused(
            "overlong-utf8-in-utf8",
            "t.csv",
            b"a,b\n1,\xc3\xbc\n2,\xc0\xaf\n",
            "Line 3 is not UTF-8",
        ),
        accepted("lone-surrogate-only", "t.csv", b"a,b\n1,\xed\xa0\x80\n", {"b": ["í\xa0€"]}),
        refused(
            "lone-surrogate-in-utf8",
            "t.csv",
            b"a,b\n1,\xc3\xbc\n2,\xed\xa0\x80\n",
            "Line 3 is not UTF-8",
        ),
        refused(
            "undefined-cp1252-byte", "t.csv", b"a,b\n1,2\n3,\x81\n", "Line 3 has a byte (0x81)"
        ),
    ]


def structure_cases() -> list[Case]:
    """Ragged rows, quotes, line ends, huge widths, lengths and row counts, empty files."""
    return [
        refused("ragged-too-many", "t.csv", b"a,b\n1,2\n3,4,5\n", "Line 3 has 3 values"),
        refused("ragged-too-few", "t.csv", b"a,b,c\n1,2,3\n4,5\n", "Line 3 has 2 values"),
        refused("header-only", "t.csv", b"a,b\n", "no data rows"),
        refused(
            "unterminated-quote",
            "t.csv",
            b'a,b\n1,"abc\n2,3\n',
            "Line 2 starts a quoted value",
            "closing quote",
        ),
        refused(
            "text-after-quote",
            "t.csv",
            b'a,b\n"abc"def,1\n',
            "Line 2, column 1 ('a') has text after a closing quote",
        ),
        refused("space-after-quote", "t.csv", b'a,b\n1,"x" \n', "Line 2, column 2"),
        refused(
            "text-after-quote-late",
            "t.csv",
            b"a,b\n" + b'1,"x"\n' * 5000 + b'2,"y"z\n',
            "Line 5002, column 2",
        ),
        accepted("cr-only-line-ends", "t.csv", b"a,b\r1,x\r2,y\r", {"b": ["x", "y"]}),
        accepted("mixed-line-ends", "t.csv", b"a,b\r\n1,x\n2,y\r\n", {"b": ["x", "y"]}),
        accepted(
            "quoted-newlines-and-quotes",
            "t.csv",
            b'a,b\n1,"two\nlines"\n2,"say ""hi"""\n',
            {"b": ["two\nlines", 'say "hi"']},
        ),
        accepted("tsv", "t.tsv", b"a\tb\n1\tx,y\n", {"b": ["x,y"]}),
        accepted("semicolons", "t.csv", b"a;b\n1;x\n2;y\n", {"b": ["x", "y"]}),
        refused(
            "1e5-columns",
            "t.csv",
            lambda: (",".join(f"c{i}" for i in range(100_000)) + "\n1\n").encode(),
            "100000 columns",
        ),
        refused(
            "1001-columns",
            "t.csv",
            lambda: (",".join(f"c{i}" for i in range(1001)) + "\n").encode() + b"1\n",
            "1001 columns",
        ),
        accepted(
            "1e6-rows-1-column",
            "t.csv",
            lambda: b"n\n" + b"7\n" * 10**6,
            {"n": [7] * 10**6},
            slow=True,
        ),
        refused(
            "1MB-field",
            "t.csv",
            lambda: b"a,b\n1," + b"x" * (1 << 20) + b"\n",
            "1,048,576 bytes long",
        ),
        refused(
            "1MB-quoted-field",
            "t.csv",
            lambda: b'a,b\n1,"' + b"x" * (1 << 20) + b'"\n',
            "longer than 131072",
        ),
        refused("empty-file", "t.csv", b"", "The file is empty"),
        refused("bom-only", "t.csv", codecs.BOM_UTF8, "The file is empty"),
        refused("blank-lines-only", "t.csv", b"\n\r\n  \n", "The file is empty"),
        refused("duplicate-names", "t.csv", b"a,b,a\n1,2,3\n", "must be unique"),
        refused("trailing-delimiter-header", "t.csv", b"a,b,\n1,2,\n", "Column 3 has no name"),
    ]


def xlsx_cases() -> list[Case]:
    """XML entities in every part, zip bombs, formulas, traversal, encryption, macros."""
    book = workbook(GOOD_ROWS)
    parts = zipfile.ZipFile(io.BytesIO(book)).namelist() + ["xl/sharedStrings.xml"]
    entity = "declares XML entities"
    cases = [
        Case(
            f"xlsx-doctype-in-{p.replace('/', '-').strip('-_[]')}",
            "t.xlsx",
            with_doctype(p),
            refuse=(entity, p),
        )
        for p in parts
    ]
    external = '<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
    parameter = '<!DOCTYPE x [<!ENTITY % p SYSTEM "http://127.0.0.1/x.dtd"> %p;]>'
    return cases + [
        Case(
            "xlsx-doctype-after-4096-bytes",
            "t.xlsx",
            with_doctype("xl/worksheets/sheet1.xml", padding=5000),
            refuse=(entity,),
        ),
        Case(
            "xlsx-doctype-shared-strings-padding",
            "t.xlsx",
            with_doctype("xl/sharedStrings.xml", padding=70_000),
            refuse=(entity,),
        ),
        Case(
            "xlsx-doctype-bom",
            "t.xlsx",
            with_doctype("xl/workbook.xml", padding=5000, bom=True),
            refuse=(entity,),
        ),
        Case(
            "xlsx-doctype-utf16",
            "t.xlsx",
            with_doctype("xl/worksheets/sheet1.xml", encoding="utf-16"),
            refuse=(entity,),
        ),
        Case(
            "xlsx-xxe-system-entity",
            "t.xlsx",
            with_doctype("xl/worksheets/sheet1.xml", declaration=external),
            refuse=(entity,),
        ),
        Case(
            "xlsx-xxe-parameter-entity",
            "t.xlsx",
            with_doctype("xl/workbook.xml", declaration=parameter),
            refuse=(entity,),
        ),
        refused(
            "xlsx-zip-bomb",
            "t.xlsx",
            lambda: rezip(book, {"xl/worksheets/sheet1.xml": b" " * (20 << 20)}, level=9),
            "zip bomb",
        ),
        refused(
            "xlsx-shared-strings-bomb", "t.xlsx", shared_strings_bomb, "shared strings", slow=True
        ),
        refused(
            "xlsx-formula",
            "t.xlsx",
            lambda: workbook(GOOD_ROWS, formula_cell="A4"),
            "Cell A4 holds a formula",
        ),
        accepted(
            "xlsx-formula-text-as-values",
            "t.xlsx",
            lambda: workbook([["n", "v"], [1, PAYLOADS["formula_cmd"][1:]]]),
            {"v": [PAYLOADS["formula_cmd"][1:]]},
        ),
        accepted("xlsx-good", "t.xlsx", book, {"age": [34, 51], "sex": ["F", "M"]}),
        refused(
            "xlsx-shared-string-without-table",
            "t.xlsx",
            with_cell(
                '<c r="B2" t="inlineStr"><is><t>F</t></is></c>', '<c r="B2" t="s"><v>0</v></c>'
            ),
            "Row 2",
            "text is missing",
        ),
        refused(
            "xlsx-date-1900-02-29",
            "t.xlsx",
            with_cell('<c r="A2" t="n"><v>34</v></c>', '<c r="A2" t="d"><v>1900-02-29</v></c>'),
            "Row 2",
            "date that does not exist",
        ),
        refused("xlsx-not-a-zip", "t.xlsx", SMALL, "not a zip archive"),
        refused(
            "xlsx-path-traversal-part",
            "t.xlsx",
            lambda: rezip(book, {"../../evil.xml": b"<x/>"}),
            "'../../evil.xml'",
        ),
        refused(
            "xlsx-absolute-part-name",
            "t.xlsx",
            lambda: rezip(book, {"/etc/evil.xml": b"<x/>"}),
            "'/etc/evil.xml'",
        ),
        refused("zip-traversal-only", "t.xlsx", lambda: zip_of({"../x.csv": SMALL}), "'../x.csv'"),
        refused(
            "xlsx-password-protected", "t.xlsx", CFB_MAGIC + b"\0" * 504, "password", "old .xls"
        ),
        refused(
            "xlsx-zip-encrypted-parts",
            "t.xlsx",
            lambda: marked_encrypted(book),
            "encrypted",
        ),
        refused(
            "xlsm-with-macros",
            "t.xlsm",
            lambda: rezip(book, {"xl/vbaProject.bin": b"\0" * 64}),
            "cannot be read",
        ),
        refused(
            "xlsx-with-macros",
            "t.xlsx",
            lambda: rezip(book, {"xl/vbaProject.bin": b"\0" * 64}),
            "macros",
        ),
        refused(
            "xlsx-damaged-xml",
            "t.xlsx",
            lambda: rezip(book, {"xl/workbook.xml": b"<x"}),
            "not well-formed XML",
        ),
        refused(
            "xlsx-external-link",
            "t.xlsx",
            lambda: rezip(book, {"xl/externalLinks/externalLink1.xml": b"<externalLink/>"}),
            "external links",
        ),
    ]


def name_cases() -> list[Case]:
    """File names with paths, NUL, right-to-left override, 300 characters, HTML."""
    return [
        accepted("name-dot-dot-slash", "../../etc/passwd.csv", SMALL, SMALL_TABLE),
        accepted("name-backslashes", "..\\..\\windows\\t.csv", SMALL, SMALL_TABLE),
        accepted("name-nul", "evil\0.exe.csv", SMALL, SMALL_TABLE),
        accepted("name-rtl-override", "report\u202evsc.exe.csv", SMALL, SMALL_TABLE),
        accepted("name-300-characters", "n" * 296 + ".csv", SMALL, SMALL_TABLE),
        accepted("name-html", '<img src=x onerror=alert(1)>".csv', SMALL, SMALL_TABLE),
        refused("name-suffix-only-dot", "csv", SMALL, "cannot be read"),
    ]


def value_cases() -> list[Case]:
    """Numbers out of range and spreadsheet, template, HTML and SQL payloads as values."""
    cases = [
        accepted("value-1e309", "t.csv", b"n,x\n1,1e309\n2,1\n", {"x": [float("inf"), 1.0]}),
        accepted("value-minus-inf", "t.csv", b"n,x\n1,-inf\n", {"x": ["-inf"]}),
        accepted("value-nan", "t.csv", b"n,x\n1,NaN\n", {"x": ["NaN"]}),
    ]
    for key, payload in PAYLOADS.items():
        cases.append(
            accepted(f"value-{key}", "t.csv", csv_of([["n", "v"], [1, payload]]), {"v": [payload]})
        )
    names = list(PAYLOADS.values())[:6] + [PAYLOADS["script"], PAYLOADS["img"]]
    names = list(dict.fromkeys(n.strip() for n in names))
    cases.append(
        accepted(
            "column-names-are-payloads",
            "t.csv",
            csv_of([names, list(range(len(names)))]),
            {n: [i] for i, n in enumerate(names)},
        )
    )
    return cases


BOMB_TABLE = b"a\n" + b"0\n" * (8 << 20)  # 16 MB of one repeated line


def gzip_bomb() -> bytes:
    """Return 16 MB of one repeated line, gzip-compressed about 1000 to 1 (limit 200 to 1)."""
    return gzip.compress(BOMB_TABLE, 9)


def zip_bomb() -> bytes:
    """Return a deflated zip whose one CSV unpacks 16 MB from about 16 KB."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("t.csv", BOMB_TABLE)
    return out.getvalue()


def zip_with_flag(parts: dict, flag: int) -> bytes:
    """Return a zip of `parts` with general-purpose flag bits `flag` set on every entry."""
    data = bytearray(zip_of(parts))
    for marker, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(marker)
        while at >= 0:
            data[at + offset] |= flag
            at = data.find(marker, at + 1)
    return bytes(data)


def wrapped_cases() -> list[Case]:
    """Compressed and archived files: gzip and one-table zips are unpacked within limits.

    Bombs, nested archives, several members, encryption, traversal and other compressors are
    refused.
    """
    book = lambda: workbook(GOOD_ROWS)  # noqa: E731
    good = {"age": [34, 51], "sex": ["F", "M"]}
    return [
        accepted("gzip-named-csv-gz", "t.csv.gz", lambda: gzip.compress(SMALL), SMALL_TABLE),
        accepted(
            "gzip-named-tsv-gz",
            "t.tsv.gz",
            gzip.compress(b"age\tcity\n34\tLeeds\n51\tYork\n"),
            SMALL_TABLE,
        ),
        accepted("gzip-named-csv", "t.csv", lambda: gzip.compress(SMALL), SMALL_TABLE),
        accepted("zip-named-zip", "t.zip", lambda: zip_of({"t.csv": SMALL}), SMALL_TABLE),
        accepted("zip-of-xlsx", "t.zip", lambda: zip_of({"t.xlsx": book()}), good),
        refused("gzip-bomb", "b.csv.gz", gzip_bomb, "times larger", "zip bomb"),
        refused("zip-bomb", "b.zip", zip_bomb, "times larger", "zip bomb"),
        refused(
            "gzip-in-gzip",
            "t.csv.gz",
            lambda: gzip.compress(gzip.compress(SMALL)),
            "inside archives",
        ),
        refused(
            "zip-in-zip",
            "t.zip",
            lambda: zip_of({"t.csv": zip_of({"t.csv": SMALL})}),
            "inside archives",
        ),
        refused(
            "zip-of-gz", "t.zip", lambda: zip_of({"t.csv.gz": gzip.compress(SMALL)}), "not a table"
        ),
        refused(
            "zip-two-members",
            "t.zip",
            lambda: zip_of({"a.csv": SMALL, "b.csv": SMALL}),
            "holds 2 files",
        ),
        refused("zip-traversal", "t.zip", lambda: zip_of({"../../t.csv": SMALL}), "path traversal"),
        refused(
            "zip-encrypted", "t.zip", lambda: zip_with_flag({"t.csv": SMALL}, 0x1), "encrypted"
        ),
        refused("gzip-cut-short", "t.csv.gz", lambda: gzip.compress(SMALL * 50)[:-20], "cut short"),
        refused("gz-name-not-gzip", "t.csv.gz", SMALL, "not gzip-compressed"),
        refused("bz2-named-bz2", "t.csv.bz2", lambda: bz2.compress(SMALL), "cannot be read"),
        refused("bz2-named-csv", "t.csv", lambda: bz2.compress(SMALL), "compressed (bzip2)"),
        refused("xz-named-csv", "t.csv", lambda: lzma.compress(SMALL), "compressed (xz)"),
        refused("zip-named-csv", "t.csv", lambda: zip_of({"t.csv": SMALL}), "zip or Excel"),
        refused("xlsx-named-csv", "t.csv", book, "zip or Excel"),
        refused("unsupported-json", "t.json", b'{"a": 1}', "cannot be read"),
    ]


def cases(include_slow=True) -> list[Case]:
    """Return every case, slow ones (large files) included unless told."""
    everything = (
        encoding_cases()
        + structure_cases()
        + xlsx_cases()
        + name_cases()
        + value_cases()
        + wrapped_cases()
    )
    return [c for c in everything if include_slow or not c.slow]


def main(argv=None) -> int:
    """Write the corpus to a folder (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--with-slow", action="store_true", help="also the large files")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    manifest = []
    for case in cases(include_slow=args.with_slow):
        (args.out_dir / f"{case.id}.bin").write_bytes(case.make())
        manifest.append(
            {
                "id": case.id,
                "filename": case.filename,
                "refuse": case.refuse,
                "accept": case.accepted,
                "slow": case.slow,
            }
        )
    (args.out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"{len(manifest)} cases written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
