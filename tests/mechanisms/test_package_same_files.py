"""The package's tables are the files they were before its cost was cut (issue 44 item 6).

The CSVs (byte for byte), every cell of the workbook's table sheets (value and type) and the
report's charts of small hand-made files, against tests/data/package_files.json: what the
package code of commit 077bb38 (before the cut) made of the same files. The files carry what
the faster paths skip or reorder work for: spreadsheet formula triggers (escaped in the CSV,
text in the workbook), JSON query cells (plain text), characters XML cannot hold, empty
cells, numbers that need rounding by each rule of mechanisms.package.precision, a negative
count, dates, repeated column names and a one-column table.

Regenerate the expected files only for an intended change of the package's files:
`python -m tests.mechanisms.test_package_same_files` writes them with the code on sys.path.
"""

import io
import json
from pathlib import Path

import openpyxl
import pyarrow.csv as pa_csv
import pytest

from mechanisms.package import PackageContext, release_tables, tables, workbook
from mechanisms.package.charts import table_charts
from mechanisms.package.tables import csv_text, read_table
from mechanisms.package.workbook import workbook_bytes
from mechanisms.release import public_manifest

EXPECTED = Path(__file__).resolve().parents[1] / "data" / "package_files.json"
HOSTILE = [
    "north",
    "=1+2",
    "-x",
    "@SUM(A1)",
    "+7 ok",
    "\uff1dfull",
    "a;=HYPERLINK(x)",
    'say "hi", then',
    "two\nlines",
    "a <b> & c",
    "bell\x07",
    "007",
    "[x",
    "-3.5",
]
MANIFEST = {
    "mechanism": "perturbed_histogram",
    "parameters": {"columns": ["x", "n", "d", "visit", "born", "c"]},
    "guarantee": {"unit": "one row", "neighbouring": "replace-one", "epsilon": 1, "delta": 0},
    "schema": {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 10, "bins": 4},
            {"name": "n", "type": "numeric", "lower": 0, "upper": 100, "integer": True},
            {"name": "d", "type": "numeric", "lower": 0, "upper": 1, "bins": 2, "decimals": 3},
            {"name": "visit", "type": "date", "part": "month"},
            {
                "name": "born",
                "type": "date",
                "part": "date",
                "lower": "1990-01-01",
                "upper": "1999-12-31",
                "bins": 3,
            },
            {"name": "c", "type": "categorical", "categories": HOSTILE[:6]},
        ]
    },  # fmt: skip
    "files": {"synthetic.csv": "made-up rows", "noisy_counts.csv": "noisy counts"},
}


def _csv(rows: list[list[str]]) -> bytes:
    return "".join(",".join(row) + "\n" for row in rows).encode()


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def package_files() -> dict[str, bytes]:
    """Hand-made release files, no random draw (the same bytes on every run)."""
    synthetic = [["x", "n", "d", "visit", "born", "c"]]
    for k in range(60):
        synthetic.append(
            [
                "" if k % 11 == 3 else f"{(k * 1.37) % 10:.6f}",
                "" if k % 13 == 5 else str((k * 7) % 101),
                f"{(k * 0.0173) % 1:.3f}",
                str(k % 12 + 1),
                f"199{k % 10}-0{k % 9 + 1}-1{k % 10}",
                "" if k % 17 == 2 else _quoted(HOSTILE[k % len(HOSTILE)]),
            ]
        )
    counts = [["c", "ci_lower", "noisy_count", "ci_upper", "note_text"]]
    for k, label in enumerate(HOSTILE):
        low, count = k * 3.14159 - 9.5, k * 3.3 - 4.2
        counts.append(
            [_quoted(label), f"{low:.5f}", f"{count:.4f}", f"{low + 12.71:.5f}", _quoted(label)]
        )
    box = json.dumps({"lo": [0, 1, 0, 1, 0, 0], "hi": [5.123456, 40, 1, 12, 9, 3]})
    answers = [
        ["query", "answer", "noise_sd", "ci_lower", "ci_upper"],
        [_quoted(box), "123.456", "0.01234", "123.4", "123.5"],
        [_quoted(json.dumps({"column": "c", "value": "=1+2"})), "-3.7", "2.5", "-8.6", "1.2"],
        [_quoted("{not json"), "98765.4321", "", "98000.1", "99500.9"],
    ]
    estimates = [
        ["group", "estimate", "ci_lower", "ci_upper", "ratio"],
        ["a", "37.1234567", "36.91234", "37.33456", "0.123456789"],
        ["=b", "12345.6789", "11000.123", "13690.987", "-98765.4321"],
        ["c", "0.000123456", "0.0001", "0.00015", ""],
    ]
    return {
        "synthetic.csv": _csv(synthetic),
        "noisy_counts.csv": _csv(counts),
        "answers.csv": _csv(answers),
        "estimates.csv": _csv(estimates),
        "one_column.csv": b'x\n1.5\n""\n2.25\n',
        "repeated.csv": b"a,a,b\n1.25,x,=2\n3,,-4\n",
    }


