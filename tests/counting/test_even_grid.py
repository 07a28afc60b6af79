"""A range-count grid axis placed by arithmetic and one comparison (`grid_tally.EvenAxis`).

DuckDB (`Dialect.ieee`) keys a value on an even grid axis by a bucket that puts each inner
edge in a bucket of its own, then one exact comparison with that edge; the key clamped to the
axis's cells is the cell. The cell must be numpy's (`Support.axis_cells`, which clamps the
value first) for every value: each edge, a float step either side of it, halfway between
edges, the special floats and values far outside the bounds (unclamped), on axes of
round and decimal bounds, negative ones, a signed zero, vast and tiny spans and 4,097 cells;
and the axes the arithmetic cannot serve are searched as before (too few cells, edges that
collapse near 2^53, subnormal spans, a span past the largest double). Through the counting API
every Parquet engine counts a grid over such columns as the in-process engine, missing values
and values outside the bounds among them. Broken twins caught: the comparison `<` where numpy's
search has `<=`, an axis taken without the check that each edge is its own bucket, a key
clamped one cell short at the top, and NaN keys taken as numbers (NaN counted in the top cell).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from mechanisms.counting import TableSource, duckdb_engine, sql, tally_table
from mechanisms.range_count import grid_tally as grids
from mechanisms.range_count.api import support_from_schema
from mechanisms.range_count.inputs import Support
from mechanisms.schema import Schema
from tests.counting.test_counting_engines import layout_engines
from tests.counting.test_edge_values import SPECIAL_FLOATS, float_array, write_layout
from tests.counting.test_guessed_search import values_around

LARGEST = float(np.finfo(np.float64).max)
AXES = {  # name -> (lower, upper, cells)
    "ages": (0.0, 100.0, 32),
    "incomes": (0.0, 200000.0, 16),
    "decimal": (0.1, 0.7, 6),
    "negative": (-7.3, 12.9, 7),
    "signed zero": (-0.0, 1.0, 10),
    "vast": (-1e300, 1e300, 64),
    "tiny": (0.0, 3e-12, 5),
    "fine": (0.0, 1.0, 4097),
    # searched, not placed by arithmetic
    "too few": (0.0, 1.0, grids.EVEN_FROM - 1),
    "near 2^53": (2.0**53 - 64, 2.0**53 + 64, 128),
    "subnormal": (1e-310, 5e-310, 8),
    "too wide": (-LARGEST, LARGEST, 8),
}
SEARCHED = ("too few", "near 2^53", "subnormal", "too wide")


def support(lower: float, upper: float, cells: int) -> Support:
    return Support(("x",), np.array([lower]), np.array([upper]), np.zeros((cells, 1)), (cells,))


def axis(name: str) -> tuple[Support, grids.EvenAxis | None]:
    lower, upper, cells = AXES[name]
    found = support(lower, upper, cells)
    with np.errstate(over="ignore", invalid="ignore"):  # "too wide": the span overflows
        return found, grids.EvenAxis.of(lower, upper, cells, found.axis_edges(0))


def around(found: Support) -> list[float]:
    """Values about each edge and the bounds, far outside them, and the special floats."""
    specials = [v for v in SPECIAL_FLOATS if v is not None]
    lower, upper = found.lower[0], found.upper[0]
    outside = [lower - abs(lower) - 1, upper + abs(upper) + 1, -LARGEST, LARGEST]
    values = np.array([*values_around(tuple(found.axis_edges(0))), *specials, *outside])
    return [float(v) for v in values[~np.isnan(values)]]


def duckdb_cells(found: Support, even: grids.EvenAxis, values: list[float]) -> list[int]:
    """Each value's cell by DuckDB: its key (unclamped) clamped to the axis's cells."""
    cells = grids.key_cell(even.sql(sql.DUCKDB, "v"), even.cells)
    with duckdb.connect(":memory:") as connection:
        connection.register("t", pa.table({"i": range(len(values)), "v": float_array(values)}))
        query = f"SELECT CAST({cells} AS BIGINT) FROM t ORDER BY i"  # noqa: S608
        return [row[0] for row in connection.execute(query).fetchall()]


def numpy_cells(found: Support, values: list[float]) -> list[int]:
    cells = found.axis_cells(0, np.asarray(values), found.axis_edges(0))
    return [int(c) for c in cells]


def test_the_axes_take_both_paths():
    for name in AXES:
        assert (axis(name)[1] is None) == (name in SEARCHED), name


@pytest.mark.parametrize("name", [n for n in AXES if n not in SEARCHED])
def test_duckdb_places_every_value_as_numpy(name):
    found, even = axis(name)
    assert even is not None
    values = around(found)
    assert duckdb_cells(found, even, values) == numpy_cells(found, values)


COLUMNS = ("ages", "decimal", "negative", "signed zero", "too few")
PAIRS = ((0, 1), (2, 3), (4, 0), (5, 1))  # column 5: whole numbers on the "ages" axis
WHOLE = [-(2**62), -5, 0, 3, 4, 99, 100, 101, 2**62, None]


def grid_tallies(tmp_path: Path) -> tuple[TableSource, list[grids.GridTally]]:
    """A table of the hostile values around every edge, NaN, NULL and +-inf in columns of
    these bounds, and whole numbers with NULL; a grid tally per pair of its columns."""
    columns, table = [], {}
    for j, name in enumerate((*COLUMNS, "ages")):
        lower, upper, cells = AXES[name]
        columns.append(
            {"name": f"c{j}", "type": "numeric", "lower": lower, "upper": upper, "bins": 5}
        )
        values = [*values_around(tuple(support(lower, upper, cells).axis_edges(0)))]
        values += [v for v in SPECIAL_FLOATS if v is not None][:4] + [None]
        table[f"c{j}"] = values
    rows = max(map(len, table.values()))
    rng = np.random.default_rng(7)
    arrays = {
        k: float_array([v[i] for i in rng.integers(0, len(v), rows)]) for k, v in table.items()
    }
    arrays["c5"] = pa.array([WHOLE[i] for i in rng.integers(0, len(WHOLE), rows)], pa.int64())
    source = TableSource(str(write_layout(pa.table(arrays), tmp_path / "g.parquet", [5])))
    schema = Schema.from_dict({"columns": columns}).accepting()
    tallies = []
    for first, second in PAIRS:
        shape = f"{AXES[COLUMNS[first % 5]][2]}x{AXES[COLUMNS[second]][2]}"
        chosen = support_from_schema(schema, [f"c{first}", f"c{second}"], {"grid": shape})
        tallies.append(grids.grid_tally(chosen, schema))
    return source, tallies


# DuckDB's grid forms, forced: keys of the unclamped values, or of the values clamped row by
# row (`duckdb_engine.unclamped_dialect` chooses by the share of the first rows outside the bounds)
FORMS = {"unclamped keys": 1.0, "each row clamped": -1.0}


@pytest.mark.parametrize("form", FORMS)
def test_every_engine_counts_an_even_grid_as_in_process(tmp_path: Path, monkeypatch, form):
    """Grid counts over those columns on every Parquet engine against the in-process engine,
    DuckDB in each of its forms."""
    monkeypatch.setattr(duckdb_engine, "OUTSIDE_SHARE", FORMS[form])
    source, tallies = grid_tallies(tmp_path)
    for tally in tallies:
        expected = tally_table(source, tally, "inprocess").tolist()
        assert sum(expected) > 0
        for engine in layout_engines(False):
            assert tally_table(source, tally, engine).tolist() == expected, (engine, tally)


def test_the_engine_test_catches_nan_keys_taken_as_numbers(tmp_path: Path, monkeypatch):
    """Broken twin: no group's key read as missing, so NaN (a NaN key) is counted in the top
    cell and NULL (a NULL key, which greatest() skips) in the bottom one."""
    source, tallies = grid_tallies(tmp_path)
    monkeypatch.setattr(duckdb_engine, "OUTSIDE_SHARE", FORMS["unclamped keys"])
    monkeypatch.setattr(grids, "missing_sql", lambda dialect, value, kind: "FALSE")
    assert all(duckdb_differs(source, t) for t in tallies)


def test_the_engine_test_catches_missing_values_clamped_in(tmp_path: Path, monkeypatch):
    """Broken twin of the clamped form: no missing value left out, so NaN, clamped (DuckDB's
    NaN is above every number), is counted in the top cell."""
    source, tallies = grid_tallies(tmp_path)
    monkeypatch.setattr(duckdb_engine, "OUTSIDE_SHARE", FORMS["each row clamped"])
    number_sql = grids.number_sql
    monkeypatch.setattr(
        grids, "number_sql", lambda *arguments: (number_sql(*arguments)[0], "FALSE")
    )
    assert all(duckdb_differs(source, t) for t in tallies)


def duckdb_differs(source: TableSource, tally: grids.GridTally) -> bool:
    """Whether DuckDB's counts of the grid differ from the in-process engine's."""
    return (
        tally_table(source, tally, "duckdb").tolist()
        != tally_table(source, tally, "inprocess").tolist()
    )


def grid_forms(monkeypatch) -> list[bool]:
    """Each DuckDB grid query's form from now on, as `Dialect.unclamped_keys` (a spy)."""
    forms, keys_query = [], grids.GridTally._keys_query

    def spied(self, dialect, kinds, table):
        forms.append(dialect.unclamped_keys)
        return keys_query(self, dialect, kinds, table)

    monkeypatch.setattr(grids.GridTally, "_keys_query", spied)
    return forms


