"""Every engine counts every edge value exactly as the in-process engine (issue 41, item 2).

The audit found DuckDB putting NaN in the top bin whenever its Parquet row group held another
value: pyarrow leaves NaN out of a row group's min/max statistics and DuckDB folded `v = NaN`
to false from them. The older equality tests never saw a real NaN (pandas -> Arrow turns NaN
into null), so here every Parquet file is written from pyarrow arrays built from Python values
(NaN stays NaN, None is null), in several row-group layouts (one group; one row per group;
groups of three with empty groups between), and every PostgreSQL table holds 'NaN', NULL,
'Infinity' and '-Infinity' as written by COPY.

Values: NaN (also with the sign bit set), null, ±inf, ±0.0, subnormals, the smallest normal,
±1e308 and the largest doubles, each bin edge and bound and one float step either side of it
(numpy.nextafter); whole numbers at and around the int64 limits and 2^53; dates and
timestamps at the epoch, the bounds and the ends of the calendar; texts with surrounding
blanks, other cases and Unicode blanks. A hypothesis property test draws tables of these
values and of arbitrary floats, grids and row-group layouts; every engine must equal the
in-process engine, and adding one row must change every engine's counts by L1 exactly 1,
the sensitivity every mechanism assumes. A broken twin (DuckDB with its statistics
propagation back on, the audited code) shows the check catching the audit's change of 101.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import math
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from mechanisms.counting import TableSource, count_cells, sql, tally_table
from mechanisms.counting.bounding import BoundedTally
from mechanisms.counting.tally import CellTally
from mechanisms.errors import MechanismError
from mechanisms.schema import Schema
from tests.counting.engine_tables import (
    POSTGRES_URL,
    postgres_schema,  # noqa: F401 (the fixture `postgres`)
)
from tests.counting.test_counting_engines import (
    PARQUET_ENGINES,
    POSTGRES_ENGINES,
    SPARK,
    layout_engines,
)

NEGATIVE_NAN = float(np.array([0xFFF8000000000001], dtype=np.uint64).view(np.float64)[0])
SMALLEST_NORMAL = float(np.finfo(np.float64).tiny)
LARGEST = float(np.finfo(np.float64).max)
SPECIAL_FLOATS = [
    math.nan,
    NEGATIVE_NAN,
    None,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    5e-324,
    -5e-324,
    SMALLEST_NORMAL,
    float(np.nextafter(SMALLEST_NORMAL, 0)),
    1e308,
    -1e308,
    LARGEST,
    -LARGEST,
]
INT64 = np.iinfo(np.int64)
SPECIAL_INTS = [
    int(INT64.min),
    int(INT64.min) + 1,
    -(2**53) - 1,
    -(2**53),
    -1,
    0,
    1,
    2**53,
    2**53 + 1,
    2**62,
    int(INT64.max) - 512,
    int(INT64.max) - 1,
    int(INT64.max),
    None,
]
FLOAT_COLUMNS = [
    {"name": "audit", "type": "numeric", "lower": -1, "upper": 1, "bins": 6},
    {"name": "wide", "type": "numeric", "lower": -7.3, "upper": 12.9, "bins": 7},
    {"name": "edges", "type": "numeric", "lower": 0, "upper": 10, "bins": [0, 0.5, 2.5, 3, 10]},
    # the narrowest bins a schema accepts (width 1e-12, the most decimals); subnormals in bin 0
    {"name": "tiny", "type": "numeric", "lower": 0, "upper": 3e-12, "bins": 3},
    {"name": "vast", "type": "numeric", "lower": -1e307, "upper": 1e307, "bins": 5},
    {"name": "whole", "type": "numeric", "lower": -3, "upper": 30, "integer": True, "bins": 7},
]
INT_COLUMNS = [
    # the widest whole-number bounds a schema accepts (a float holds them exactly)
    {"name": "limits", "type": "numeric", "lower": -(2**53), "upper": 2**53 - 1, "integer": True},
    {"name": "small", "type": "numeric", "lower": -3, "upper": 30, "integer": True, "bins": 7},
    {"name": "coded", "type": "categorical", "categories": ["-1", "0", str(INT64.max)]},
]
TEXT_COLUMNS = [
    {"name": "sex", "type": "categorical", "categories": ["F", "M", " F", "f"]},
    {
        "name": "strict",
        "type": "categorical",
        "categories": ["F", "M"],
        "missing": "cell",
        "unknown": "other",
    },
]
TEXTS = [
    "F",
    "M",
    "f",
    " F",
    "F ",
    "m",
    "",
    "  ",
    "\t\n",
    "\u3000",
    "\xa0F",
    "é",
    None,
    "\x1c",
    "\x85",
    "\u2028F\u2029",
    "\u200b",
]
DAYS = [
    datetime.date(1, 1, 1),
    datetime.date(1677, 9, 21),
    datetime.date(1899, 12, 31),
    datetime.date(1900, 1, 1),
    datetime.date(1969, 12, 31),
    datetime.date(1970, 1, 1),
    datetime.date(2030, 12, 31),
    datetime.date(2031, 1, 1),
    datetime.date(2262, 4, 12),
    datetime.date(9999, 12, 31),
    None,
]
DATE_COLUMNS = [
    {
        "name": "day",
        "type": "date",
        "part": "date",
        "lower": "1900-01-01",
        "upper": "2030-12-31",
        "bins": 7,
    },
    {"name": "year", "type": "date", "part": "year", "lower": 1900, "upper": 2030},
    {"name": "month", "type": "date", "part": "month"},
    {"name": "weekday", "type": "date", "part": "weekday"},
]
STAMPS = [
    datetime.datetime(1, 1, 1),
    datetime.datetime(1969, 12, 31, 23, 59, 59, 999999),
    datetime.datetime(1970, 1, 1),
    datetime.datetime(2000, 2, 29, 12),
    datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
    None,
]
STAMP_COLUMNS = [
    {"name": "hour", "type": "date", "part": "hour", "bins": 5},
    {"name": "utc weekday", "type": "date", "part": "weekday"},
]
# Row-group layouts: group sizes in order (0: an empty group); None: one group of every row.
LAYOUTS = {"one group": None, "one row each": [1], "threes with empty groups": [3, 0]}


def float_values(specials: list[float | None]) -> list[float | None]:
    """Every edge of the float columns with a float step either side, and a special float after
    every two of them (so a row group of three holds NaN beside finite values)."""
    near = []
    for document in FLOAT_COLUMNS:
        spec = Schema.from_dict({"columns": [document]}).column(document["name"])
        for edge in spec.edges:
            near += [
                edge,
                float(np.nextafter(edge, -math.inf)),
                float(np.nextafter(edge, math.inf)),
            ]
    cycle = itertools.cycle(specials)
    values: list[float | None] = []
    for start in range(0, len(near), 2):
        values += [*near[start : start + 2], next(cycle)]
    assert len(values) > 2 * len(specials)  # every special float is there, twice
    return values


def int_values() -> list[int | None]:
    values: list[int | None] = list(SPECIAL_INTS)
    for document in INT_COLUMNS[:2]:
        spec = Schema.from_dict({"columns": [document]}).column(document["name"])
        values += [int(e) + step for e in spec.edges for step in (-1, 0, 1)]
    return values


def write_layout(table: pa.Table, path: Path, layout: list[int] | None) -> Path:
    """`table` as one Parquet file whose row groups follow `layout` (repeated to the end)."""
    with pq.ParquetWriter(path, table.schema) as writer:
        if layout is None:
            writer.write_table(table)
            return path
        start, step = 0, 0
        while start < table.num_rows:
            size = layout[step % len(layout)]
            writer.write_table(table.slice(start, size), row_group_size=max(size, 1))
            start, step = start + size, step + 1
    return path


def float_array(values: list[float | None]) -> pa.Array:
    """Doubles from Python values: NaN stays NaN, None is null (never through pandas)."""
    array = pa.array(values, type=pa.float64(), from_pandas=False)
    assert array.null_count == sum(v is None for v in values)
    return array


def counts_by_engine(source: TableSource, schema: Schema, columns: list[str], engines) -> dict:
    return {e: count_cells(source, schema, columns, e).tolist() for e in engines}


def assert_all_equal(found: dict[str, Any], context: Any) -> None:
    reference = found["inprocess"]
    for engine, counts in found.items():
        assert counts == reference, (context, engine, counts, reference)


def postgres_table(connection, namespace: str, name: str, columns: dict[str, tuple[str, list]]):
    """A PostgreSQL table of (type, values) columns, copied in as written (NaN stays NaN)."""
    from psycopg import sql

    table = sql.Identifier(namespace, name)
    declared = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(kind))
        for c, (kind, _values) in columns.items()
    )
    connection.execute(sql.SQL("CREATE TABLE {} ({})").format(table, declared))
    names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    rows = zip(*(values for _kind, values in columns.values()), strict=True)
    with connection.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, names)) as copy:
        for row in rows:
            copy.write_row(list(row))
    return TableSource(POSTGRES_URL, table=f"{namespace}.{name}")


# ---------------------------------------------------------------- the audit's case


AUDIT_SCHEMA = Schema.from_dict({"columns": [FLOAT_COLUMNS[0]]})
AUDIT_D = [math.nan] * 50 + [None]


def test_the_audits_nan_case_counts_alike_on_every_engine(tmp_path, postgres):
    """D = 50 NaN + 1 null, D' = D + one row 0.5 (bounds -1..1, 6 bins): the audit saw DuckDB
    give [0,0,0,0,1,50,1] for D' where in-process gives [0,0,0,0,1,0,51], an L1 change of 101
    from one added row. Every engine must give in-process' counts, so the change is 1."""
    connection, namespace = postgres
    expected = {"D": [0, 0, 0, 0, 0, 0, 51], "D'": [0, 0, 0, 0, 1, 0, 51]}
    for name, values in (("D", AUDIT_D), ("D'", [*AUDIT_D, 0.5])):
        path = write_layout(pa.table({"audit": float_array(values)}), tmp_path / name, None)
        found = counts_by_engine(TableSource(str(path)), AUDIT_SCHEMA, ["audit"], PARQUET_ENGINES)
        source = postgres_table(
            connection, namespace, f"audit {name}", {"audit": ("double precision", values)}
        )
        found |= {
            f"postgres {e}": c
            for e, c in counts_by_engine(source, AUDIT_SCHEMA, ["audit"], POSTGRES_ENGINES).items()
        }
        for engine, counts in found.items():
            assert counts == expected[name], (name, engine)


