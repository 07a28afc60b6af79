"""Command line: writes the three files; bad input exits 2 with one line and no traceback."""

import json
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from mechanisms.__main__ import main, subcommands
from mechanisms.catalogue import CATALOGUE
from mechanisms.release import file_sha256
from tests.conftest import DEMO_ADULT, REPO_ROOT
from tests.package_text import readable_text

SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
        {"name": "sex", "type": "categorical", "categories": ["Female", "Male"]},
        {"name": "note", "type": "ignored"},
    ]
}


@pytest.fixture
def files(tmp_path):
    data = tmp_path / "data.csv"
    pd.DataFrame(
        {
            "age": [25, 38, 52, 61, 90],
            "sex": ["Male", "Female", "Male", "Male", "X"],
            "note": ["canary-7f3a"] * 5,
        }
    ).to_csv(data, index=False)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema, tmp_path / "out"


def test_every_catalogue_mechanism_has_its_subcommand():
    assert {s.name for s in subcommands().values()} == set(CATALOGUE)
    assert set(subcommands()) >= {
        "perturbed-histogram",
        "smoothed-histogram",
        "mwem",
        "range-count",
    }


def test_perturbed_histogram_writes_the_release(files, capsys):
    data, schema, out = files
    argv = [
        "perturbed-histogram",
        "--input",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--rows",
        "30",
        "--seed",
        "3",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == [  # the portal's package (one builder)
        "README.txt",
        "manifest.json",
        "noisy_counts.csv",
        "release.xlsx",
        "report.html",
        "report.pdf",
        "synthetic.csv",
    ]
    synthetic = pd.read_csv(out / "synthetic.csv")
    assert list(synthetic.columns) == ["age", "sex"] and len(synthetic) == 30
    counts = pd.read_csv(out / "noisy_counts.csv", keep_default_na=False)
    negative = counts["noisy_count"] < 0
    header = ["age", "sex", "noisy_count", "ci_lower", "ci_upper"]
    # 8 bins and 2 categories, "(other)", and each column's "(missing)" cell
    assert list(counts.columns)[:5] == header and len(counts) == 9 * 4
    assert ("note" in counts) == negative.any()  # a negative count is explained on its row
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mechanism"] == "perturbed_histogram"
    assert manifest["parameters"]["rows"] == 30
    assert manifest["guarantee"]["epsilon"] == 1.0
    assert manifest["guarantee"]["neighbouring"] == "replace-one"
    assert manifest["guarantee"]["unit"] == "one row of the input table"
    assert manifest["row_count_public"] is True
    assert "input_sha256" not in manifest
    assert manifest["random_source"].startswith("seeded")
    for path in out.iterdir():  # the PDF's text and the workbook's cells too
        assert "canary-7f3a" not in readable_text(path.name, path.read_bytes())
    main(argv[:-2] + ["--out", str(out.parent / "again")])
    assert (out.parent / "again" / "synthetic.csv").read_bytes() == (
        out / "synthetic.csv"
    ).read_bytes()


def test_smoothed_histogram_writes_the_release(files):
    data, schema, out = files
    argv = [
        "smoothed-histogram",
        "--input",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        "2",
        "--mix",
        "0.6",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["mix"] == 0.6
    assert manifest["parameters"]["rows"] == len(pd.read_csv(out / "synthetic.csv")) == 1
    assert manifest["random_source"] == "secure"
    assert "row count" in manifest["accounting"]["note"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"--epsilon": "-1"}, "error: epsilon ('-1') must be > 0"),
        ({"--epsilon": "0"}, "error: epsilon ('0') must be > 0"),
        ({"--epsilon": "inf"}, "error: epsilon ('inf') must be > 0 and finite"),
        ({"--input": "missing.csv"}, "cannot be read as CSV"),
        ({"--columns": "age,salary"}, "error: column ('salary') is not in the schema"),
        ({"--rows": "-2"}, "error: rows (-2) must be a whole number >= 0"),
        ({"--seed": "-1"}, "error: seed (-1) must be a non-negative integer"),
        ({"--epsilon": "abc"}, "error: epsilon ('abc') must be a number > 0"),
    ],
)
def test_bad_input_exits_2_with_one_line(files, capsys, change, message):
    data, schema, out = files
    args = {"--input": str(data), "--schema": str(schema), "--epsilon": "1", "--out": str(out)}
    args.update({k: (str(data.parent / v) if k == "--input" else v) for k, v in change.items()})
    argv = ["perturbed-histogram"] + [x for kv in args.items() for x in kv]
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2
    assert message in err and err.count("\n") == 1, err


