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


def test_a_fresh_sample_of_the_real_rows_is_good():
    result = grade(RAW.sample(len(RAW), replace=True, random_state=1))
    assert result["grade"] == "good", result["reason"]
    assert "fresh sample" in result["reason"]


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