def test_the_check_catches_duckdb_folding_nan_from_statistics(tmp_path, monkeypatch):
    """Broken twin: the DuckDB engine with statistics propagation back on (the audited code).
    The one-row check above sees the audit's L1 change of 101 where 1 is allowed."""
    import duckdb

    connect = duckdb.connect

    def with_statistics(database, config):
        return connect(database, config={k: v for k, v in config.items() if "optimizer" not in k})

    monkeypatch.setattr(duckdb, "connect", with_statistics)
    counted = []
    for name, values in (("D", AUDIT_D), ("D'", [*AUDIT_D, 0.5])):
        path = write_layout(pa.table({"audit": float_array(values)}), tmp_path / name, None)
        counted.append(count_cells(TableSource(str(path)), AUDIT_SCHEMA, None, "duckdb"))
    assert np.abs(counted[1] - counted[0]).sum() == 101


# ---------------------------------------------------------------- fixed edge values


def float_case(values: list[float | None]) -> tuple[pa.Table, list[dict], dict[str, str]]:
    """Every float column holding `values`, as doubles."""
    table = pa.table({d["name"]: float_array(values) for d in FLOAT_COLUMNS})
    return table, FLOAT_COLUMNS, {d["name"]: "double precision" for d in FLOAT_COLUMNS}


def edge_tables() -> dict[str, tuple[pa.Table, list[dict], dict[str, str]]]:
    """name -> (Arrow table, schema columns, PostgreSQL type per column)."""
    floats = float_values(SPECIAL_FLOATS)
    # without +inf in a file's statistics DuckDB folded `v = NaN` to false (the audit's case)
    finite = float_values([v for v in SPECIAL_FLOATS if v is None or not math.isinf(v)])
    ints = int_values()
    return {
        "floats": float_case(floats),
        "finite floats": float_case(finite),
        "whole numbers": (
            pa.table({d["name"]: pa.array(ints, type=pa.int64()) for d in INT_COLUMNS}),
            INT_COLUMNS,
            {d["name"]: "bigint" for d in INT_COLUMNS},
        ),
        "texts": (
            pa.table({d["name"]: pa.array(TEXTS, type=pa.string()) for d in TEXT_COLUMNS}),
            TEXT_COLUMNS,
            {d["name"]: "text" for d in TEXT_COLUMNS},
        ),
        "dates": (
            pa.table({d["name"]: pa.array(DAYS, type=pa.date32()) for d in DATE_COLUMNS}),
            DATE_COLUMNS,
            {d["name"]: "date" for d in DATE_COLUMNS},
        ),
        "timestamps": (
            pa.table(
                {
                    "hour": pa.array(STAMPS, type=pa.timestamp("us")),
                    "utc weekday": pa.array(STAMPS, type=pa.timestamp("us", tz="UTC")),
                }
            ),
            STAMP_COLUMNS,
            {"hour": "timestamp", "utc weekday": "timestamp with time zone"},
        ),
    }


EDGE_TABLES = edge_tables()


def column_groups(documents: list[dict]) -> list[list[str]]:
    """Each column alone, and the first two together (row-major flat index)."""
    names = [d["name"] for d in documents]
    return [[n] for n in names] + [names[:2]]


@pytest.mark.parametrize("case", sorted(EDGE_TABLES))
def test_parquet_engines_count_every_edge_value_alike(case, tmp_path):
    table, documents, _types = EDGE_TABLES[case]
    schema = Schema.from_dict({"columns": documents})
    for layout, sizes in LAYOUTS.items():
        path = write_layout(table, tmp_path / f"{layout}.parquet", sizes)
        for columns in column_groups(documents):
            engines = layout_engines(sizes == [3, 0])
            found = counts_by_engine(TableSource(str(path)), schema, columns, engines)
            assert_all_equal(found, (case, layout, columns))
            assert np.sum(found["inprocess"]) == table.num_rows


# PostgreSQL cases: an edge table, stored with its own types or all as `numeric` (which holds
# 'NaN' and, since PostgreSQL 14, ±'Infinity'; both engines read it as double precision).
POSTGRES_CASES = {name: (name, None) for name in EDGE_TABLES} | {
    "floats as numeric": ("floats", "numeric")
}


