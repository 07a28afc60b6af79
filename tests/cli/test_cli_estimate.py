"""`dp-release dp-schema-estimate`: the catalogue row of the DP estimate of bounds and
categories, run from the command line on columns the schema has not described yet."""

import json

import pandas as pd
import pytest

from mechanisms.__main__ import main
from tests.conftest import REPO_ROOT

ADULT = REPO_ROOT / "tests" / "data" / "adult_sample.csv"
NAMES_ONLY = {"columns": [{"name": "age", "type": "ignored"}, {"name": "sex", "type": "ignored"}]}


@pytest.fixture
def inputs(tmp_path):
    """The Adult sample with one row whose sex is a canary no other row holds."""
    frame = pd.read_csv(ADULT, usecols=["age", "sex"])
    frame.loc[0, "sex"] = "canary-sex-7f3a"
    data = tmp_path / "adult.csv"
    frame.to_csv(data, index=False)
    schema = tmp_path / "names.json"
    schema.write_text(json.dumps(NAMES_ONLY))
    return data, schema, tmp_path / "out"


def estimate(inputs, *options):
    data, schema, out = inputs
    argv = ["dp-schema-estimate", "--input", str(data), "--schema", str(schema)]
    return main([*argv, "--seed", "5", "--out", str(out), *options])


def test_bounds_of_an_undescribed_column_at_the_requested_epsilon(inputs, capsys):
    assert estimate(inputs, "--epsilon", "2", "--columns", "age") == 0
    out = inputs[2]
    table = pd.read_csv(out / "estimates.csv")
    assert list(table["column"]) == ["age"] and list(table["kind"]) == ["numeric"]
    lower, upper = table.loc[0, "lower"], table.loc[0, "upper"]
    assert 0 <= lower <= 17 and 90 <= upper <= 500  # ages 17 to 90 in the sample
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mechanism"] == "dp_schema_estimate"
    guarantee = manifest["guarantee"]
    assert (guarantee["epsilon"], guarantee["delta"]) == (2.0, 0.0)
    assert guarantee["definition"] == "pure epsilon-DP" and guarantee["sensitivity"] == 2
    assert {"release.xlsx", "report.pdf", "estimates.json"} <= {p.name for p in out.iterdir()}
    assert str(out / "estimates.csv") in capsys.readouterr().out


def test_categories_need_delta_and_leave_a_one_row_value_out(inputs, capsys):
    assert estimate(inputs, "--epsilon", "2", "--kind", "categorical") == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "needs delta > 0" in error and "Traceback" not in error
    assert estimate(inputs, "--epsilon", "2", "--kind", "categorical", "--delta", "1e-6") == 0
    table = pd.read_csv(inputs[2] / "estimates.csv").set_index("column")
    assert table.loc["sex", "categories"] == "Female | Male"  # ε 1 each: not the canary
    text = "".join(p.read_text(errors="ignore") for p in inputs[2].iterdir())
    assert "canary-sex" not in text
