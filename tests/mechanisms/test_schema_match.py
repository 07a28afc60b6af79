"""Issue 43: declared categories may ignore capitals and surrounding spaces ("match":
"casefold"), a rule of the public schema applied when encoding: the data's female, FEMALE and
' Female ' count as the declared Female, released labels keep the declared spelling, and
categories the rule cannot tell apart are refused. "exact" (the default) is unchanged."""

import pandas as pd
import pytest

from mechanisms.counting.sql import DUCKDB, column_sql
from mechanisms.errors import MechanismError
from mechanisms.schema import Schema
from mechanisms.validation import clamping_report

DATA = pd.DataFrame({"sex": ["female", " MALE ", "Female", "x", None, "", "Straße"]})


def schema(match=None, categories=("Female", "Male", "STRASSE")):
    column = {"name": "sex", "type": "categorical", "categories": list(categories)}
    return Schema.from_dict({"columns": [column | ({"match": match} if match else {})]})


@pytest.mark.parametrize("values", [DATA["sex"], DATA["sex"].astype("string")])
def test_casefold_matches_regardless_of_capitals_and_spaces(values):
    codes = schema("casefold").column("sex").encode(values)
    # Female, Male, STRASSE, (other), (missing)
    assert codes.tolist() == [0, 1, 0, 3, 4, 4, 2]


def test_exact_is_the_default_and_unchanged():
    codes = schema().column("sex").encode(DATA["sex"])
    assert codes.tolist() == [3, 3, 0, 3, 4, 4, 3]


def test_released_labels_keep_the_declared_spelling_and_the_rule_round_trips():
    parsed = schema("casefold")
    assert parsed.axis_labels("sex")[:3] == ["Female", "Male", "STRASSE"]
    assert Schema.from_dict(parsed.to_dict()).to_dict() == parsed.to_dict()
    assert parsed.to_dict()["columns"][0]["match"] == "casefold"
    assert "match" not in schema().to_dict()["columns"][0]  # old documents stay as they were


def test_categories_the_rule_cannot_tell_apart_are_refused():
    with pytest.raises(MechanismError, match="'Yes' and ' yes' are the same once capitals"):
        schema("casefold", ["Yes", " yes"])
    schema("exact", ["Yes", "yes"])  # exactly compared, they are two categories
    with pytest.raises(MechanismError, match='must be "exact" or "casefold"'):
        schema("lower")


def test_the_data_check_counts_with_the_same_rule():
    """The 5% check (mechanisms.validation) moves what encoding moves: 1 of 5 present values
    under casefold, 4 of 5 compared exactly (values present: not empty)."""
    folded = clamping_report(DATA, schema("casefold"), ["sex"])[0]
    exact = clamping_report(DATA, schema(), ["sex"])[0]
    assert (folded.moved, folded.present) == (1, 5)
    assert (exact.moved, exact.present) == (4, 5)
    assert exact.warn and "capitals or spaces (this column compares exactly" in exact.message()
    assert "widen" not in exact.message()


def test_sql_engines_refuse_a_casefold_column_rather_than_count_it_differently():
    with pytest.raises(MechanismError, match="cannot repeat exactly"):
        column_sql(DUCKDB, schema("casefold").column("sex"), "text")
    assert column_sql(DUCKDB, schema().column("sex"), "text").code
