"""Published digits never add more than a tenth of the noise's sd (mechanisms.package.precision).

A real statistics release of a mean latitude (values around 42.03 in a tight declared range):
its mean's noise sd is under 1e-4 (8e-5), so the old rule (4 significant digits: "42.03") moved
it by 0.0012, 15 sd; now the published estimate and bounds stay within sd / 10 of the computed
ones. The sd the test compares against is computed here from the mechanism's own
stated scale and the row count (the mean of n values with Laplace noise of scale b on the
sum: sd >= b sqrt 2 / n, the count's noise only adds), not from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from mechanisms.catalogue import run_release
from mechanisms.noise import seeded_source
from mechanisms.package.precision import (
    round_for_noise,
    round_outward,
    significant,
)
from mechanisms.package.tables import read_table
from mechanisms.schema import Schema

ROWS = 2_000
SCHEMA = {
    "columns": [
        {
            "name": "latitude",
            "type": "numeric",
            "lower": 42.0,
            "upper": 42.06,
            "bins": 6,
            "missing": "reject",
        }
    ]
}


def _mean_latitude_release() -> tuple[pd.DataFrame, bytes]:
    rng = np.random.default_rng(43)  # the fixed table, not a noise source
    data = pd.DataFrame({"latitude": 42.0312 + rng.uniform(-0.004, 0.004, ROWS)})
    out = run_release(
        "statistics",
        data,
        Schema.from_dict(SCHEMA),
        epsilon=1.0,
        neighbouring="add-remove",
        columns=["latitude"],
        params={"stat": ["mean:latitude"]},
        rng=seeded_source(8),
    )
    content = out.files["statistics.csv"]
    return pd.read_csv(pd.io.common.BytesIO(content)), content


def test_a_mean_latitude_keeps_the_digits_its_small_noise_needs():
    computed, content = _mean_latitude_release()
    (row,) = computed.to_dict("records")
    sd = row["noise_scale"] * math.sqrt(2) / (ROWS * 1.05)  # the sum's noise over the count
    assert sd < 1e-4  # the table is as intended: 4 significant digits are far too coarse
    table = read_table("statistics.csv", content, {"mechanism": "statistics", "schema": SCHEMA})
    (published,) = [dict(zip(table.header, r, strict=True)) for r in table.rows]
    assert abs(published["estimate"] - row["estimate"]) <= sd / 10
    assert row["ci_lower"] - sd / 10 <= published["ci_lower"] <= row["ci_lower"]
    assert row["ci_upper"] <= published["ci_upper"] <= row["ci_upper"] + sd / 10
    assert published["epsilon"] == significant(row["epsilon"])  # not noisy: 4 digits as before


def test_where_four_digits_already_suffice_they_are_kept():
    stats = "statistic,estimate,ci_lower,ci_upper\nmean of age,38.58123,38.0149,39.1477\n"
    table = read_table("statistics.csv", stats.encode(), {"mechanism": "stats"})
    assert table.rows == [["mean of age", 38.58, 38.01, 39.15]]


def test_a_stated_noise_sd_is_used_before_the_interval():
    """A range count: the interval also holds the grid's rounding, the noise is far smaller."""
    answers = "query,estimate,ci_lower,ci_upper,noise_sd\n0,1234.56,1180,1290,0.05\n"
    table = read_table("answers.csv", answers.encode(), {"mechanism": "range_count"})
    assert table.rows == [[0, 1234.56, 1180, 1290, 0.05]]  # the old rule: 1235, 9 sd away


@given(
    value=st.floats(-1e12, 1e12, allow_nan=False),
    sd=st.floats(1e-12, 1e12, allow_nan=False),
)
def test_rounding_moves_no_value_by_more_than_a_tenth_of_its_sd(value, sd):
    assert abs(round_for_noise(value, sd) - value) <= sd / 10
    lower, upper = round_outward(value, sd, up=False), round_outward(value, sd, up=True)
    assert value - sd / 10 <= lower <= value <= upper <= value + sd / 10


@given(
    value=st.floats(-1e12, 1e12, allow_nan=False),
    sd=st.floats(1e-12, 1e12, allow_nan=False),
)
def test_never_further_from_the_value_than_four_significant_digits(value, sd):
    assert abs(round_for_noise(value, sd) - value) <= abs(significant(value) - value)
    assert round_for_noise(value, math.nan) == significant(value)  # no known sd: as before