@pytest.mark.parametrize("case", sorted(POSTGRES_CASES))
def test_postgres_engines_count_every_edge_value_alike(case, postgres, tmp_path):
    """The same values in PostgreSQL ('NaN', NULL, 'Infinity'): the counts of the Parquet file."""
    connection, namespace = postgres
    name, stored_as = POSTGRES_CASES[case]
    table, documents, types = EDGE_TABLES[name]
    schema = Schema.from_dict({"columns": documents})
    source = postgres_table(
        connection,
        namespace,
        f"edges {case}",
        {c: (stored_as or types[c], table.column(c).to_pylist()) for c in table.column_names},
    )
    parquet = TableSource(str(write_layout(table, tmp_path / "t.parquet", None)))
    for columns in column_groups(documents):
        found = counts_by_engine(source, schema, columns, POSTGRES_ENGINES)
        found = {f"PostgreSQL, {e}": counts for e, counts in found.items()}
        found["inprocess"] = count_cells(parquet, schema, columns, "inprocess").tolist()
        assert_all_equal(found, (case, columns))


def test_the_check_catches_a_blank_test_reading_ascii_whitespace_first(
    tmp_path, postgres, monkeypatch
):
    """Broken twin: `sql.blank_sql` trimming only texts that start with ASCII whitespace, so
    texts of other whitespace alone ("\u3000", "\x1c", "\x85") count as an unlisted category
    instead of missing; the comparisons above see it on DuckDB and PostgreSQL."""

    def ascii_first(dialect: sql.Dialect, text: str) -> str:
        space, ascii_space = dialect.text(sql.WHITESPACE), dialect.text(" \t\n\r")
        first = f"POSITION(left({text}, 1) IN {ascii_space}) > 0"
        return f"({text} = '' OR ({first} AND {dialect.trim}({text}, {space}) = ''))"

    monkeypatch.setattr(sql, "blank_sql", ascii_first)
    table, documents, types = EDGE_TABLES["texts"]
    schema = Schema.from_dict({"columns": documents})
    column = [documents[0]["name"]]
    parquet = TableSource(str(write_layout(table, tmp_path / "texts.parquet", None)))
    found = counts_by_engine(parquet, schema, column, ("inprocess", "duckdb"))
    connection, namespace = postgres
    stored = postgres_table(
        connection,
        namespace,
        f"texts {uuid.uuid4().hex}",
        {c: (types[c], table.column(c).to_pylist()) for c in table.column_names},
    )
    found["postgres"] = count_cells(stored, schema, column, "postgres").tolist()
    for engine in ("duckdb", "postgres"):
        assert found[engine] != found["inprocess"], engine


def test_postgres_holds_what_the_tests_say(postgres):
    """Guard: the table really holds NaN (equal to itself there, above every number), NULL and
    infinities, so the test above sees them."""
    connection, namespace = postgres
    source = postgres_table(
        connection,
        namespace,
        "guard",
        {"v": ("double precision", [math.nan, None, math.inf, -math.inf, -0.0, 5e-324])},
    )
    assert source.table is not None
    row = connection.execute(
        "SELECT count(*) FILTER (WHERE v = 'NaN'), count(*) FILTER (WHERE v IS NULL), "
        "count(*) FILTER (WHERE v = 'Infinity'), count(*) FILTER (WHERE v > 1e308), "
        "count(*) FILTER (WHERE v > 0 AND v < 1e-300) "
        f'FROM "{namespace}"."guard"'
    ).fetchone()
    assert row == (1, 1, 1, 2, 1)


def test_the_parquet_files_hold_real_nan(tmp_path):
    """Guard: the files carry NaN and null apart, and the layouts give the row groups meant."""
    table, _documents, _types = EDGE_TABLES["finite floats"]
    values = table.column("audit").to_pylist()
    nans = sum(v is not None and math.isnan(v) for v in values)
    assert nans >= 4 and values.count(None) >= 2
    for layout, sizes in LAYOUTS.items():
        path = write_layout(table, tmp_path / f"{layout}.parquet", sizes)
        read = pq.read_table(path).column("audit")
        assert read.null_count == values.count(None)
        assert int(np.isnan(read.to_numpy(zero_copy_only=False)).sum()) == nans + read.null_count
        groups = pq.ParquetFile(path).metadata
        sizes_found = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
        assert sum(sizes_found) == table.num_rows
        if sizes == [3, 0]:
            assert 0 in sizes_found and 3 in sizes_found


# ---------------------------------------------------------------- property test


def grids() -> st.SearchStrategy[dict]:
    """An equal-width or explicit-edge float column with bounds from the edge values."""
    bound = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_subnormal=True)
    width = st.sampled_from([1e-300, 1e-9, 0.1, 1.0, 3.7, 1e5, 1e300])
    bins = st.integers(min_value=1, max_value=12)

    def build(lower: float, width: float, bins: int, explicit: bool) -> dict:
        upper = lower + width
        if not upper > lower or not math.isfinite(upper):
            upper = float(np.nextafter(lower, math.inf))
        if not (np.diff(np.linspace(lower, upper, bins + 1)) > 0).all():
            bins = 1  # too narrow for distinct edges
        if explicit:
            inner = sorted({lower + width * k / (bins + 1) for k in range(1, bins + 1)})
            edges = [lower, *[e for e in inner if lower < e < upper], upper]
            return {"name": "v", "type": "numeric", "lower": lower, "upper": upper, "bins": edges}
        return {"name": "v", "type": "numeric", "lower": lower, "upper": upper, "bins": bins}

    return st.builds(build, bound, width, bins, st.booleans())


# Each example writes files and counts them on every engine: no deadline; fixtures per test.
DRAWN = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@st.composite
def float_tables(draw) -> tuple[dict, list[float | None], float | None, list[int] | None]:
    """(column, values, one more value, row-group layout): values on and around the grid's
    edges, the special floats, and arbitrary doubles (NaN payloads and signs included)."""
    document = draw(grids())
    try:
        spec = Schema.from_dict({"columns": [document]}).column("v")
    except MechanismError:  # bins a float cannot tell apart are refused before any count
        assume(False)
    near = [
        float(np.nextafter(e, d)) if d else float(e)
        for e in spec.edges
        for d in (-math.inf, 0, math.inf)
    ]
    value = st.one_of(
        st.sampled_from(near),
        st.sampled_from(SPECIAL_FLOATS),
        st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    )
    values = draw(st.lists(value, min_size=0, max_size=40))
    layout = draw(st.sampled_from(list(LAYOUTS.values()) + [[2], [5, 0, 1]]))
    return document, values, draw(value), layout


@settings(DRAWN, max_examples=40)
@given(case=float_tables())
def test_every_engine_adds_one_row_as_one_count(case, tmp_path_factory):
    """Property: on drawn tables, every Parquet engine equals the in-process engine, and adding
    one drawn row changes each engine's counts by exactly one in one cell (L1 = 1). Spark: the
    next test, on fewer drawn tables (each costs it two queries of about 0.3 s)."""
    adds_one_row_as_one_count(case, tmp_path_factory.mktemp("drawn"), layout_engines(False))


