"""The command line refuses a CSV or TSV whose rows do not have one value per column.

pandas, which reads the command line's input, took a file with a comma at the end of every
data line (as some exports write) as one whose first column labels the rows: every value moved
one column to the left, and the release ran on it (a category column of ages, an empty age
column). A longer row further down lost its extra value, a shorter one got empty values, all
without a word. The portal refused such files already (dpportal.ingest.text); the command line
now does too, naming the row (`check_field_counts`), for plain, gzip and zip inputs.
"""

import gzip
import json
import zipfile

import pytest

from mechanisms import __main__ as cli
from mechanisms.__main__ import main

SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
        {"name": "sex", "type": "categorical", "categories": ["Female", "Male"]},
    ]
}
RAGGED = {
    "a comma ending every data line": ("age,sex\n25,Male,\n38,Female,\n", 2, 3, "at the end"),
    "one long row further down": ("age,sex\n25,Male\n38,Female,x\n52,Male\n", 3, 3, "quote"),
    "one short row": ("age,sex\n25,Male\n38\n52,Male\n", 3, 1, "nothing between"),
    "a tab ending a TSV line": ("age\tsex\n25\tMale\t\n", 2, 3, "a tab at the end"),
}


def run(tmp_path, name: str, content: bytes, capsys) -> tuple[int, str]:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    (tmp_path / name).write_bytes(content)
    argv = ["mwem", "--input", str(tmp_path / name), "--schema", str(tmp_path / "schema.json")]
    status = main([*argv, "--epsilon", "1", "--seed", "1", "--out", str(tmp_path / "out")])
    return status, capsys.readouterr().err


def packed(kind: str, name: str, text: str, folder) -> tuple[str, bytes]:
    """The file as the command line may get it: plain, gzip-compressed or alone in a zip."""
    if kind == "gzip":
        return name + ".gz", gzip.compress(text.encode())
    if kind == "zip":
        path = folder / "packed.zip"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(name, text)
        return name + ".zip", path.read_bytes()
    return name, text.encode()


@pytest.mark.parametrize("kind", ["plain", "gzip", "zip"])
@pytest.mark.parametrize("case", list(RAGGED))
def test_a_row_without_one_value_per_column_is_refused_by_its_number(tmp_path, capsys, case, kind):
    text, row, values, hint = RAGGED[case]
    name = "data.tsv" if "TSV" in case else "data.csv"
    status, err = run(tmp_path, *packed(kind, name, text, tmp_path), capsys)
    assert status == 2 and err.count("\n") == 1, err
    assert f"row {row} (the header is row 1) has {values} value" in err, err
    assert "header names 2 columns" in err and hint in err, err
    assert not (tmp_path / "out").exists()


def test_quoted_line_breaks_blank_lines_and_a_bom_are_still_read(tmp_path, capsys):
    text = '\ufeffage,sex\n25,"Male"\n\n38,"Fe\nmale"\n52,Male\n'
    status, err = run(tmp_path, "data.csv", text.encode(), capsys)
    assert status == 0, err
    assert (tmp_path / "out" / "synthetic.csv").exists()


def test_without_the_check_pandas_moves_every_value_one_column_left(tmp_path, monkeypatch):
    """The twin: with the check turned off, the trailing-comma file is read shifted (the ages
    become row labels, the sexes land in the age column, the sex column is empty)."""
    monkeypatch.setattr(cli, "check_field_counts", lambda *args: None)
    path = tmp_path / "data.csv"
    path.write_text(RAGGED["a comma ending every data line"][0])
    frame = cli.read_table(str(path), cli.Schema.from_dict(SCHEMA), ["age", "sex"])
    assert list(frame.index) == [25, 38] and list(frame["age"]) == ["Male", "Female"]
    assert frame["sex"].isna().all()
