"""DuckDB's own SQL forms, pinned to the in-process engine, and broken twins of each caught.

DuckDB writes some cells and sums in cheaper SQL than the other engines: numpy's binning steps
unclamped and the statistics' sums unguarded (its doubles overflow and underflow as numpy's,
`Dialect.ieee`), a category's place by `list_position` (`Dialect.find`), and a guess whose
every edge is its own bucket read without a list (`Guess.sql`). On the hostile table (values at
and a float step around every edge, beyond the bounds, +-inf, NaN, NULL; texts that differ by a
space, an accent's encoding, blanks) the histogram cells of every column, the statistics'
tallies and the range-count grids must equal the in-process engine's; a twin that bins by
division instead of numpy's product, one that matches a text after trimming it, one that
counts a value equal to a candidate as below it must each differ from it, and one that
squares without the absolute value is refused (-inf squared).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from mechanisms.counting import TableSource, duckdb_engine, sql, tally_table
from mechanisms.counting import tally as tally_module
from mechanisms.counting.tally import CellTally
from mechanisms.schema import Schema
from mechanisms.statistics import aggregates
from tests.counting import engine_tables as tables
from tests.counting.test_engine_kinds import CASES, grids, statistics_tallies

SQUARE_OF_SIZE = aggregates.SquareGuard.of_size


def hostile_tallies() -> list:
    frame, document, runs = CASES["hostile"]
    schema = Schema.from_dict(document).accepting()
    cells = [CellTally(schema, (c,)) for c in frame.columns if c != "tiny range"]
    return [*cells, *statistics_tallies("hostile"), *(t for _, t in grids(document, runs))]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> TableSource:
    frame = CASES["hostile"][0]
    path: Path = tmp_path_factory.mktemp("forms") / "h.parquet"
    return TableSource(str(tables.write_parquet(frame, path, 3)))


def differing(source: TableSource) -> list:
    """The tallies whose DuckDB answer differs from the in-process one."""
    return [
        tally
        for tally in hostile_tallies()
        if not np.array_equal(
            tally_table(source, tally, "duckdb"), tally_table(source, tally, "inprocess")
        )
    ]


# DuckDB's forms of grids and equal-width bins, forced: keys of the unclamped values, or of
# the values clamped row by row (`duckdb_engine.unclamped_dialect` chooses by the first rows)
FORMS = {"unclamped keys": 1.0, "each row clamped": -1.0}


@pytest.mark.parametrize("form", FORMS)
def test_duckdb_forms_equal_the_inprocess_engine(source, monkeypatch, form):
    monkeypatch.setattr(duckdb_engine, "OUTSIDE_SHARE", FORMS[form])
    assert sql.DUCKDB.ieee and sql.DUCKDB.find is not None
    assert differing(source) == []


def keyed_differs(source: TableSource, monkeypatch) -> bool:
    """Whether DuckDB's histogram of the hostile table's equal-width column (values at and a
    float step around every edge, beyond the bounds, +-inf, NaN, NULL), grouped by its
    unclamped key, differs from the in-process engine's."""
    monkeypatch.setattr(duckdb_engine, "OUTSIDE_SHARE", FORMS["unclamped keys"])
    frame, document, _ = CASES["hostile"]
    schema = Schema.from_dict(document).accepting()
    (name,) = [c["name"] for c in document["columns"] if c.get("bins") == 7 and "integer" not in c]
    assert frame[name].isna().any() and (frame[name] > schema.column(name).upper).any()
    tally = CellTally(schema, (name,))
    return not np.array_equal(
        tally_table(source, tally, "duckdb"), tally_table(source, tally, "inprocess")
    )


def test_an_equal_width_histogram_by_its_unclamped_key_equals_the_inprocess_engine(
    source, monkeypatch
):
    assert not keyed_differs(source, monkeypatch)


def divided_key(dialect, spec, value):
    """Twin: the key as (v - lower) / width, where numpy multiplies by bins / (upper - lower)."""
    width = sql.number(dialect, (spec.upper - spec.lower) / spec.n_bins)
    return f"floor(({value} - {sql.number(dialect, spec.lower)}) / {width})"


def test_the_check_catches_a_key_by_division(source, monkeypatch):
    monkeypatch.setattr(sql, "equal_width_key", divided_key)
    assert keyed_differs(source, monkeypatch)


def test_the_check_catches_a_missing_key_read_as_a_number(source, monkeypatch):
    """Twin: no key read as missing, so NaN (ranked above every number) is counted in the top
    bin and NULL (which greatest() skips) in the bottom one."""
    monkeypatch.setattr(sql, "missing_sql", lambda dialect, value, kind: "FALSE")
    assert keyed_differs(source, monkeypatch)


def histogram_forms(monkeypatch) -> list[bool]:
    """Each DuckDB histogram query's form from now on, as `Dialect.unclamped_keys` (a spy)."""
    forms, built = [], tally_module.keys_first_counts

    def spied(dialect, *arguments):
        forms.append(dialect.unclamped_keys)
        return built(dialect, *arguments)

    monkeypatch.setattr(tally_module, "keys_first_counts", spied)
    return forms