@pytest.mark.skipif(not SPARK, reason="no Spark cluster named (./test.sh starts one)")
@settings(DRAWN, max_examples=10)
@given(case=float_tables())
def test_spark_adds_one_row_as_one_count(case, tmp_path_factory):
    """The same property on Spark, on 10 drawn tables."""
    adds_one_row_as_one_count(case, tmp_path_factory.mktemp("drawn"), ("inprocess", *SPARK))


def adds_one_row_as_one_count(case, folder: Path, engines) -> None:
    document, values, extra, layout = case
    schema = Schema.from_dict({"columns": [document]})
    counted = {}
    for name, rows in (("D", values), ("D'", [*values, extra])):
        path = write_layout(pa.table({"v": float_array(rows)}), folder / f"{name}.parquet", layout)
        counted[name] = counts_by_engine(TableSource(str(path)), schema, ["v"], engines)
        assert_all_equal(counted[name], (document, rows, layout))
    for engine in engines:
        change = np.subtract(counted["D'"][engine], counted["D"][engine])
        assert np.abs(change).sum() == 1 and change.max() == 1, (engine, document, extra)


UNDERFLOW = {"name": "v", "type": "numeric", "lower": 0.0, "upper": 3.7, "bins": 1}


@settings(DRAWN, max_examples=25)
@given(case=float_tables())
@example(case=(UNDERFLOW, [], 5e-324, None))  # 5e-324 * (1 / 3.7): an underflow error before
def test_postgres_adds_one_row_as_one_count(case, postgres):
    """The same property inside PostgreSQL, whose NaN equals itself and exceeds every number."""
    connection, namespace = postgres
    document, values, extra, _layout = case
    schema = Schema.from_dict({"columns": [document]})
    counted = {}
    for name, rows in (("D", values), ("D'", [*values, extra])):
        table = f"drawn {uuid.uuid4().hex}"
        source = postgres_table(connection, namespace, table, {"v": ("double precision", rows)})
        try:
            counted[name] = counts_by_engine(source, schema, ["v"], POSTGRES_ENGINES)
        finally:
            connection.execute(f'DROP TABLE "{namespace}"."{table}"')
        frame = pa.table({"v": float_array(rows)}).to_pandas()
        assert counted[name]["inprocess"] == schema.cell_counts(frame, ["v"]).tolist()
        assert_all_equal(counted[name], (document, rows))
    for engine in POSTGRES_ENGINES:
        change = np.subtract(counted["D'"][engine], counted["D"][engine])
        assert np.abs(change).sum() == 1 and change.max() == 1, (engine, document, extra)


# ---------------------------------------------------------------- DuckDB's list search


def many_edges_case(bins: int) -> tuple[pa.Table, Schema]:
    """A column of `bins` explicit bins (irregular edges), and a table holding each inner
    edge, one float step either side of it, and the special floats."""
    edges = np.unique(np.round(np.random.default_rng(bins).uniform(-50, 50, bins + 1), 3))
    edges[[0, -1]] = -50.0, 50.0
    inner = edges[1:-1]
    values = [*SPECIAL_FLOATS, *inner, *np.nextafter(inner, np.inf), *np.nextafter(inner, -np.inf)]
    column = {"name": "x", "type": "numeric", "lower": -50, "upper": 50, "bins": edges.tolist()}
    table = pa.table({"x": float_array([None if v is None else float(v) for v in values])})
    return table, Schema.from_dict({"columns": [column]})


def searched_on_duckdb(monkeypatch, search=sql.list_search) -> None:
    """DuckDB placing values by its search alone, never by a first guess (`sql.Guess`)."""
    from mechanisms.counting import duckdb_engine

    searched = dataclasses.replace(sql.DUCKDB, search=search, item=None)
    monkeypatch.setattr(duckdb_engine, "DUCKDB", searched)


@pytest.mark.parametrize("bins", [200, sql.LIST_SEARCH_FROM + 1, 1000])
def test_duckdb_places_many_explicit_edges_as_numpy(bins, tmp_path, monkeypatch):
    """Without the first guess (tests/counting/test_guessed_search.py), DuckDB compares by a
    CASE tree under LIST_SEARCH_FROM edges, from there by a binary search over a list
    (`sql.list_search`): both count every edge value as in process."""
    table, schema = many_edges_case(bins)
    assert (len(schema.column("x").edges) - 2 >= sql.LIST_SEARCH_FROM) == (bins > 200)
    searched_on_duckdb(monkeypatch)
    source = TableSource(str(write_layout(table, tmp_path / "edges.parquet", None)))
    found = counts_by_engine(source, schema, ["x"], ("inprocess", "duckdb"))
    assert_all_equal(found, bins)
    assert np.sum(found["inprocess"]) == table.num_rows


def test_the_check_catches_a_list_search_off_by_the_equal_edge(tmp_path, monkeypatch):
    """Broken twin: the list search with its sides swapped (< for <=) puts every value equal
    to an edge one bin lower; the comparison above sees it."""

    def swapped(value: str, edges: list[float], side: str) -> str:
        return sql.list_search(value, edges, "left" if side == "right" else "right")

    searched_on_duckdb(monkeypatch, swapped)
    table, schema = many_edges_case(1000)
    source = TableSource(str(write_layout(table, tmp_path / "edges.parquet", None)))
    found = counts_by_engine(source, schema, ["x"], ("inprocess", "duckdb"))
    assert not np.array_equal(found["inprocess"], found["duckdb"])


# ---------------------------------------------------------------- the quantiles' one search


def rank_tallies() -> tuple[pa.Table, list[Any]]:
    """A column holding every quantile candidate, one float step either side of each and the
    special floats, in two groups (and rows of no group); its first pass (the whole grid: a
    first guess, or a binary search over a list) and second passes of a few candidates (a CASE
    tree), one per group, the other group without candidates."""
    from mechanisms.statistics.aggregates import RankTally
    from mechanisms.statistics.quantiles import quantile_grid

    document = {"name": "x", "type": "numeric", "lower": -50, "upper": 50, "bins": 10}
    schema = Schema.from_dict(
        {"columns": [document, {"name": "g", "type": "categorical", "categories": ["a", "b"]}]}
    ).accepting()
    grid = np.array(quantile_grid(schema.column("x")))
    small = (-50.0, -0.25, 0.0, float(np.nextafter(0.0, 1.0)), 7.5, 50.0)
    placed = np.concatenate([grid, small])
    values = [
        *SPECIAL_FLOATS,
        *placed,
        *np.nextafter(placed, np.inf),
        *np.nextafter(placed, -np.inf),
    ]
    groups = [("a", "b", None)[i % 3] for i in range(len(values))]
    table = pa.table(
        {
            "x": float_array([None if v is None else float(v) for v in values]),
            "g": pa.array(groups, type=pa.string()),
        }
    )
    tallies = [
        RankTally(schema, (), "x"),
        RankTally(schema, ("g",), "x"),
        RankTally(schema, ("g",), "x", (small, (), ())),
        RankTally(schema, ("g",), "x", ((), small[1:4], tuple(grid[::3]))),
    ]
    return table, tallies