@pytest.mark.parametrize(
    ("outside", "far", "unclamped"),
    [(0.0, True, True), (0.005, True, True), (0.5, True, False), (0.3, False, True)],
)
def test_duckdb_clamps_each_row_where_its_first_rows_lie_outside(
    tmp_path: Path, monkeypatch, outside, far, unclamped
):
    """A table whose values beyond the grid's bounds would add groups for more than
    OUTSIDE_SHARE of its first rows, here every value of a share of the rows at 10^9 to 10^10
    times the bound (each its own key), is counted with each row clamped; below it, by
    unclamped keys; the same counts either way. 30% of the rows just above the bounds
    (100 to 120: three keys an axis) keep the unclamped keys. Twins: without the choice (every
    grid unclamped), the table of half its rows far outside is counted unclamped; the share of
    rows outside as the measure (before 2026-12-07, last), the table of 30% just outside is
    counted with each row clamped; both caught."""
    rows = 4000
    rng = np.random.default_rng(11)
    values = rng.uniform(0, 100, (rows, 2))
    chosen = rng.random(rows) < outside
    if far:
        values[chosen] *= rng.uniform(1e9, 1e10, (int(chosen.sum()), 1))
    else:
        values[chosen] = rng.uniform(100.5, 120, (int(chosen.sum()), 2))
    values[rng.random(rows) < 0.05, 0] = np.nan
    frame = pa.table({"a": values[:, 0], "b": values[:, 1]})
    source = TableSource(str(write_layout(frame, tmp_path / "o.parquet", [1000])))
    columns = [{"name": c, "type": "numeric", "lower": 0, "upper": 100, "bins": 5} for c in "ab"]
    schema = Schema.from_dict({"columns": columns}).accepting()
    tally = grids.grid_tally(support_from_schema(schema, ["a", "b"], {"grid": "8x8"}), schema)
    forms = grid_forms(monkeypatch)
    assert not duckdb_differs(source, tally)
    assert forms == [unclamped]