def _cells(content: bytes) -> dict[str, list[list[list]]]:
    """Each table sheet's cells as [value, type] (the About sheet holds no table rows)."""
    book = openpyxl.load_workbook(io.BytesIO(content), read_only=True)
    return {
        sheet.title: [[[c.value, c.data_type] for c in row] for row in sheet.iter_rows()]
        for sheet in book.worksheets[1:]
    }


def files_now() -> dict:
    """The CSVs, the workbook's table cells and the charts the package code makes of them
    (as `build_package` makes them, without the PDF it takes a second to render)."""
    manifest = public_manifest(MANIFEST)
    tables = release_tables(package_files(), manifest)
    return {
        "csv": {table.name: csv_text(table).decode() for table in tables},
        "sheets": _cells(workbook_bytes(manifest, tables, PackageContext(title="Same files"))),
        "charts": [
            [chart.title, chart.svg, chart.note]
            for table in tables
            for chart in table_charts(table, manifest)
        ],
    }


@pytest.mark.parametrize("broken", [False, True])
def test_the_csvs_workbook_and_charts_are_the_files_made_before(monkeypatch, broken):
    """The twin writes the CSVs' text cells unescaped (the CSV writer's escaping removed,
    whatever path calls it: per distinct value, per cell or the header): the comparison
    catches it, and only in the CSVs."""
    if broken:
        monkeypatch.setattr(tables, "escape_cell", lambda text: text)
    made = files_now()
    expected = json.loads(EXPECTED.read_text())
    same = [made[part] == expected[part] for part in ("csv", "sheets", "charts")]
    assert same == ([False, True, True] if broken else [True, True, True])


def test_a_csv_read_in_blocks_makes_the_same_rows(monkeypatch):
    """pyarrow reads a CSV in blocks (a megabyte each), so the columns of a large table come
    in chunks, which small files never do. Read here in blocks of 4 kB: the synthetic file's
    rows repeated 8 times (480 rows, 22 kB) make the expected CSV rows, workbook rows and
    charts of the synthetic table repeated (a repeated table's shares are the same floats: the
    same fractions, correctly rounded); so do the workbook's first 250 rows alone."""
    read = pa_csv.read_csv
    blocks = pa_csv.ReadOptions(block_size=4096)
    monkeypatch.setattr(pa_csv, "read_csv", lambda source, **kw: read(source, blocks, **kw))
    times = 8
    header, body = package_files()["synthetic.csv"].split(b"\n", 1)
    content = header + b"\n" + body * times
    assert pa_csv.read_csv(io.BytesIO(content)).column("c").num_chunks > 1
    manifest = public_manifest(MANIFEST)
    table = read_table("synthetic.csv", content, manifest)
    expected = json.loads(EXPECTED.read_text())
    first, rest = expected["csv"]["synthetic.csv"].split("\r\n", 1)
    assert csv_text(table).decode() == first + "\r\n" + rest * times
    sheet = expected["sheets"]["synthetic"]
    for shown in (times * 60, 250):  # every row; the first 250, cut inside a block
        monkeypatch.setattr(workbook, "MAX_ROWS", shown)
        made = _cells(workbook_bytes(manifest, [table], PackageContext(title="Same files")))
        assert made["synthetic"] == (sheet[:1] + sheet[1:] * times)[: shown + 1]
    charts = [c for c in expected["charts"] if c[0].endswith("(synthetic.csv)")]
    assert [[c.title, c.svg, c.note] for c in table_charts(table, manifest)] == charts


def test_the_expected_files_hold_what_they_are_for():
    """Guard: the comparison above is not between empty files (60 synthetic rows, every
    formula trigger escaped in the CSV and text in the workbook, JSON queries in words)."""
    expected = json.loads(EXPECTED.read_text())
    assert len(expected["sheets"]["synthetic"]) == 61
    assert "'=1+2" in expected["csv"]["synthetic.csv"]
    assert ["=1+2", "s"] in [row[5] for row in expected["sheets"]["synthetic"]]
    assert "x 0 to 5.123; n 1 to 40" in expected["csv"]["answers.csv"]
    assert len(expected["charts"]) == 10  # 6 synthetic columns, one_column's, 3 estimates


if __name__ == "__main__":
    EXPECTED.write_text(json.dumps(files_now(), indent=1, ensure_ascii=False) + "\n")