def ranks_by_engine(
    table: pa.Table, tallies: list[Any], tmp_path: Path, postgres, engines=PARQUET_ENGINES
) -> dict:
    from mechanisms.counting import tally_table

    parquet = TableSource(str(write_layout(table, tmp_path / "ranks.parquet", [3])))
    connection, namespace = postgres
    types = {"x": "double precision", "g": "text"}
    stored = postgres_table(
        connection,
        namespace,
        f"ranks {uuid.uuid4().hex}",
        {c: (types[c], table.column(c).to_pylist()) for c in table.column_names},
    )
    found = {e: [tally_table(parquet, t, e).tolist() for t in tallies] for e in engines}
    found["postgres"] = [tally_table(stored, t, "postgres").tolist() for t in tallies]
    return found


def test_every_engine_counts_the_values_around_each_candidate_as_numpy(tmp_path, postgres):
    """The rank counts (#(x < c) and #(x <= c) for every candidate c, `sql.slot_search`: a
    first guess and two comparisons per candidate of its bucket, or one search over the
    candidates interleaved with their float successors) equal numpy's two searches on every
    candidate, one float step either side and the special floats."""
    table, tallies = rank_tallies()
    found = ranks_by_engine(table, tallies, tmp_path, postgres)
    frame = table.to_pandas()
    found["inprocess"] = [t.of_frame(frame).tolist() for t in tallies]
    assert all(sum(map(sum, counts)) > 0 for counts in found["inprocess"])
    assert_all_equal(found, "ranks")


@pytest.mark.parametrize(
    "grid", ["quantile grid", (-0.25, 0.0, 7.5), (-0.0, 0.0, 7.5, 7.5), (7.5,), ()]
)
def test_the_slot_of_a_value_counts_the_candidates_below_and_at_or_below_it(grid):
    """`RankCounts.slots_of`, the reference every engine's rank counts are compared with (one
    search, then the candidate it lands on compared), equals #(c < v) + #(c <= v) counted
    candidate by candidate: for every candidate, a float step either side, -0.0 and 0.0, and
    grids with a repeated candidate (two searches there) or none."""
    from mechanisms.statistics.quantiles import RankCounts, quantile_grid

    table, tallies = rank_tallies()
    spec = tallies[0].spec
    candidates = quantile_grid(spec) if grid == "quantile grid" else grid
    values = np.array([v for v in table.column("x").to_pylist() if v is not None])
    values = np.clip(values[~np.isnan(values)], spec.lower, spec.upper)
    values = np.concatenate([values, [-0.0, 0.0], np.asarray(candidates, dtype=float)])
    edges = np.asarray(candidates, dtype=float)[None, :]
    counted = (edges < values[:, None]).sum(axis=1) + (edges <= values[:, None]).sum(axis=1)
    on_a_candidate = (edges == values[:, None]).any(axis=1)  # some values on one, some between
    assert not candidates or (on_a_candidate.any() and not on_a_candidate.all())
    assert np.array_equal(RankCounts.slots_of(values, candidates), counted)


def test_duckdb_searching_counts_the_values_around_each_candidate_as_numpy(tmp_path, monkeypatch):
    """The same on DuckDB placing every value by its search over the candidates interleaved with
    their successors, never by a first guess."""
    from mechanisms.counting import tally_table

    searched_on_duckdb(monkeypatch)
    table, tallies = rank_tallies()
    parquet = TableSource(str(write_layout(table, tmp_path / "ranks.parquet", [3])))
    frame = table.to_pandas()
    found = [tally_table(parquet, t, "duckdb").tolist() for t in tallies]
    assert found == [t.of_frame(frame).tolist() for t in tallies]


def test_the_check_catches_a_slot_search_without_the_successors(tmp_path, postgres, monkeypatch):
    """Broken twin: interleaving each candidate with itself (not its successor) counts a value
    equal to a candidate as below it; the comparison above sees it on DuckDB (searching, not
    guessing) and PostgreSQL."""
    table, tallies = rank_tallies()
    searched_on_duckdb(monkeypatch)
    monkeypatch.setattr(sql, "successor", lambda value: value)
    found = ranks_by_engine(table, tallies, tmp_path, postgres, ("inprocess", "duckdb"))
    reference = [t.of_frame(table.to_pandas()).tolist() for t in tallies]
    for engine in ("duckdb", "postgres"):
        assert found[engine] != reference, engine
    assert found["inprocess"] == reference


@pytest.mark.parametrize("bound", ["lower", "upper"])
def test_the_check_catches_a_slot_clamped_to_a_wrong_bound(tmp_path, monkeypatch, bound):
    """Broken twin: the slots of values beyond one bound (the engines search the unclamped
    value, `RankTally.from_rows` clamps the slot) clamped one slot off that bound's own."""
    from mechanisms.statistics.aggregates import RankTally

    table, tallies = rank_tallies()
    right = RankTally.slot_bounds
    shift = (1, 0) if bound == "lower" else (0, -1)

    def off(self):
        low, high = right(self)
        return low + shift[0], high + shift[1]

    monkeypatch.setattr(RankTally, "slot_bounds", off)
    parquet = TableSource(str(write_layout(table, tmp_path / "ranks.parquet", [3])))
    for tally in tallies:
        found = tally_table(parquet, tally, "duckdb").tolist()
        assert found != tally.of_frame(table.to_pandas()).tolist()


def one_pass_on_duckdb(tmp_path: Path) -> tuple[list, list]:
    """DuckDB's and numpy's answers of the groups' sums (all of them) and the rank counts of the
    rank case's column in one pass (`GroupsAndRanks`), without and with groups: candidates,
    a float step either side, NaN (both signs), NULL, +-inf, -0.0 and subnormals."""
    from mechanisms.counting import tally_table
    from mechanisms.statistics.aggregates import GroupsAndRanks, GroupTally

    table, tallies = rank_tallies()
    joined = [GroupsAndRanks(GroupTally(t.schema, t.by, ("x",)), t) for t in tallies[:2]]
    parquet = TableSource(str(write_layout(table, tmp_path / "joined.parquet", [3])))
    frame = table.to_pandas()
    found = [tally_table(parquet, t, "duckdb").tolist() for t in joined]
    return found, [t.of_frame(frame).tolist() for t in joined]


def test_duckdb_reads_the_one_pass_in_its_own_forms_as_numpy(tmp_path):
    """DuckDB's one pass reads each value's slot by the sign of its distance to a candidate
    (`aggregates.sign_slot`), the values present by count_if (`aggregates.present_count`),
    clamps by a CASE (`aggregates.clamp_high`) and returns one row per group, its slots as
    text (`GroupsAndRanks.packed_query`): the answers are numpy's."""
    from mechanisms.statistics.aggregates import GroupsAndRanks, GroupTally

    _, tallies = rank_tallies()
    joined = GroupsAndRanks(GroupTally(tallies[1].schema, ("g",), ("x",)), tallies[1])
    query = joined.query(sql.DUCKDB, {"x": "float", "g": "text"}, "t")
    assert all(form in query for form in ("sign(", "count_if(", "string_agg(", "CASE WHEN"))
    assert "least(" not in query.split("sign(")[0]  # the slot's bucket clamped by the CASE
    found, reference = one_pass_on_duckdb(tmp_path)
    assert found == reference


def equal_read_below(written):
    """Twin of `sign_slot`: a value equal to its bucket's candidate (sign 0) read as below it."""

    def twin(dialect, value, grid):
        slot = written(dialect, value, grid)
        if slot is None:
            return None
        distance = slot[slot.index("sign(") + len("sign(") : -2]
        return f"{slot[:-1]} - CAST(({distance}) = 0 AS INTEGER))"

    return twin