@pytest.mark.parametrize(
    ("outside", "far", "unclamped"), [(0.0, True, True), (0.5, True, False), (0.3, False, True)]
)
def test_duckdb_bins_each_row_where_its_first_rows_lie_far_outside(
    tmp_path: Path, monkeypatch, outside, far, unclamped
):
    """A histogram whose values beyond the bins' bounds would add groups for more than
    OUTSIDE_SHARE of its first rows (half the rows at 10^9 to 10^10 times the bound, each its
    own key) is binned row by row; below it, by unclamped keys (30% of the rows just above the
    bounds make two keys); the same counts either way."""
    rows = 4000
    rng = np.random.default_rng(5)
    values = rng.uniform(0, 100, rows)
    chosen = rng.random(rows) < outside
    if far:
        values[chosen] *= rng.uniform(1e9, 1e10, int(chosen.sum()))
    else:
        values[chosen] = rng.uniform(100.5, 140, int(chosen.sum()))
    values[rng.random(rows) < 0.05] = np.nan
    frame = pd.DataFrame({"a": values, "b": rng.choice(["x", "y", "z"], rows)})
    document = {
        "columns": [
            {"name": "a", "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
            {"name": "b", "type": "categorical", "categories": ["x", "y"]},
        ]
    }
    tally = CellTally(Schema.from_dict(document).accepting(), ("a", "b"))
    source = TableSource(str(tables.write_parquet(frame, tmp_path / "o.parquet")))
    forms = histogram_forms(monkeypatch)
    found = tally_table(source, tally, "duckdb")
    assert forms == [unclamped]
    assert np.array_equal(found, tally_table(source, tally, "inprocess"))


def divided(dialect, value, lower, upper, bins, integer="BIGINT"):
    """Twin: (v - lower) / width, where numpy multiplies by bins / (upper - lower)."""
    width = sql.number(dialect, (upper - lower) / bins)
    scaled = f"greatest(0.0, ({value} - {sql.number(dialect, lower)}) / {width})"
    return f"CAST(floor(least({bins - 1}, {scaled})) AS {integer})"


def trimmed(text: str, listed: str) -> str:
    """Twin: the text's place after trimming spaces ("F " read as "F")."""
    return f"list_position([{listed}], rtrim({text}))"


def squared_without_abs(self, dialect, size: str) -> str:
    """Twin: the square's size min(r, |x - c|) read as min(r, x - c)."""
    assert "abs(" in size
    return SQUARE_OF_SIZE(self, dialect, size.replace("abs(", "("))


def test_the_check_catches_binning_by_division(source, monkeypatch):
    monkeypatch.setattr(sql, "equal_width_sql", divided)
    assert differing(source)


def test_the_check_catches_a_trimmed_category(source, monkeypatch):
    twin = dataclasses.replace(sql.DUCKDB, find=trimmed)
    monkeypatch.setattr(duckdb_engine, "DUCKDB", twin)
    assert differing(source)


def test_the_check_catches_a_square_without_its_absolute_value(source, monkeypatch):
    """The square's size taken below the centre as negative: -inf squares to inf, whose
    word DuckDB refuses to cast (the statistics sum every row unmasked, `unmasked_query`).
    The size min(r, |x - c|), as where each term is clamped apart (`Dialect.shares_repeats`
    off); read from the clamped value, the size is bounded and its sign does not matter."""
    twin = dataclasses.replace(sql.DUCKDB, shares_repeats=False)
    monkeypatch.setattr(duckdb_engine, "DUCKDB", twin)
    monkeypatch.setattr(aggregates.SquareGuard, "of_size", squared_without_abs)
    with pytest.raises(duckdb.ConversionException, match="inf"):
        differing(source)


def test_the_check_catches_a_value_on_a_candidate_counted_below_it(source, monkeypatch):
    """Twin of the quantile slot's one CASE: a value equal to a candidate read as above it.
    DuckDB reads the slots of evenly spaced candidates by a sign (`aggregates.sign_slot`,
    pinned with real NaN in tests/counting/test_edge_values.py), so here without it."""
    written = sql.Guess.sql

    def twin(self, dialect, value, below):
        return written(self, dialect, value, below).replace(" = v THEN 1", " = v THEN 2")

    monkeypatch.setattr(sql.Guess, "sql", twin)
    monkeypatch.setattr(aggregates, "sign_slot", lambda dialect, value, grid: None)
    assert differing(source)


UNEVEN = {"name": "x", "type": "numeric", "lower": 0.1, "upper": 0.7, "bins": 3}
UNEVEN_VALUES = [-1.0, 0.0, 0.1, 0.25, 0.4, 0.55, 0.7, 0.8, np.inf, -np.inf, np.nan, None]


def uneven_differing(tmp_path: Path) -> bool:
    """Whether DuckDB's sums of a column whose bounds' centre c = 0.4 has 0.1 - c rounded
    off -r (so its centred term is clamped apart, `aggregates.from_clamped`) differ from the
    in-process engine's, every value below, at, between and beyond the bounds."""
    from mechanisms.statistics import parse_request
    from mechanisms.statistics.aggregates import tallies

    document = {"columns": [UNEVEN]}
    schema = Schema.from_dict(document).accepting()
    frame = pd.DataFrame({"x": UNEVEN_VALUES * 3}, dtype="float64")
    path = tables.write_parquet(frame, tmp_path / "uneven.parquet")
    params = {"stat": ["count", "mean:x", "variance:x"], "by": []}
    request = parse_request(schema, params, epsilon=1.0, neighbouring="add-remove")
    groups, _ = tallies(schema, request)
    source = TableSource(str(path))
    answers = [tally_table(source, groups, e) for e in ("duckdb", "inprocess")]
    assert answers[1][:, 1].sum() == 3 * 10  # the present values, one group
    return not np.array_equal(*answers)


def test_a_centred_term_off_the_clamped_value_is_clamped_apart(tmp_path):
    spec = Schema.from_dict({"columns": [UNEVEN]}).column("x")
    assert not aggregates.from_clamped(spec, "centred")
    assert not uneven_differing(tmp_path)


def test_the_check_catches_a_centred_term_read_from_the_clamped_value_anyway(tmp_path, monkeypatch):
    """Broken twin: every term taken as the clamped value minus its shift."""
    monkeypatch.setattr(aggregates, "from_clamped", lambda spec, which: True)
    assert uneven_differing(tmp_path)
