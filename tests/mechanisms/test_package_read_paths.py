"""The shortcuts `read_table` takes make the files its slower paths made (issue 44 item 6).

- A numeric column's distinct values and codes are kept from the reading (`Table.encoded`),
  so the CSV and the workbook do not hash it again: they must write what they write of the
  same frame without them (`Table(name, frame)`, the codes found anew).
- A categorical column whose every cell is a declared category is coded by looking its
  cells up among the categories (`distinct_values`' `declared`), not by a hash: the table,
  its CSV and its workbook rows must be those read without the categories declared.

On files with what the parsing and escaping must survive: blanks, negative numbers, -0,
integers beyond a float's precision, "NaN" and "inf" texts and words in numeric columns,
leading zeros, quoted commas and line breaks in categories, a byte order mark, repeated
column names.
"""

import copy

import pandas as pd
import pytest

from mechanisms.package import tables, workbook
from mechanisms.package.tables import Table, csv_text, read_table

CATEGORIES = ["007", "a,b", "two\nlines", "=1+2", 'say "hi"', "north"]
MANIFEST = {
    "mechanism": "perturbed_histogram",
    "schema": {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 10, "bins": 4},
            {"name": "n", "type": "numeric", "lower": -100, "upper": 100, "integer": True},
            {"name": "d", "type": "numeric", "lower": -1, "upper": 1, "bins": 2, "decimals": 2},
            {"name": "big", "type": "numeric", "lower": 0, "upper": 2**60, "bins": 1},
            {"name": "c", "type": "categorical", "categories": CATEGORIES},
        ]
    },
}


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _csv(header: list[str], rows: list[list[str]], bom: bool = False) -> bytes:
    lines = [",".join(header)] + [",".join(row) for row in rows]
    return (b"\xef\xbb\xbf" if bom else b"") + "\n".join(lines).encode() + b"\n"


def numbers_file(bom: bool = False) -> bytes:
    """Numeric columns with blanks, negatives, -0 and integers a float cannot hold, beside a
    column of no schema (`free`) and a categorical one."""
    rows = []
    for k in range(40):
        rows.append(
            [
                "" if k % 7 == 3 else f"{(k * 1.37) % 10:.4f}",
                "" if k % 9 == 4 else ("-0" if k % 5 == 0 else str((k * 13) % 201 - 100)),
                f"{(k * 0.0731) % 2 - 1:.5f}",
                str(2**53 + k % 4),  # 9007199254740993 is no float: read as 9007199254740992
                _quoted(CATEGORIES[k % len(CATEGORIES)]),
                "" if k % 6 == 1 else f"{(k * 37.5) % 900 - 450:.3f}",
            ]
        )
    return _csv(["x", "n", "d", "big", "c", "free"], rows, bom)


def words_file() -> bytes:
    """Numeric columns holding what is no number (each is then text), repeated column names
    (read by pandas), a category nobody declared and a blank category."""
    rows = [
        ["NaN", "inf", "1.5", "-inf", "007", "x"],
        ["2.5", "3", "abc", "4", "", "=2"],
        ["nan", "-2", "1e3", "5", "other", "y"],
    ]
    return _csv(["x", "n", "d", "big", "c", "c"], rows)


def _workbook_rows(table: Table) -> bytes:
    return b"".join(workbook._rows_xml(table))


def _same_files(read: Table, again: Table) -> None:
    assert csv_text(read) == csv_text(again)
    assert _workbook_rows(read) == _workbook_rows(again)


@pytest.mark.parametrize("shown", [workbook.MAX_ROWS, 7])
@pytest.mark.parametrize("bom", [False, True])
def test_numeric_columns_are_written_by_their_kept_codes_as_by_new_ones(monkeypatch, shown, bom):
    """The workbook's first `shown` rows too (the kept codes cut to them)."""
    monkeypatch.setattr(workbook, "MAX_ROWS", shown)
    table = read_table("numbers.csv", numbers_file(bom), MANIFEST)
    assert table.header == ["x", "n", "d", "big", "c", "free"]
    assert set(table.encoded) == {"x", "n", "d", "big", "free"}
    assert table.frame["x"].isna().any() and table.frame["n"].isna().any()
    assert table.frame["big"].iloc[1] == 2**53  # rounded to the float it reads as
    _same_files(table, Table(table.name, table.frame, table.notes))


def test_numbers_that_are_no_numbers_leave_the_column_text():
    table = read_table("words.csv", words_file(), MANIFEST)
    assert table.header == ["x", "n", "d", "big", "c", "c.1"]
    assert not table.encoded
    assert not any(table.is_numeric(h) for h in ["x", "n", "d", "big"])
    _same_files(table, Table(table.name, table.frame, table.notes))


def _undeclared(manifest: dict) -> dict:
    """The manifest with no categories declared: every text column found by a hash."""
    manifest = copy.deepcopy(manifest)
    for column in manifest["schema"]["columns"]:
        column.pop("categories", None)
    return manifest


@pytest.mark.parametrize(
    ("content", "declared", "looked_up"),
    [
        (numbers_file(), CATEGORIES, True),
        (numbers_file(), [7, *reversed(CATEGORIES), None, "007"], True),  # texts alone count
        (numbers_file(), CATEGORIES[1:], False),  # "007" not declared: a hash
        (words_file(), CATEGORIES, False),  # blank and undeclared cells: a hash
    ],
    ids=["declared", "mixed-declaration", "one-undeclared", "blank-and-other"],
)
def test_declared_categories_make_the_table_a_hash_makes(content, declared, looked_up):
    """Looked up, the column's categories are the declared texts in their order (a hash
    finds them in the order of the cells)."""
    manifest = copy.deepcopy(MANIFEST)
    manifest["schema"]["columns"][4]["categories"] = declared
    table = read_table("t.csv", content, manifest)
    hashed = read_table("t.csv", content, _undeclared(manifest))
    assert table.header == hashed.header
    for name in table.header:
        pd.testing.assert_series_equal(
            table.frame[name].astype(object), hashed.frame[name].astype(object)
        )
        assert table.is_numeric(name) == hashed.is_numeric(name)
    _same_files(table, hashed)
    texts = list(dict.fromkeys(t for t in declared if isinstance(t, str)))
    assert (list(table.frame["c"].cat.categories) == texts) == looked_up


def test_a_table_holds_the_declared_categories_no_cell_takes(monkeypatch):
    """Looked up, a column's categories are the declared ones, some perhaps unused: the
    CSV is still that of the cells (every category's field made, only the cells' taken)."""
    manifest = copy.deepcopy(MANIFEST)
    manifest["schema"]["columns"][4]["categories"] = [*CATEGORIES, "unused"]
    table = read_table("numbers.csv", numbers_file(), manifest)
    assert list(table.frame["c"].cat.categories) == [*CATEGORIES, "unused"]
    monkeypatch.setattr(tables, "COMBINATIONS", 1)  # each column's fields on their own
    _same_files(table, read_table("numbers.csv", numbers_file(), _undeclared(manifest)))