def nan_present(written):
    """Twin of `present_count`: count(v), which counts NaN (not NULL) as a value present."""

    def twin(dialect, value, missing, j):
        return written(dialect, value, missing, j)[0], f"count(v{j})"

    return twin


def null_read_low(written):
    """Twin of `clamp_high`: the upper bound tested first, so NULL (no test true) reads lower."""

    def twin(dialect, value, lower, upper):
        low, high = sql.number(dialect, lower), sql.number(dialect, upper)
        above = f"WHEN {value} > {high} THEN {high}"
        return f"CASE {above} WHEN {value} >= {low} THEN {value} ELSE {low} END"

    return twin


def single_values_left_out(written):
    """Twin of `packed_query`: the slots holding one value left out of the text."""
    return lambda self, pairs: written(self, pairs).replace(" > 0 THEN ", " > 1 THEN ")


@pytest.mark.parametrize(
    ("name", "twin"),
    [
        ("sign_slot", equal_read_below),
        ("present_count", nan_present),
        ("clamp_high", null_read_low),
        ("GroupsAndRanks.packed_query", single_values_left_out),
    ],
)
def test_the_check_catches_a_broken_one_pass_form(tmp_path, monkeypatch, name, twin):
    """Broken twins of DuckDB's one-pass forms: the comparison above sees each."""
    from mechanisms.statistics import aggregates

    owner, attribute = (
        (aggregates, name) if "." not in name else (aggregates.GroupsAndRanks, name.split(".")[1])
    )
    monkeypatch.setattr(owner, attribute, twin(getattr(owner, attribute)))
    found, reference = one_pass_on_duckdb(tmp_path)
    assert found != reference


# ---------------------------------------------------------------- the exact sums


def group_tally_case() -> tuple[pa.Table, Any]:
    """Three columns of the special floats and the bounds a float step either side: bounds
    symmetric about 0 (its centred sum is the raw sum's SQL), bounds from 0 and bounds above 0
    (it is not); in two groups and rows of no group."""
    from mechanisms.statistics.aggregates import GroupTally

    bounds = {"symmetric": (-50.0, 50.0), "from zero": (0.0, 10.0), "above zero": (1.0, 7.0)}
    schema = grouped_schema(bounds)
    near = [float(np.nextafter(b, d)) for lo, hi in bounds.values() for b in (lo, hi, -1.0, 0.0)
            for d in (-math.inf, 0.0, math.inf)]  # fmt: skip
    values = [*SPECIAL_FLOATS, *near]
    columns = {
        name: float_array(values[i:] + values[:i]) for i, name in enumerate(bounds)
    }  # each column in another order, so a row's values differ
    columns["g"] = pa.array([("a", "b", None)[i % 3] for i in range(len(values))])
    return pa.table(columns), GroupTally(schema, ("g",), tuple(bounds))


def grouped_schema(bounds: dict[str, tuple[float, float]]) -> Schema:
    """Numeric columns of these bounds, and a column g of categories a and b (accepting)."""
    documents = [
        {"name": n, "type": "numeric", "lower": lo, "upper": hi, "bins": 4}
        for n, (lo, hi) in bounds.items()
    ]
    groups = {"name": "g", "type": "categorical", "categories": ["a", "b"]}
    return Schema.from_dict({"columns": [*documents, groups]}).accepting()


def tally_on_engines(
    table: pa.Table, tally: Any, tmp_path: Path, postgres, engines
) -> tuple[dict, TableSource]:
    """`tally` of `table` (text g, doubles) on `engines` over Parquet in row groups of three,
    and on PostgreSQL; and that Parquet source."""
    from mechanisms.counting import tally_table

    parquet = TableSource(str(write_layout(table, tmp_path / "sums.parquet", [3])))
    connection, namespace = postgres
    stored = postgres_table(
        connection,
        namespace,
        f"sums {uuid.uuid4().hex}",
        {c: ("text" if c == "g" else "double precision", table.column(c).to_pylist())
         for c in table.column_names},
    )  # fmt: skip
    found = {e: tally_table(parquet, tally, e).tolist() for e in engines}
    found["postgres"] = tally_table(stored, tally, "postgres").tolist()
    return found, parquet


def sums_by_engine(tmp_path: Path, postgres, engines=PARQUET_ENGINES) -> dict:
    table, tally = group_tally_case()
    engines = [e for e in engines if e != "inprocess"]
    found, _ = tally_on_engines(table, tally, tmp_path, postgres, engines)
    found["inprocess"] = tally.of_frame(table.to_pandas()).tolist()
    return found


def test_every_engine_sums_the_special_floats_exactly_alike(tmp_path, postgres):
    """The exact limb sums (`GroupTally`) on every engine equal numpy's, with the sums equal
    to the raw sum read from the raw column (`aggregates.raw_alike`) and without."""
    from mechanisms.statistics.aggregates import raw_alike

    _, tally = group_tally_case()
    alike = [sorted(raw_alike(tally.spec(c))) for c in tally.numeric]
    assert alike == [["centred"], [], []]
    assert_all_equal(sums_by_engine(tmp_path, postgres), "sums")


def test_the_check_catches_sums_read_from_the_raw_column_off_zero(tmp_path, postgres, monkeypatch):
    """Broken twin: every column's centred sums read from its raw column, also where they are
    taken around a point other than 0; the comparison above sees it."""
    from mechanisms.statistics import aggregates

    monkeypatch.setattr(aggregates, "raw_alike", lambda spec: frozenset({"centred"}))
    found = sums_by_engine(tmp_path, postgres, ("inprocess", "duckdb"))
    for engine in ("duckdb", "postgres"):
        assert found[engine] != found["inprocess"], engine


def test_the_check_catches_a_square_guard_two_binades_high(tmp_path, postgres, monkeypatch):
    """Broken twin: squares read as max(|g|, 4 t) (`SquareGuard`), so values below 4 t (0, the
    subnormals, and the missing values, which read the threshold) add a word of 1 or more
    where numpy adds 0; the comparison above sees it on PostgreSQL. DuckDB, whose products
    underflow as numpy's (`Dialect.ieee`), squares unguarded: its sums stay numpy's."""
    from mechanisms.statistics import aggregates

    high = property(lambda guard: 2.0 ** (math.floor(-guard.k / 2) + 1))
    monkeypatch.setattr(aggregates.SquareGuard, "floor_at", high)
    found = sums_by_engine(tmp_path, postgres, ("inprocess", "duckdb"))
    assert found["postgres"] != found["inprocess"]
    assert found["duckdb"] == found["inprocess"]


