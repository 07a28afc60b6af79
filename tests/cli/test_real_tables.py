"""Issue 14 on public tables with missing values, whole numbers and dates (tests/real_tables.py).

Every mechanism releases every table through the command line; synthetic whole-number columns
hold whole numbers, a month column has 12 cells and its values are 1..12, a date range is
written as dates, missing values come back as empty cells in the share the data had, and the
manifest publishes the declared schema (its new keys included) and nothing computed from data.
"""

import io
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from mechanisms.__main__ import main
from mechanisms.noise import secure_source
from mechanisms.schema import MISSING_LABEL, Schema
from tests.real_tables import TABLES

# per table: the columns of the histogram-like releases, and 1-2 numeric columns for ranges
COLUMNS = {
    "cars": (["Miles_per_Gallon", "Cylinders", "Year", "Origin"], ["Horsepower", "Weight_in_lbs"]),
    "la_riots": (["age", "gender", "death_date"], ["longitude", "latitude"]),
    "seattle_weather": (["date", "weather", "precipitation"], ["date", "temp_max"]),
    "co2": (["week", "co2"], ["week", "co2"]),
}
MECHANISMS = {
    "perturbed-histogram": ["--rows", "500"],
    "smoothed-histogram": ["--rows", "20"],
    "mwem": ["--marginals", "2"],
    "range-count": ["--random-boxes", "20"],
}
WHOLE = re.compile(r"^-?\d+$")
ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _release(tmp_path, table, mechanism, columns, epsilon="2", extra=()):
    content, schema = TABLES[table]()
    data, schema_path, out = tmp_path / f"{table}.csv", tmp_path / "schema.json", tmp_path / "out"
    data.write_bytes(content)
    schema_path.write_text(json.dumps(schema))
    argv = [mechanism, "--input", str(data), "--schema", str(schema_path), "--epsilon", epsilon]
    argv += ["--columns", ",".join(columns), "--out", str(out), *MECHANISMS[mechanism], *extra]
    assert main(argv) == 0
    return Schema.from_dict(schema), out


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
@pytest.mark.parametrize("table", list(TABLES))
def test_every_mechanism_releases_every_table_through_the_cli(tmp_path, table, mechanism):
    columns = COLUMNS[table][mechanism == "range-count"]
    schema, out = _release(tmp_path, table, mechanism, columns)
    manifest = json.loads((out / "manifest.json").read_text())
    published = {c["name"]: c for c in manifest["schema"]["columns"]}
    for name in columns:  # the declared, public schema with its new keys, nothing else
        assert published[name] == schema.columns[name].to_dict()
        assert published[name]["missing"] == "cell"
    if mechanism == "range-count":
        answers = pd.read_csv(out / "answers.csv")
        assert len(answers) == 20 and answers["estimate"].notna().all()
        assert "missing value" in manifest["parameters"]["missing_values"]
        return
    synthetic = pd.read_csv(out / "synthetic.csv", dtype=str, keep_default_na=False)
    for name in columns:
        spec, values = schema.columns[name], synthetic[name]
        present = values[values != ""]
        if getattr(spec, "integer", False) and spec.part != "date":
            assert present.str.fullmatch(WHOLE).all(), present.head()
            numbers = present.astype(int)
            assert numbers.between(spec.lower, spec.upper).all()
        elif getattr(spec, "part", None) == "date":
            assert present.str.fullmatch(ISO_DAY).all()
        elif hasattr(spec, "decimals"):
            decimals = present.str.partition(".")[2].str.len()
            assert (decimals <= spec.decimals).all(), present.head()


def test_a_month_column_has_twelve_cells_and_months_1_to_12(tmp_path):
    schema, out = _release(tmp_path, "seattle_weather", "perturbed-histogram", ["date"])
    counts = pd.read_csv(out / "noisy_counts.csv", dtype=str, keep_default_na=False)
    assert counts["date"].tolist() == [str(m) for m in range(1, 13)] + [MISSING_LABEL]
    months = pd.read_csv(out / "synthetic.csv", dtype=str, keep_default_na=False)["date"]
    assert set(months) <= {str(m) for m in range(1, 13)} | {""}
    assert len(set(months) - {""}) == 12  # 1461 days, 500 rows: every month is drawn


def _missing_share(path) -> float:
    return float(pd.read_csv(path, dtype=str, keep_default_na=False)["co2"].eq("").mean())


ROWS, EPSILON, TOLERANCE = 200_000, 2.0, 0.008


def _share_check(tmp_path, drop_missing: bool) -> tuple[float, float]:
    content, _ = TABLES["co2"]()
    frame = pd.read_csv(io.BytesIO(content))
    truth = float(frame["co2"].isna().mean())
    if drop_missing:  # the broken twin: the rows a missing-unaware release would lose
        frame = frame.dropna()
    table = tmp_path / "co2.csv"
    frame.to_csv(table, index=False)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(TABLES["co2"]()[1]))
    out = tmp_path / ("twin" if drop_missing else "out")
    argv = ["perturbed-histogram", "--input", str(table), "--schema", str(schema)]
    argv += ["--epsilon", str(EPSILON), "--columns", "co2", "--rows", str(ROWS), "--out", str(out)]
    assert main(argv) == 0
    return truth, _missing_share(out / "synthetic.csv")


@pytest.mark.parametrize("drop_missing", [False, True], ids=["release", "twin-drops-missing"])
def test_the_missing_share_survives_in_the_synthetic_table(tmp_path, drop_missing):
    """co2 (2,284 weeks, 59 missing: share 0.0258); perturbed histogram of co2 alone at ε = 2
    (11 cells, discrete Laplace of scale 1 per count) sampled into 200,000 rows.

    The synthetic missing share differs from the true one by the noise on the missing count over
    n (P[|Z| > 0.008 · 2284 = 18] ≈ e^-18 ≈ 2e-8 for scale 1), the noise on the total (sd 3.3,
    a relative 0.15%: negligible) and the sampling (sd √(p(1-p)/200000) = 0.00036: 0.008 is 22
    sd). Tolerance 0.008, false-alarm rate below 1e-7. Broken twin: a release that loses the
    rows with a missing value (as dropping or refusing them would) has share 0 and is caught.
    """
    truth, share = _share_check(tmp_path, drop_missing)
    assert math.isclose(truth, 59 / 2284)
    caught = abs(share - truth) > TOLERANCE
    assert caught == drop_missing, (truth, share)


def test_whole_numbers_are_drawn_uniformly_inside_their_bins():
    """cars' Weight_in_lbs 1000..6000 in 10 whole-number bins of 500: decoding 100,000 draws of
    bin 3 ([2500, 2999]) gives whole numbers only, all 500 of them (each expected 200 times;
    P[one value missed] < 500 · e^-200), and none outside."""
    _, schema = TABLES["cars"]()
    spec = Schema.from_dict(schema).columns["Weight_in_lbs"]
    values = spec.output(spec.decode(np.full(100_000, 3), secure_source()))
    numbers = np.asarray(values, dtype=float)
    assert np.array_equal(numbers, np.round(numbers))
    assert set(numbers.astype(int)) == set(range(2500, 3000))
    assert spec.labels()[3] == "2500 to 2999"
