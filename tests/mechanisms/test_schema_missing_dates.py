"""Issue 14 in the schema and the data check: missing cells, whole numbers, decimals, date parts,
clamping counts, and range counts' declared drop of rows with a missing coordinate."""

import numpy as np
import pandas as pd
import pytest

from mechanisms.catalogue import run_release
from mechanisms.noise import RecordingSource, seeded_source
from mechanisms.range_count.api import support_counts, support_from_schema
from mechanisms.schema import Schema
from mechanisms.validation import check_data, clamping_report

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 10, "bins": 5},
            {
                "name": "n",
                "type": "numeric",
                "lower": 0,
                "upper": 10,
                "bins": 5,
                "missing": "reject",
            },
            {"name": "c", "type": "categorical", "categories": ["a", "b"]},
            {"name": "r", "type": "categorical", "categories": ["a"], "missing": "reject"},
            {"name": "day", "type": "date", "part": "weekday"},
            {"name": "hour", "type": "date", "part": "hour"},
            {
                "name": "when",
                "type": "date",
                "part": "date",
                "lower": "2020-01-01",
                "upper": "2020-12-31",
                "bins": ["2020-01-01", "2020-07-01", "2020-12-31"],
            },
        ]
    }
)


def test_date_parts_follow_iso_8601():
    stamps = pd.Series(["2024-01-01", "2024-01-07T13:45", "2024-01-03 23:59:59", "", None])
    day, hour = SCHEMA.columns["day"], SCHEMA.columns["hour"]
    assert day.numbers(stamps)[:3].tolist() == [1, 7, 3]  # Monday, Sunday, Wednesday
    assert hour.numbers(stamps)[:3].tolist() == [0, 13, 23]
    assert np.isnan(day.numbers(stamps)[3:]).all()
    assert day.labels() == ["1", "2", "3", "4", "5", "6", "7", "(missing)"]
    when = SCHEMA.columns["when"]
    assert when.labels() == ["2020-01-01 to 2020-06-30", "2020-07-01 to 2020-12-31", "(missing)"]
    codes = when.encode(pd.Series(["2020-03-01", "2021-05-05", "2020-07-01", ""]))
    assert codes.tolist() == [0, 1, 1, 2]  # 2021 clamps into the last bin
    decoded = when.output(when.decode(np.array([0, 1, 2]), seeded_source(1)))
    assert decoded[0] < "2020-07-01" <= decoded[1] and pd.isna(decoded[2])
    offsets = pd.Series(["2024-01-01T23:30+00:00", "2024-01-01T23:30-02:00"])  # mixed offsets
    assert hour.numbers(offsets).tolist() == [23, 1]  # compared in UTC


def test_decoded_dates_and_labels_are_pandas_text_written_as_before():
    """Dates from year 1 to 9999 and labels (with the missing cell) decode to pandas' text
    type, the same texts as NumPy's ISO dates and the label list taken at each code."""
    widest = Schema.from_dict(
        {
            "columns": [
                {
                    "name": "d",
                    "type": "date",
                    "part": "date",
                    "lower": "0001-01-01",
                    "upper": "9999-12-31",
                    "bins": 50,
                },
                {"name": "c", "type": "categorical", "categories": ["a", "b,c", '"q"']},
            ]
        }
    )
    rng = np.random.default_rng(5)
    codes = np.stack([rng.integers(0, 51, 5000), rng.integers(0, 5, 5000)], axis=1)
    frame = widest.decode(codes, ["d", "c"], seeded_source(4))
    assert all(isinstance(dtype, pd.StringDtype) for dtype in frame.dtypes)
    spec = widest.columns["d"]
    days = spec.decode(codes[:, 0], seeded_source(4))
    present = ~np.isnan(days)
    expected = np.datetime_as_string(
        np.datetime64("1970-01-01", "D") + days[present].astype(np.int64), unit="D"
    )
    assert frame["d"][present].tolist() == expected.tolist()
    assert frame["d"][~present].isna().all() and (~present).sum() == (codes[:, 0] == 50).sum()
    assert {len(text) for text in expected} == {10} and min(expected) < "0100" < "9000" < max(
        expected
    )
    labels = np.array(["a", "b,c", '"q"', "(other)", None], dtype=object)[codes[:, 1]]
    assert [None if pd.isna(text) else text for text in frame["c"]] == labels.tolist()