def missing_sums_by_engine(tmp_path: Path, postgres, engines=PARQUET_ENGINES) -> dict:
    """The groups' tally where group "a" holds only missing values (NULL, NaN, a negative
    NaN), "b" missing values beside +-inf and the largest doubles, and rows of no group:
    PostgreSQL and DuckDB sum every row unmasked and take the words of +inf off per missing value
    (`GroupTally.unmasked_query`), so a group of missing values only must come back 0."""
    from mechanisms.statistics.aggregates import GroupTally

    bounds = {"symmetric": (-50.0, 50.0), "from zero": (0.0, 10.0), "above zero": (1.0, 7.0)}
    values = [None, math.nan, NEGATIVE_NAN, None, math.inf, -LARGEST, LARGEST, math.nan, 3.5]
    groups = ["a", "a", "a", "b", "b", "b", "b", "b", None]
    columns = {name: float_array(values) for name in bounds}
    columns["g"] = pa.array(groups)
    table, tally = pa.table(columns), GroupTally(grouped_schema(bounds), ("g",), tuple(bounds))
    found, _ = tally_on_engines(
        table, tally, tmp_path, postgres, [e for e in engines if e != "inprocess"]
    )
    found["inprocess"] = tally.of_frame(table.to_pandas()).tolist()
    return found


def test_postgres_and_duckdb_take_off_exactly_what_the_missing_values_added(tmp_path, postgres):
    """Every engine's sums equal numpy's over the present values only, a group of missing
    values only included (its sums 0, its rows 3)."""
    found = missing_sums_by_engine(tmp_path, postgres)
    assert_all_equal(found, "missing sums")
    group_a = found["inprocess"][0]
    assert group_a[0] == 3 and not any(group_a[1:])


def test_the_check_catches_missing_values_taken_off_as_minus_infinity(
    tmp_path, postgres, monkeypatch
):
    """Broken twin: PostgreSQL and DuckDB take off the words of -inf (each term's lower bound)
    for each missing value, where a missing value added those of +inf: the comparison above
    sees it on both."""
    from mechanisms.statistics import aggregates

    def low_words(spec):
        terms = aggregates.clamped_terms(np.array([-math.inf]), spec)
        words = {}
        for which in aggregates.SUMS:
            k = aggregates.sum_exponent(*aggregates.sum_bounds(spec, which))
            high, low = aggregates.limbs(terms[which], k)
            words[which] = (int(high[0]) << aggregates.LIMB_BITS) + int(low[0])
        return words

    monkeypatch.setattr(aggregates, "high_words", low_words)
    found = missing_sums_by_engine(tmp_path, postgres, ("inprocess", "duckdb"))
    for engine in ("duckdb", "postgres"):
        assert found[engine] != found["inprocess"], engine


# ---------------------------------------------------------------- sums past int64

WIDE_ROWS = 16  # rows at a bound in one group: 16 words of 2^60 or more pass int64 (2^63)


def wide_sums_case() -> tuple[pa.Table, Any]:
    """Sums at the boundary where a 64-bit sum no longer holds them: in group "a" WIDE_ROWS
    rows at each column's upper bound (and +inf, clamped to it), in group "b" at its lower
    bound (and -inf), a float step inside each bound, and rows of no group; bounds of words
    2^60 (4, a power of two) and 7 2^58, so each group's sums pass int64 (|S| >= 2^63), and
    three words of low limb 2^31 - 128 in each group, so the limbs' sums carry."""
    from mechanisms.statistics.aggregates import GroupTally

    bounds = {"pow2": (-4.0, 4.0), "odd": (1.0, 7.0)}
    schema = grouped_schema(bounds)
    columns: dict[str, Any] = {}
    for name, (lo, hi) in bounds.items():
        inside = [float(np.nextafter(hi, 0.0))] * 3  # low limbs 2^31 - 128: their sums carry
        high = [hi] * WIDE_ROWS + [math.inf, *inside]
        low = [lo] * WIDE_ROWS + [-math.inf, float(np.nextafter(lo, hi)), *inside]
        columns[name] = float_array([*high, *low, hi, None])
    columns["g"] = pa.array(["a"] * (WIDE_ROWS + 4) + ["b"] * (WIDE_ROWS + 5) + [None, "a"])
    return pa.table(columns), GroupTally(schema, ("g",), tuple(bounds))


