"""The custodian-only verdict (issue 15, item 4) on synthetic tables of known quality.

Each case is a synthetic.csv built from the 2,000-row Adult sample with a known defect, graded
against that raw sample; the grade's reason must name the yardstick it used.
"""

import numpy as np
import pandas as pd
import pytest

import mechanisms
from dpportal.releases.kinds import synthetic_verdict as verdict
from mechanisms.release import csv_bytes
from tests.helpers import DEMO_SCHEMA, SMALL_ADULT

SCHEMA = mechanisms.Schema.from_dict(DEMO_SCHEMA)
COLUMNS = ["age", "sex", "income", "race"]
RAW = pd.read_csv(SMALL_ADULT, dtype=str)[COLUMNS]


def grade(synthetic: pd.DataFrame, epsilon=1.0) -> dict:
    files = {"synthetic.csv": csv_bytes(synthetic)}
    return verdict.assess(SCHEMA, COLUMNS, RAW, files, epsilon=epsilon, neighbouring="replace-one")


FRESH_SAMPLES = 200
GOOD_AT_LEAST = 192


def test_fresh_samples_of_the_real_rows_are_good():
    """A fresh resample of the real rows is as good as a release can be. Measured: 10 of 2,000
    such samples graded "usable with care" (0.5%); at that rate the chance of more than 8 in 200
    is below 10^-5. The grade's spread allowance matters: before it, 3 of 100 were (that rate
    fails this bound about 1 run in 7)."""
    results = [
        grade(RAW.sample(len(RAW), replace=True, random_state=i)) for i in range(FRESH_SAMPLES)
    ]
    good = [r for r in results if r["grade"] == "good"]
    assert len(good) >= GOOD_AT_LEAST, [r["reason"] for r in results if r["grade"] != "good"]
    assert all("fresh sample" in r["reason"] for r in good)


def test_its_twin_a_slightly_distorted_sample_is_seldom_good():
    """The twin the bound above must not let through: fresh samples with 8% of rows' income
    set to ">50K" (an income × race table about twice its floor). Measured: 38 of 200 graded
    good; the chance of more than 100 in 200 at that rate is below 10^-20."""
    good = 0
    for i in range(FRESH_SAMPLES):
        sample = RAW.sample(len(RAW), replace=True, random_state=i).reset_index(drop=True)
        rows = np.random.default_rng(i).random(len(sample)) < 0.08
        sample.loc[rows, "income"] = ">50K"
        good += grade(sample)["grade"] == "good"
    assert good <= FRESH_SAMPLES // 2


def test_rows_that_forget_how_columns_go_together_do_not_beat_the_baseline():
    """Every column shuffled on its own: the one-way tables are exact, the pairs are not; at a
    large ε the noisy one-way baseline is as good, so the release is not usable."""
    rng = np.random.default_rng(2)
    shuffled = RAW.apply(lambda column: rng.permutation(column.to_numpy()))
    result = grade(shuffled, epsilon=50.0)
    assert result["grade"] == "bad", result["reason"]
    assert "independent noisy one-way counts" in result["reason"]
    assert "more ε or release fewer columns" in result["reason"]


def test_a_column_mostly_in_other_is_not_usable():
    broken = RAW.copy()
    broken.loc[broken.index[: int(0.63 * len(broken))], "race"] = "Something else"
    result = grade(broken, epsilon=0.01)
    assert result["grade"] == "bad" and "race" in result["reason"], result["reason"]


def test_a_moderately_distorted_table_is_usable_with_care():
    rng = np.random.default_rng(3)
    distorted = RAW.copy()
    rows = rng.random(len(distorted)) < 0.12
    distorted.loc[rows, "sex"] = rng.choice(["Female", "Male"], rows.sum())
    distorted.loc[rng.random(len(distorted)) < 0.12, "income"] = ">50K"
    result = grade(distorted, epsilon=0.05)
    assert result["grade"] == "care", result["reason"]


def test_releases_without_synthetic_rows_get_no_verdict_here():
    assert verdict.assess(SCHEMA, COLUMNS, RAW, {}, epsilon=1, neighbouring="replace-one") is None


@pytest.mark.parametrize("epsilon", [0.05, 1.0])
def test_the_floor_and_baseline_are_stated(epsilon):
    result = grade(RAW.sample(len(RAW), replace=True, random_state=4), epsilon=epsilon)
    assert 0 < result["floor"] < 0.1 and result["baseline"] > result["floor"]
    assert len(result["tables"]) == 6 and result["tables"][0] == "age × sex"