def test_the_check_catches_a_key_clamped_short():
    """Broken twin: the keys clamped to one cell short of the top."""
    found, even = axis("ages")
    assert even is not None
    values = around(found)
    short = dataclasses.replace(even, cells=even.cells - 1)  # the same key, clamped short
    assert duckdb_cells(found, short, values) != numpy_cells(found, values)


def test_the_check_catches_a_comparison_on_the_wrong_side(monkeypatch):
    """Broken twin: [e_B < v] where numpy's search counts the edges <= v."""
    found, even = axis("decimal")
    assert even is not None
    values = around(found)
    right = even.sql(sql.DUCKDB, "v")
    monkeypatch.setattr(grids.EvenAxis, "sql", lambda self, dialect, v: right.replace("<=", "<"))
    assert duckdb_cells(found, even, values) != numpy_cells(found, values)


def test_the_check_catches_an_axis_taken_unchecked():
    """Broken twin: edges that collapse near 2^53 (several in one bucket), placed anyway."""
    found, even = axis("near 2^53")
    assert even is None
    lower, upper, cells = AXES["near 2^53"]
    step, factor = (upper - lower) / cells, cells / (upper - lower)
    unchecked = dataclasses.replace(grids.EvenAxis(lower, step, factor, cells))
    values = around(found)
    assert duckdb_cells(found, unchecked, values) != numpy_cells(found, values)
