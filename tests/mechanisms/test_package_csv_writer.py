"""The package's CSV writer (`tables.csv_text`) and the report's chart counts, both made once
per distinct value (issue 44 item 6), against the cell-by-cell code they replaced.

The CSV's rows were written by pyarrow's CSV writer from every cell (text cells escaped one
by one): `written_before` below is that code. The new writer makes each column's fields once
per distinct value, joins neighbouring columns once per combination and the lines in blocks;
here with few combinations and small blocks too, so that every path runs on a small table.
The chart counts were `Schema.cell_counts` of the whole column.
"""

import csv
import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from mechanisms import csv_safety
from mechanisms.package import tables
from mechanisms.package.charts import cell_counts
from mechanisms.package.tables import Table, csv_text
from mechanisms.schema import Schema
from tests.mechanisms.test_package_same_files import HOSTILE as SAME_FILES_HOSTILE

HOSTILE = [*SAME_FILES_HOSTILE, "cr\rhere", "", "\tlead", "é ü 漢"]


def hostile_table(rows: int = 300) -> Table:
    """Numbers of every kind pyarrow formats (many distinct, few, whole, missing, -0.0, huge,
    tiny) beside text (categorical as read_table makes it, and plain) with formula triggers,
    quotes, line breaks, empty text and missing values."""
    rng = np.random.default_rng(7)
    special = np.array([0.0, -0.0, 1e20, 1.5e-7, -2.25, 123456789.125, np.nan])
    text = rng.choice(np.array(HOSTILE + [None], dtype=object), rows)
    frame = pd.DataFrame(
        {
            "many": rng.normal(0, 1e3, rows),
            "few": rng.choice(special, rows),
            "label": pd.Series(text).astype("category"),
            "whole": pd.array(
                np.where(rng.random(rows) < 0.1, None, rng.integers(-50, 50, rows)),
                dtype="Int64",
            ),
            "plain": pd.Series(rng.choice(np.array(HOSTILE, dtype=object), rows), dtype="str"),
            "grid": rng.integers(0, 1001, rows) / 10,
        }
    )
    return Table("hostile.csv", frame)


def written_before(table: Table) -> bytes:
    """The rows as the package wrote them before: pyarrow's CSV writer, each text cell
    escaped on its own (the header and the one-column case are written as before)."""
    columns = {}
    for k, name in enumerate(table.header):
        values = table.frame[name]
        if table.is_numeric(name):
            columns[str(k)] = pa.array(values, from_pandas=True)
        else:
            cells = values.astype(object).where(values.notna(), None).tolist()
            escaped = [None if c is None else csv_safety.escape_cell(c) for c in cells]
            columns[str(k)] = pa.array(escaped, pa.string())
    out = io.BytesIO()
    options = pa_csv.WriteOptions(include_header=False, eol="\r\n", quoting_style="needed")
    pa_csv.write_csv(pa.table(columns), out, options)
    return out.getvalue()


@pytest.mark.parametrize(
    ("combinations", "block"),
    [(1 << 16, 1 << 20), (1, 1 << 20), (40, 7), (1 << 16, 1)],
    ids=["as-built", "no-pairs", "some-pairs-small-blocks", "one-line-blocks"],
)
def test_the_csv_rows_are_those_pyarrows_writer_wrote(monkeypatch, combinations, block):
    monkeypatch.setattr(tables, "COMBINATIONS", combinations)
    monkeypatch.setattr(tables, "BLOCK_ROWS", block)
    table = hostile_table()
    header, rows = csv_text(table).split(b"\r\n", 1)
    assert header == b"many,few,label,whole,plain,grid"
    assert rows == written_before(table)


def test_a_table_without_rows_and_two_columns_alone():
    assert csv_text(hostile_table(0)) == b"many,few,label,whole,plain,grid\r\n"
    frame = hostile_table().frame
    for pair in [["few", "label"], ["label", "plain"], ["whole", "grid"]]:
        table = Table("pair.csv", frame[pair])
        assert csv_text(table).split(b"\r\n", 1)[1] == written_before(table)


def _text_cells(content: bytes, table: Table) -> list[str]:
    rows = list(csv.reader(io.StringIO(content.decode(), newline="")))[1:]
    text = [k for k, name in enumerate(table.header) if not table.is_numeric(name)]
    return [row[k] for row in rows for k in text]


@pytest.mark.parametrize("broken", [False, True])
def test_every_text_cell_is_escaped_for_spreadsheets(monkeypatch, broken):
    """Read back, every text cell is one `escape_cell` leaves as it is (no formula trigger
    where a spreadsheet may start a cell). The twin writes without escaping: caught."""
    if broken:
        monkeypatch.setattr(tables, "escape_cell", lambda text: text)
    table = hostile_table()
    cells = _text_cells(csv_text(table), table)
    assert "'=1+2" in cells or broken
    unsafe = [c for c in cells if csv_safety.escape_cell(c) != c]
    assert bool(unsafe) == broken


def test_chart_counts_are_the_schemas_cell_counts():
    """Each distinct value put in its cell once and its rows added: the counts the schema
    makes of the whole column (categories, unknown and missing values, numeric bins with
    missing values, whole numbers, date parts read from text)."""
    schema = Schema.from_dict(
        {
            "columns": [
                {"name": "label", "type": "categorical", "categories": HOSTILE[:5]},
                {"name": "few", "type": "numeric", "lower": -3, "upper": 3, "bins": 3},
                {"name": "whole", "type": "numeric", "lower": -50, "upper": 50, "bins": 4},
                {
                    "name": "grid",
                    "type": "numeric",
                    "lower": 0,
                    "upper": 100,
                    "bins": [0, 7.5, 100],
                },
                {"name": "born", "type": "date", "part": "month"},
            ]
        }
    )
    frame = hostile_table().frame
    dates = ["2020-01-31", "1999-12-01", "", "2001-07-15"]
    frame["born"] = pd.Series(np.resize(dates, len(frame))).astype("category")
    for column in ["label", "few", "whole", "grid", "born"]:
        expected = schema.cell_counts(frame, [column])
        assert expected.sum() == len(frame)
        assert np.array_equal(cell_counts(schema, frame, column), expected), column