def test_missing_values_are_no_error_under_cell_and_named_under_reject():
    frame = pd.DataFrame(
        {
            "x": [1.0, np.nan, 3.0],
            "n": ["1", "", "nan"],
            "c": ["a", None, ""],
            "r": ["a", "", "a"],
            "day": ["2024-01-01", "", "someday"],
            "hour": ["", "", "2024-01-01T10:00"],
            "when": ["2020-02-02", None, "2020-02-02"],
        }
    )
    problems = check_data(frame, SCHEMA, list(SCHEMA.columns))
    assert problems == [
        "column 'n' has 1 empty (missing) values (the first on data row 2), and its \"missing\" "
        'is "reject"; fill them in, or declare "missing": "cell" (on the schema page: "Missing '
        'values: own cell") so they are released as a "(missing)" cell',
        "column 'n' has 1 NaN (not a number) values (the first on data row 3), and its \"missing\" "
        'is "reject"; fill them in, or declare "missing": "cell" (on the schema page: "Missing '
        'values: own cell") so they are released as a "(missing)" cell',
        "column 'r' has 1 empty (missing) values (the first on data row 2), and its \"missing\" "
        'is "reject"; fill them in, or declare "missing": "cell" (on the schema page: "Missing '
        'values: own cell") so they are released as a "(missing)" cell',
        "column 'day' cannot be a date: it has 1 values that are not dates (write them "
        "YYYY-MM-DD, optionally with a time) (the first on data row 3); correct those values in "
        "the file, or mark the column ignored",
    ]
    fine = frame.drop(columns=["n", "r"]).assign(day=["2024-01-01", "", "2024-01-02"])
    assert check_data(fine, SCHEMA, ["x", "c", "day", "hour", "when"]) == []
    codes = SCHEMA.encode(fine, ["x", "c", "day"])
    assert codes[1].tolist() == [5, 3, 7]  # every missing value in its column's last cell


def test_clamping_counts_present_values_outside_the_bounds_or_categories():
    """Values on a bound are inside it (0 and 10 are not counted); missing values are not
    present values."""
    frame = pd.DataFrame({"x": [-1, 0, 10, 11, np.nan], "c": ["a", "z", "", "b", "y"]})
    report = {c.column: c for c in clamping_report(frame, SCHEMA, ["x", "c"])}
    assert (report["x"].moved, report["x"].present) == (2, 4)
    assert (report["c"].moved, report["c"].present) == (2, 4)
    assert report["x"].warn and "2 of 4 values (50.0%) are outside" in report["x"].message()
    calm = clamping_report(pd.DataFrame({"x": np.arange(0, 10.0, 0.01)}), SCHEMA, ["x"])[0]
    assert calm.moved == 0 and not calm.warn


def test_decimals_put_synthetic_values_on_the_declared_grid():
    spec = Schema.from_dict(
        {"columns": [{"name": "v", "type": "numeric", "lower": 0, "upper": 1, "bins": 4}]}
    ).columns["v"]
    assert spec.decimals == 3  # width 0.25: two more digits than 0.1
    codes = np.repeat(np.arange(4), 5000)
    values = spec.output(spec.decode(codes, seeded_source(3)))
    assert np.allclose(values * 1000, np.round(values * 1000))
    assert np.array_equal(spec.encode(values), codes)  # every value inside its own bin
    assert values.max() == pytest.approx(1.0, abs=0.002)  # the last bin includes upper


RANGE = Schema.from_dict(
    {"columns": [{"name": "x", "type": "numeric", "lower": 1, "upper": 12, "integer": True}]}
)


def test_range_counts_drop_rows_with_a_missing_coordinate_at_no_extra_cost():
    """D and D' differ in one row (4 becomes missing): the noise calls are identical (same
    primitives, scales and epsilon), and the counts differ by one at one point: the declared
    sensitivity of one row holds. Whole-number grid points sit on 1..12."""
    d = pd.DataFrame({"x": [1.0, 4.0, 4.0, 12.0]})
    d2 = pd.DataFrame({"x": [1.0, np.nan, 4.0, 12.0]})
    support = support_from_schema(RANGE, ["x"], {})
    assert support.points[:, 0].tolist() == list(range(1, 13))
    counts = [support_counts(support, data, ["x"], RANGE) for data in (d, d2)]
    assert np.abs(counts[0] - counts[1]).sum() == 1
    calls = []
    for data in (d, d2):
        rec = RecordingSource(seeded_source(4))
        output = run_release(
            "range_count",
            data,
            RANGE,
            columns=["x"],
            epsilon=1.0,
            params={"mechanism": "identity", "random_boxes": 5},
            rng=rec,
        )
        calls.append(rec.noise_calls())
        assert "missing value" in output.manifest["parameters"]["missing_values"]
    assert calls[0] == calls[1] and calls[0]
