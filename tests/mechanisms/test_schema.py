"""Schema: validation with clear messages, clamping, binning, encoding and decoding."""

import json

import numpy as np
import pandas as pd
import pytest

from mechanisms.errors import MechanismError
from mechanisms.noise import seeded_source
from mechanisms.schema import MISSING_LABEL, OTHER_LABEL, Schema

SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
        {"name": "hours", "type": "numeric", "lower": 0, "upper": 100, "bins": [0, 20, 40, 100]},
        {
            "name": "sex",
            "type": "categorical",
            "categories": ["Female", "Male"],
            "unknown": "reject",
        },
        {"name": "race", "type": "categorical", "categories": ["A", "B"]},
        {"name": "fnlwgt", "type": "ignored"},
    ]
}


@pytest.fixture
def schema():
    return Schema.from_dict(SCHEMA)


def test_it_round_trips_its_json_form(schema, tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema.to_dict()))
    loaded = Schema.load(path)
    assert loaded.to_dict() == schema.to_dict()
    assert loaded.to_dict()["columns"][3]["unknown"] == "other"  # the documented default


def test_it_describes_the_domain(schema):
    assert schema.resolve_columns(None) == ["age", "hours", "sex", "race"]
    # every column has its "(missing)" cell (the default "missing": "cell"), data or not
    assert schema.domain_shape(["age", "hours", "sex", "race"]) == (9, 4, 3, 4)
    labels = ["0 to under 20", "20 to under 40", "40 to 100", MISSING_LABEL]
    assert schema.axis_labels("hours") == labels
    assert schema.axis_labels("race") == ["A", "B", OTHER_LABEL, MISSING_LABEL]


def test_it_clamps_and_bins_numeric_values(schema):
    df = pd.DataFrame(
        {"age": [-5, 17, 26.124, 26.125, 89.99, 90, 1000], "hours": [0, 19.9, 20, 39, 40, 100, 250]}
    )
    codes = schema.encode(df, ["age", "hours"])
    assert codes[:, 0].tolist() == [0, 0, 0, 1, 7, 7, 7]
    assert codes[:, 1].tolist() == [0, 0, 1, 1, 2, 2, 2]


@pytest.mark.parametrize("column", ["age", "hours"])  # equal widths and explicit edges
def test_infinite_and_huge_values_land_in_the_edge_bins(schema, column):
    """Audit item 7a: values beyond int64 once wrapped into bin 0 when cast before clamping."""
    values = np.array([np.inf, 1e300, 1e19, -np.inf, -1e300, -1e19])
    top = schema.column(column).n_bins - 1
    assert schema.column(column).encode(values).tolist() == [top, top, top, 0, 0, 0]


def test_it_maps_unknown_categories_to_other_or_refuses(schema):
    df = pd.DataFrame({"race": ["B", "A", "Z", None], "sex": ["Male", "Female", "Male", "?"]})
    assert schema.encode(df, ["race"])[:, 0].tolist() == [1, 0, 2, 3]  # None: "(missing)"
    refused = r"'sex' has 1 values outside .* \(first on data row 4\)"
    with pytest.raises(MechanismError, match=refused):
        schema.encode(df, ["sex"])


def test_it_matches_categories_as_text():
    schema = Schema.from_dict(
        {"columns": [{"name": "edu", "type": "categorical", "categories": [9, 13]}]}
    )
    assert schema.encode(pd.DataFrame({"edu": [13, 9, 13]}), None)[:, 0].tolist() == [1, 0, 1]


def test_it_refuses_missing_numbers_without_quoting_the_data():
    strict = Schema.from_dict(
        {"columns": [SCHEMA["columns"][0] | {"missing": "reject"}, SCHEMA["columns"][1]]}
    )
    df = pd.DataFrame({"age": ["31", "secret-value", None], "hours": [None, "1", None]})
    with pytest.raises(
        MechanismError, match=r"'age' has 2 missing or unreadable .*data row 2"
    ) as info:
        strict.encode(df, ["age"])
    assert "secret-value" not in str(info.value)
    assert strict.encode(df, ["hours"])[:, 0].tolist() == [3, 0, 3]  # "missing": "cell"


def test_flat_cell_counts_agree_with_per_column_codes(schema):
    rng = seeded_source(5)
    df = pd.DataFrame(
        {
            "age": rng.uniform(500) * 100,
            "hours": rng.uniform(500) * 120,
            "race": np.array(["A", "B", "C"])[rng.integers(3, 500)],
        }
    )
    columns = ["age", "hours", "race"]
    codes = schema.encode(df, columns)
    counts = schema.cell_counts(df, columns)
    expected = np.zeros(schema.domain_shape(columns), dtype=np.int64)
    np.add.at(expected, tuple(codes.T), 1)
    assert counts.shape == (9, 4, 4) and np.array_equal(counts, expected)
    assert np.array_equal(
        schema.cell_index(df, columns), np.ravel_multi_index(tuple(codes.T), counts.shape)
    )