def test_bad_schema_files_exit_2(files, capsys):
    data, schema, out = files
    schema.write_text(
        json.dumps(
            {"columns": [{"name": "age", "type": "numeric", "lower": 90, "upper": 17, "bins": 3}]}
        )
    )
    argv = [
        "perturbed-histogram",
        "--input",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    assert "lower (90) must be below upper (17); swap them" in capsys.readouterr().err


def test_it_runs_as_a_module_on_the_adult_data_without_traceback(tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "columns": [
                    {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
                    {
                        "name": "workclass",
                        "type": "categorical",
                        "categories": ["Private", "State-gov"],
                        "unknown": "reject",
                    },
                ]
            }
        )
    )
    base = [
        sys.executable,
        "-m",
        "mechanisms",
        "perturbed-histogram",
        "--input",
        str(DEMO_ADULT),
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--out",
        str(tmp_path / "o"),
    ]
    bad = subprocess.run(base, capture_output=True, text=True, cwd=REPO_ROOT)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "'workclass':" in bad.stderr and "not among its declared categories" in bad.stderr
    good = subprocess.run(
        base + ["--columns", "age"], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert good.returncode == 0, good.stderr
    assert len(pd.read_csv(tmp_path / "o" / "synthetic.csv")) == 48842


# ---------------------------------------------------------------- custodian record (issue 20.4)


def _big_table(tmp_path, rows=1237):
    rng = np.random.default_rng(5)
    data = tmp_path / "big.csv"
    pd.DataFrame(
        {
            "age": rng.integers(17, 91, rows),
            "sex": rng.choice(["Male", "Female"], rows),
            "note": ["x"] * rows,
        }
    ).to_csv(data, index=False)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


@pytest.mark.parametrize("explicit", [False, True], ids=["default-path", "flag"])
def test_public_folder_holds_neither_the_input_hash_nor_the_row_count(tmp_path, capsys, explicit):
    """Add-remove (the row count is private): no public file, manifest.json included, holds the
    input's SHA-256 or its row count (1237); the custodian record holds both, outside --out."""
    data, schema = _big_table(tmp_path)
    out = tmp_path / "public"
    record = tmp_path / "keep" / "record.json" if explicit else tmp_path / "public.custodian.json"
    if explicit:
        record.parent.mkdir()
    argv = [
        "perturbed-histogram",
        "--input",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--neighbouring",
        "add-remove",
        "--rows",
        "30",
        "--seed",
        "3",
        "--out",
        str(out),
    ] + (["--custodian-record", str(record)] if explicit else [])
    assert main(argv) == 0
    digest = file_sha256(data)
    for path in out.iterdir():  # the PDF's text and the workbook's cells too
        text = readable_text(path.name, path.read_bytes())
        assert digest not in text and digest.upper() not in text, path.name
        assert "1237" not in text, path.name
    kept = json.loads(record.read_text())
    assert kept["input_sha256"] == digest and kept["rows_read"] == 1237
    assert f"NOT for publication): {record.resolve()}" in capsys.readouterr().err


def test_a_custodian_record_inside_the_public_folder_is_refused(files, capsys):
    data, schema, out = files
    argv = [
        "perturbed-histogram",
        "--input",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--seed",
        "3",
        "--out",
        str(out),
        "--custodian-record",
        str(out / "record.json"),
    ]
    assert main(argv) == 2
    assert "must be outside the public output folder" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------- whole-input check (issue 20.5)

STRICT = {
    "columns": [
        {
            "name": "age",
            "type": "numeric",
            "lower": 17,
            "upper": 90,
            "bins": 8,
            "missing": "reject",
        },
        {
            "name": "sex",
            "type": "categorical",
            "categories": ["Female", "Male"],
            "unknown": "reject",
            "missing": "reject",
        },
    ]
}


@pytest.mark.parametrize(
    "column, bad, message",
    [
        ("age", "", "column 'age' has 1 empty (missing) or NaN values (the first on data row 3)"),
        ("age", "old", "column 'age' cannot be numeric: it has 1 values that are not numbers"),
        ("age", "nan", "column 'age' has 1 NaN (not a number) values"),
        ("age", "inf", "column 'age' cannot be numeric: it has 1 infinite values"),
        ("sex", "X", "column 'sex': 1 value is not among its declared categories"),
        ("sex", "", "column 'sex' has 1 empty (missing) values"),
    ],
    ids=["missing", "text", "nan", "inf", "undeclared-category", "missing-category"],
)
def test_bad_values_are_refused_before_any_noise(
    tmp_path, capsys, monkeypatch, column, bad, message
):
    rows = {"age": ["25", "38", "52", "61"], "sex": ["Male", "Female", "Male", "Female"]}
    rows[column][2] = bad
    data = tmp_path / "data.csv"
    data.write_text("age,sex\n" + "".join(f"{a},{s}\n" for a, s in zip(*rows.values())))
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(STRICT))
    out = tmp_path / "out"
    calls = []
    monkeypatch.setattr("mechanisms.__main__.run_release", lambda *a, **k: calls.append(a))
    argv = [
        "perturbed-histogram",
        "--input",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--seed",
        "3",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert calls == [] and not out.exists()  # refused before the mechanism drew any noise
    assert not (tmp_path / "out.custodian.json").exists()


@pytest.mark.parametrize("text", ["0.1", "0.3", "1.1", "1e-6", "2.675"])  # 0.1, 1.1 round up
def test_epsilon_and_delta_reach_the_mechanism_rounded_down(files, monkeypatch, text):
    """float("0.1") is above 0.1; the CLI hands the mechanism a float at most the typed value."""
    data, schema, out = files
    seen = {}

    def capture(*args, **kwargs):
        seen.update(epsilon=kwargs["epsilon"], delta=kwargs["delta"])
        raise SystemExit(0)

    monkeypatch.setattr("mechanisms.__main__.run_release", capture)
    argv = [
        "perturbed-histogram",
        "--input",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        text,
        "--delta",
        "0.1",
        "--out",
        str(out),
    ]
    with pytest.raises(SystemExit):
        main(argv)
    exact = Fraction(Decimal(text))
    assert Fraction(seen["epsilon"]) <= exact and Fraction(seen["delta"]) <= Fraction(1, 10)
    assert exact - Fraction(seen["epsilon"]) < exact * Fraction(1, 2**50)