def wide_sums_by_engine(tmp_path: Path, postgres, engines=PARQUET_ENGINES) -> dict:
    """The tally on every engine, and on DuckDB summing the masked values in 31-bit limbs as
    Spark does."""
    from mechanisms.counting import duckdb_engine, tally_table

    table, tally = wide_sums_case()
    found, parquet = tally_on_engines(table, tally, tmp_path, postgres, engines)
    limbs = dataclasses.replace(duckdb_engine.DUCKDB, wide_sums=False, missing_clamps_high=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(duckdb_engine, "DUCKDB", limbs)
        found["duckdb limbs"] = tally_table(parquet, tally, "duckdb").tolist()
    found["reference"] = tally.of_frame(table.to_pandas()).tolist()
    return found


def test_sums_past_int64_are_exact_and_alike_wide_or_in_limbs(tmp_path, postgres):
    """DuckDB's and PostgreSQL's one wide sum per term (`Dialect.wide_sums`), DuckDB's limb
    sums, and the in-process sums of row groups of three (settled: `GroupTally.settled`) all
    equal numpy's, where every group's sums pass int64; each raw sum is the exact sum of the
    clamped values (all multiples of 2^-k here), as math.fsum rounds it."""
    from mechanisms.statistics.aggregates import LIMB_BITS, PER_COLUMN, SUMS, total
    from mechanisms.statistics.measures import sum_exponent

    table, tally = wide_sums_case()
    found = wide_sums_by_engine(tmp_path, postgres)
    found["inprocess"], reference = found["reference"], np.array(found["reference"])
    assert_all_equal(found, "wide sums")
    highs = reference[
        :2, [c for j in range(2) for c in range(2 + PER_COLUMN * j, (j + 1) * PER_COLUMN, 2)]
    ]
    assert (np.abs(highs) >= 2 ** (63 - LIMB_BITS)).all()  # |S| >= 2^63 for every sum of a, b
    frame = table.to_pandas()
    for j, name in enumerate(tally.numeric):
        spec = tally.spec(name)
        k = sum_exponent(spec.lower, spec.upper)
        raw = 2 + PER_COLUMN * j + 2 * SUMS.index("raw")
        for group, label in enumerate("ab"):
            values = frame[name][(frame["g"] == label).to_numpy()].dropna()
            expected = math.fsum(np.clip(values, spec.lower, spec.upper))
            assert total(*reference[group, raw : raw + 2], k) == expected, (name, label)


def test_the_check_catches_wide_sums_summed_in_64_bits(tmp_path, postgres, monkeypatch):
    """Broken twin: the words' one sum held in 64 bits (as an engine without wide sums would
    hold it) cannot hold these sums: DuckDB and PostgreSQL refuse the query, so the check
    above runs at the boundary where the limbs become necessary."""
    import duckdb

    from mechanisms.statistics import aggregates

    def narrow(dialect, word):
        return ["0", f"CAST(sum(CAST({word} AS BIGINT)) AS BIGINT)"]

    monkeypatch.setattr(aggregates, "word_sums", narrow)
    with pytest.raises(duckdb.Error, match="out of range|Overflow"):
        wide_sums_by_engine(tmp_path, postgres, ("duckdb",))
    with pytest.raises(MechanismError, match="out of range"):
        wide_sums_by_engine(tmp_path, postgres, ())


def test_the_check_catches_sums_left_unsettled(tmp_path, postgres, monkeypatch):
    """Broken twin: answers whose limb sums are not settled into one form: the reference and
    the in-process engine keep (sum of hi, sum of lo), which the SQL engines' exact sums no
    longer equal; the comparison above sees it on DuckDB and PostgreSQL."""
    from mechanisms.statistics import aggregates

    monkeypatch.setattr(aggregates.GroupTally, "settled", lambda self, answer: answer)
    found = wide_sums_by_engine(tmp_path, postgres, ("inprocess", "duckdb"))
    assert found["inprocess"] == found["reference"]
    for engine in ("duckdb", "postgres", "duckdb limbs"):
        assert found[engine] != found["reference"], engine


def test_the_largest_group_sum_settles_within_int64():
    """At MAX_GROUP_ROWS rows of words +-2^61 (past every bound's), a wide sum of +-2^93
    settles into (S >> 31, S mod 2^31), within int64, and reads back as S 2^-k."""
    from mechanisms.statistics.aggregates import SUMS, GroupTally, total
    from mechanisms.statistics.measures import MAX_GROUP_ROWS

    schema = Schema.from_dict(
        {"columns": [{"name": "x", "type": "numeric", "lower": -4, "upper": 4, "bins": 2}]}
    ).accepting()
    tally = GroupTally(schema, (), ("x",))
    for sign in (1, -1):
        exact = sign * MAX_GROUP_ROWS * 2**61
        row = (0, MAX_GROUP_ROWS, MAX_GROUP_ROWS, *[0, exact] * len(SUMS))
        answer = tally.from_rows([row])
        assert answer[0, 2:4].tolist() == [exact >> 31, exact % 2**31]
        assert total(*answer[0, 2:4], 58) == sign * 2.0 ** (93 - 58)


def larger_group_answer(tally_from_rows) -> str:
    """What reading back one engine row of a group of 2^34 rows of words 2^61 (sums 2^95,
    past int64 once settled) raises: its words."""
    from mechanisms.statistics.aggregates import SUMS, GroupTally

    schema = Schema.from_dict(
        {"columns": [{"name": "x", "type": "numeric", "lower": -4, "upper": 4, "bins": 2}]}
    ).accepting()
    rows = 2**34
    row = (0, rows, rows, *[0, rows * 2**61] * len(SUMS))
    with pytest.raises(Exception) as raised:
        tally_from_rows(GroupTally(schema, (), ("x",)), [row])
    return f"{type(raised.value).__name__}: {raised.value}"


def test_a_group_too_large_for_the_exact_sums_is_refused_in_words():
    """An engine's group of more than MAX_GROUP_ROWS rows is refused as Aggregates refuses it,
    before its sums are settled into int64 (where 2^95 would raise OverflowError)."""
    from mechanisms.statistics.aggregates import GroupTally

    said = larger_group_answer(GroupTally.from_rows)
    assert said.startswith("MechanismError: a group holds more than 4,294,967,296 rows"), said
    assert "group by one more column" in said


def test_the_words_need_the_group_check(monkeypatch):
    """Broken twin: without the check in from_rows the same row raises OverflowError."""
    from mechanisms.statistics import aggregates

    monkeypatch.setattr(aggregates, "refuse_large_group", lambda rows: None)
    said = larger_group_answer(aggregates.GroupTally.from_rows)
    assert said.startswith("OverflowError"), said


CASE_BLIND = "dp_portal_nondeterministic"  # equal under Unicode canonical equivalence only


def collated_texts(connection, namespace: str, tmp_path) -> tuple[TableSource, TableSource, Schema]:
    """The edge texts in PostgreSQL under a nondeterministic ICU collation (which finds texts in
    different Unicode forms equal, and refuses POSITION), the same in a Parquet file, and their
    schema."""
    connection.execute(
        f"CREATE COLLATION IF NOT EXISTS {CASE_BLIND} "
        "(provider = icu, locale = 'und-u-ks-level3', deterministic = false)"
    )
    table, documents, _types = EDGE_TABLES["texts"]
    stored = postgres_table(
        connection,
        namespace,
        f"collated {uuid.uuid4().hex}",
        {
            c: (f"text COLLATE {CASE_BLIND}", table.column(c).to_pylist())
            for c in table.column_names
        },
    )
    parquet = TableSource(str(write_layout(table, tmp_path / "texts.parquet", None)))
    return stored, parquet, Schema.from_dict({"columns": documents})


def test_texts_under_a_nondeterministic_collation_count_as_in_process(tmp_path, postgres):
    """PostgreSQL compares a stored text column under "C" (`Dialect.bytewise`), so its cells,
    and its persons when it is the person column (k = 1: one row per distinct ID), are the
    in-process ones, canonically equivalent texts of TEXTS included."""
    stored, parquet, schema = collated_texts(*postgres, tmp_path)
    expected = count_cells(parquet, schema, None, "inprocess")
    assert np.array_equal(count_cells(stored, schema, None, "postgres"), expected)
    persons = BoundedTally(CellTally(schema.accepting(), ("strict",)), "sex", 1, "c3" * 32)
    expected = tally_table(parquet, persons, "inprocess")
    assert np.array_equal(tally_table(stored, persons, "postgres"), expected)


def test_the_checks_catch_texts_read_under_their_column_s_collation(
    tmp_path, postgres, monkeypatch
):
    """Twins of the test above: the cells under the column's own collation (as before): the
    query fails on POSITION; the persons partitioned under it: IDs in two Unicode forms are
    one person, and fewer rows are kept."""
    from mechanisms.counting import bounding, postgres_engine

    stored, parquet, schema = collated_texts(*postgres, tmp_path)
    persons = BoundedTally(CellTally(schema.accepting(), ("strict",)), "sex", 1, "c3" * 32)
    monkeypatch.setattr(bounding, "person_key", lambda _dialect, person, _kind: person)
    merged = tally_table(stored, persons, "postgres")
    assert merged.sum() < tally_table(parquet, persons, "inprocess").sum()
    built = postgres_engine.postgres_dialect
    monkeypatch.setattr(
        postgres_engine,
        "postgres_dialect",
        lambda c: dataclasses.replace(built(c), bytewise=lambda text: text),
    )
    with pytest.raises(MechanismError):
        count_cells(stored, schema, None, "postgres")


@pytest.mark.parametrize("guarded", [True, False], ids=["as built", "twin: no guard"])
def test_postgres_bins_a_difference_that_would_underflow(postgres, monkeypatch, guarded):
    """5e-324 in [0, 3.7] with one bin: its difference times 1 / 3.7 underflows, which
    PostgreSQL refuses; the guard (`sql._scaled`) reads such a difference at 2^-1000 / factor,
    bin 0 as in process. Twin: the plain product, which PostgreSQL refuses."""
    if not guarded:
        monkeypatch.setattr(sql, "_scaled", lambda d, diff, factor: f"({diff} * {factor!r})")
    connection, namespace = postgres
    schema = Schema.from_dict({"columns": [UNDERFLOW]})
    rows = [5e-324, 0.0, 3.7, None]
    source = postgres_table(
        connection, namespace, f"tiny {uuid.uuid4().hex}", {"v": ("double precision", rows)}
    )
    frame = pa.table({"v": float_array(rows)}).to_pandas()
    if not guarded:
        with pytest.raises(MechanismError):
            count_cells(source, schema, ["v"], "postgres")
        return
    counted = count_cells(source, schema, ["v"], "postgres")
    assert counted.tolist() == schema.cell_counts(frame, ["v"]).tolist() == [3, 1]