def test_it_decodes_inside_the_bins(schema):
    codes = np.array([[0, 2, 1], [7, 0, 2], [3, 1, 0]] * 200)
    out = schema.decode(codes, ["age", "hours", "race"], seeded_source(1))
    back = schema.encode(out, ["age", "hours", "race"])
    assert np.array_equal(back, codes)
    assert out["race"].tolist()[:3] == ["B", OTHER_LABEL, "A"]
    flat = np.ravel_multi_index(tuple(codes.T), schema.domain_shape(["age", "hours", "race"]))
    same = schema.decode_cells(flat, ["age", "hours", "race"], seeded_source(1))
    pd.testing.assert_frame_equal(same, out)


def test_its_domain_never_depends_on_the_data(schema):
    small = pd.DataFrame({"age": [20.0], "race": ["A"]})
    outlier = pd.DataFrame({"age": [1e9], "race": ["never-declared"]})
    columns = ["age", "race"]
    assert schema.cell_counts(small, columns).shape == schema.cell_counts(outlier, columns).shape
    assert schema.cell_counts(outlier, columns)[7, 2] == 1


@pytest.mark.parametrize(
    "column, message",
    [
        (
            {"name": "a", "type": "numeric", "lower": 5, "upper": 1, "bins": 3},
            r"lower \(5\) must be below upper \(1\); swap them",
        ),
        (  # a single public year or value is not a range; swapping would not help
            {"name": "a", "type": "date", "part": "year", "lower": 2009, "upper": 2009},
            r"lower and upper are both 2009; give a range with upper above lower",
        ),
        ({"name": "a", "type": "numeric", "lower": 0, "upper": 1}, r"bins \(None\)"),
        ({"name": "a", "type": "numeric", "lower": 0, "upper": 1, "bins": 0}, r"bins \(0\)"),
        (
            {"name": "a", "type": "numeric", "lower": 0, "upper": 1, "bins": [0, 0.7, 0.5, 1]},
            "must increase",
        ),
        (
            {"name": "a", "type": "numeric", "lower": 0, "upper": 1, "bins": [0, 0.5]},
            "must increase",
        ),
        ({"name": "a", "type": "numeric", "lower": "0", "upper": 1, "bins": 2}, "finite numbers"),
        ({"name": "a", "type": "categorical", "categories": []}, "non-empty list"),
        ({"name": "a", "type": "categorical", "categories": ["x", "x"]}, "distinct"),
        (
            {"name": "a", "type": "categorical", "categories": ["x"], "unknown": "drop"},
            r"unknown \('drop'\)",
        ),
        (
            {"name": "a", "type": "datetime"},
            r"type \('datetime'\) must be numeric, date, categorical or ignored",
        ),
        ({"name": "a", "type": "date"}, r"part \(None\) must be one of year, month"),
        ({"name": "a", "type": "date", "part": "month", "upper": 13}, "between 1 and 12"),
        ({"name": "a", "type": "date", "part": "date", "lower": "2020-02-31"}, "YYYY-MM-DD"),
        (
            {"name": "a", "type": "numeric", "lower": 0, "upper": 1, "bins": 2, "missing": "x"},
            r'missing \(\'x\'\) must be "cell" or "reject"',
        ),
        (
            {"name": "a", "type": "numeric", "lower": 0, "upper": 9.5, "integer": True},
            "must be whole numbers",
        ),
        (
            {"name": "a", "type": "numeric", "lower": 1, "upper": 12, "integer": True, "bins": 13},
            "at most one bin per whole number",
        ),
        (
            {"name": "a", "type": "numeric", "lower": 0, "upper": 1, "bins": 10, "decimals": 0},
            r"decimals \(0\) leaves no value inside the bin \[0.1, 0.2\)",
        ),
        ({"name": "a", "type": "categorical", "categories": ["x", "(missing)"]}, "distinct"),
        ({"type": "ignored"}, 'non-empty "name"'),
    ],
)
def test_it_refuses_bad_columns(column, message):
    with pytest.raises(MechanismError, match=message):
        Schema.from_dict({"columns": [column]})


def test_it_refuses_bad_documents_and_requests(schema, tmp_path):
    with pytest.raises(MechanismError, match="at least one column"):
        Schema.from_dict({"columns": []})
    with pytest.raises(MechanismError, match="appears twice"):
        Schema.from_dict({"columns": [{"name": "x", "type": "ignored"}] * 2})
    with pytest.raises(MechanismError, match=r"column \('salary'\) is not in the schema"):
        schema.domain_shape(["salary"])
    with pytest.raises(MechanismError, match="marked ignored"):
        schema.domain_shape(["fnlwgt"])
    with pytest.raises(
        MechanismError, match=r"column \('age'\) is in the schema but not in the data"
    ):
        schema.encode(pd.DataFrame({"x": [1]}), ["age"])
    with pytest.raises(MechanismError, match="cannot be read"):
        Schema.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(MechanismError, match="not valid JSON"):
        Schema.load(tmp_path / "bad.json")
    huge = Schema.from_dict(
        {
            "columns": [
                {"name": c, "type": "numeric", "lower": 0, "upper": 1, "bins": 10_000}
                for c in "abc"
            ]
        }
    )
    with pytest.raises(MechanismError, match="more than"):
        huge.domain_shape(["a", "b", "c"])
    # Omitted columns mean every schema column: the message names them (no TypeError on None).
    with pytest.raises(MechanismError, match=r"columns \['a', 'b', 'c'\] make"):
        huge.domain_shape(None)
