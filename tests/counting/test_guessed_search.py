"""A value's place among many edges by a first guess and exact comparisons (`sql.Guess`).

DuckDB and Spark place a value among 48 edges or more (explicit bins, range-count grids, the
quantile candidates) by its bucket among equal-width buckets over the edges, computed as the
equal-width bins are, then a few exact comparisons with the edges of that bucket. The answer
must be numpy's `searchsorted` (and the quantile slot, #(c < v) + #(c <= v)) on every edge,
a float step either side of it, halfway between edges and on the special floats, for edges of
every shape: an even grid, decimal steps no double holds exactly, two grids merged, scattered
edges, a signed zero, bounds near the largest double, whole numbers near 2^53, the narrowest
span guessed; and those searched instead (crowded, too narrow, too few, too wide a span).

DuckDB is checked directly (one in-memory query per edge list, and a property test on drawn
edge lists); every Parquet engine (Dask when its cluster runs, Spark on two of the lists)
through the counting API on the edge lists a schema accepts. Four broken twins are caught: the
guess without its correction, a window one edge too narrow, edge b read as bucket b's first
(the shortcut of edge lists whose every edge is its own bucket) where it is not, and edges of a
decimal step computed by its reciprocal (`Spacing` divides, as the doubles were rounded).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.counting import TableSource, count_cells, sql, tally_table
from mechanisms.schema import Schema
from tests.counting.test_counting_engines import layout_engines
from tests.counting.test_edge_values import DRAWN, SPECIAL_FLOATS, float_array, write_layout

LARGEST = float(np.finfo(np.float64).max)
EVERY_SPECIAL = [v for v in SPECIAL_FLOATS if v is not None and not math.isnan(v)]


def edge_lists() -> dict[str, tuple[float, ...]]:
    rng = np.random.default_rng(45)
    lists = {
        "even": np.arange(0, 200_001, 200.0),  # the median's candidates in docs/scale.md
        "cents": np.round(np.arange(-300, 301) / 100, 2),  # steps of 0.01: not exact doubles
        "merged": np.union1d(np.arange(0, 1000, 2.0), np.arange(0, 1000, 5.0)),
        "scattered": np.unique(np.round(rng.uniform(-50, 50, 1000), 3)),
        "signed zero": np.array([-0.0, *range(1, 64)], dtype=float),
        "vast": np.linspace(-1e307, 1e307, 257),
        "largest": np.linspace(-LARGEST / 2, LARGEST / 2, 65),
        "near 2^53": np.arange(2**53 - 64, 2**53 + 64, 2.0),
        "narrowest": np.linspace(0, 2**-890, 64),  # subnormal values fall in bucket 0
        # searched, not guessed
        "too narrow": np.linspace(0, 1e-300, 64),
        "crowded": np.geomspace(1e-6, 1e6, 300),
        "too few": np.arange(float(sql.GUESS_FROM - 1)),
        "too wide": np.array([-LARGEST, *np.linspace(-1e307, 1e307, 63), LARGEST]),
    }
    return {name: tuple(float(e) for e in edges) for name, edges in lists.items()}


EDGES = edge_lists()
SEARCHED = ("too narrow", "crowded", "too few", "too wide")


def values_around(edges: tuple[float, ...]) -> list[float]:
    """Each edge, a float step either side, halfway between neighbours, and the special floats."""
    array = np.asarray(edges)
    halfway = array[:-1] / 2 + array[1:] / 2
    with np.errstate(over="ignore"):  # a step beyond the largest double is infinite
        steps = [np.nextafter(array, -math.inf), np.nextafter(array, math.inf)]
    return [float(v) for v in np.concatenate([array, *steps, halfway, EVERY_SPECIAL])]


def numpy_places(edges: tuple[float, ...], values: list[float]) -> list[list[int]]:
    left = np.searchsorted(edges, values, side="left")
    right = np.searchsorted(edges, values, side="right")
    return [[int(a), int(b), int(a + b)] for a, b in zip(left, right, strict=True)]


def duckdb_places(edges: tuple[float, ...], values: list[float]) -> list[list[int]]:
    """edge_search left and right, and slot_search, of each value in DuckDB (one query)."""
    places = [
        sql.edge_search(sql.DUCKDB, "v", list(edges), "x", side) for side in ("left", "right")
    ]
    places.append(sql.slot_search(sql.DUCKDB, "v", edges, "x"))
    with duckdb.connect(":memory:") as connection:
        connection.register("t", pa.table({"i": range(len(values)), "v": float_array(values)}))
        listed = ", ".join(f"CAST({p} AS BIGINT)" for p in places)
        rows = connection.execute(f"SELECT {listed} FROM t ORDER BY i").fetchall()  # noqa: S608
    return [list(row) for row in rows]


def test_the_edge_lists_take_every_path():
    """Guessed: windows of 1 to 3 edges over n, 2 n and 4 n buckets; the others searched."""
    shapes = {}
    for name, edges in EDGES.items():
        guess = sql.Guess.of(edges)
        assert (guess is None) == (name in SEARCHED), name
        if guess is not None:
            shapes[name] = (len(guess.first) // len(edges), guess.window)
    assert shapes["even"] == (1, 1) and shapes["merged"] == (2, 1)
    assert shapes["scattered"] == (4, 3)


@pytest.mark.parametrize("name", EDGES)
def test_duckdb_places_every_value_as_numpy(name):
    edges = EDGES[name]
    values = values_around(edges)
    assert duckdb_places(edges, values) == numpy_places(edges, values)


@st.composite
def drawn_edges(draw) -> tuple[tuple[float, ...], list[float]]:
    """Edge lists of 48 to 600 edges: an even grid (of rounded steps), scattered, or both merged,
    over drawn bounds; with values around them and arbitrary doubles."""
    low = draw(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
    span = draw(st.sampled_from([1e-12, 0.37, 1.0, 100.0, 2e5, 1e15]))
    count = draw(st.integers(min_value=sql.GUESS_FROM, max_value=600))
    even = np.linspace(low, low + span, count)
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    scattered = low + span * rng.random(count)
    digits = draw(st.integers(min_value=0, max_value=6))
    shape = draw(st.sampled_from(["even", "rounded", "scattered", "merged"]))
    chosen = {
        "even": even,
        "rounded": np.round(even, digits),
        "scattered": scattered,
        "merged": np.concatenate([even[::3], scattered[::2]]),
    }[shape]
    edges = tuple(float(e) for e in np.unique(chosen))
    extra = st.floats(allow_nan=False, allow_subnormal=True)
    return edges, values_around(edges) + draw(st.lists(extra, max_size=30))


@settings(DRAWN, max_examples=25)
@given(case=drawn_edges())
def test_duckdb_places_drawn_values_among_drawn_edges_as_numpy(case):
    edges, values = case
    assert duckdb_places(edges, values) == numpy_places(edges, values)


def broken(monkeypatch, narrower: int | None) -> None:
    """Guesses whose window is `narrower` edges narrower, or 0 (no correction) when None."""
    guessed = sql.Guess.of

    def of(edges: tuple[float, ...]) -> sql.Guess | None:
        guess = guessed(edges)
        if guess is None:
            return None
        window = 0 if narrower is None else guess.window - narrower
        return dataclasses.replace(guess, window=window)

    monkeypatch.setattr(sql.Guess, "of", staticmethod(of))


@pytest.mark.parametrize("name", [n for n in EDGES if n not in SEARCHED])
def test_the_check_catches_a_guess_without_its_correction(name, monkeypatch):
    """Broken twin: the bucket's first edge taken as the place, no comparison after it."""
    edges = EDGES[name]
    values = values_around(edges)
    broken(monkeypatch, None)
    assert duckdb_places(edges, values) != numpy_places(edges, values)


def test_the_check_catches_the_own_bucket_shortcut_taken_wrongly(monkeypatch):
    """Broken twin: edge b read as bucket b's first (no list of first edges) where it is not.

    The shortcut itself runs on "even" (each edge its own bucket) and "signed zero"."""
    assert {n for n, e in EDGES.items() if own_buckets(sql.Guess.of(e))} >= {"even", "signed zero"}
    assert not own_buckets(sql.Guess.of(EDGES["merged"]))
    guessed = sql.Guess.of

    def ranked(edges: tuple[float, ...]) -> sql.Guess | None:
        guess = guessed(edges)
        return guess and dataclasses.replace(guess, first=tuple(range(len(guess.first))))

    monkeypatch.setattr(sql.Guess, "of", staticmethod(ranked))
    edges = EDGES["merged"]
    values = values_around(edges)
    assert duckdb_places(edges, values) != numpy_places(edges, values)


def own_buckets(guess: sql.Guess | None) -> bool:
    return guess is not None and guess.first == tuple(range(len(guess.first)))


def test_spaced_edges_are_computed_not_read():
    """`Spacing`: the lists whose edges are the multiples of a step are computed per row."""
    spaced = {n for n, e in EDGES.items() if own_buckets(sql.Guess.of(e)) and sql.Spacing.of(e)}
    assert spaced == {"even", "cents", "signed zero", "near 2^53"}
    assert sql.Spacing.of(EDGES["cents"]) == sql.Spacing(-300.0, 1.0, 100.0)


def test_the_check_catches_spaced_edges_by_the_reciprocal(monkeypatch):
    """Broken twin: edge k of the cents as k * 0.01, where their doubles are float(k / 100)."""

    def by_reciprocal(self, dialect, index: str) -> str:
        moved = f"({index} + {sql.number(dialect, self.offset)})"
        return f"({moved} * {sql.number(dialect, self.numerator / self.denominator)})"

    monkeypatch.setattr(sql.Spacing, "sql", by_reciprocal)
    edges = EDGES["cents"]
    values = values_around(edges)
    assert duckdb_places(edges, values) != numpy_places(edges, values)


def test_the_check_catches_a_window_one_edge_too_narrow(monkeypatch):
    """Broken twin: scattered edges (three in some bucket) compared two at most."""
    edges = EDGES["scattered"]
    values = values_around(edges)
    broken(monkeypatch, 1)
    assert duckdb_places(edges, values) != numpy_places(edges, values)


# ---------------------------------------------------------------- every engine


def schema_of(edges: tuple[float, ...]) -> Schema:
    """A column binned by the edges, with a bin of the first and last gap's width beyond them."""
    lower, upper = 2 * edges[0] - edges[1], 2 * edges[-1] - edges[-2]
    document = {"name": "x", "type": "numeric", "lower": lower, "upper": upper}
    return Schema.from_dict({"columns": [{**document, "bins": [lower, *edges, upper]}]})


ENGINE_LISTS = ("even", "cents", "merged", "scattered", "signed zero", "near 2^53", "crowded")
SPARK_LISTS = ("cents", "scattered")  # each Spark query costs about 0.3 s of a JVM's work


@pytest.mark.parametrize("name", ENGINE_LISTS)
def test_every_engine_places_every_value_as_numpy(name, tmp_path: Path):
    """Histogram cells (edge_search, "right") and quantile slots over the same edges on every
    Parquet engine (Dask when its cluster runs; Spark, when it runs, on SPARK_LISTS), against
    the in-process engine."""
    from mechanisms.statistics.aggregates import RankTally

    edges = EDGES[name]
    schema = schema_of(edges).accepting()
    table = pa.table({"x": float_array([*values_around(edges), math.nan, None])})
    source = TableSource(str(write_layout(table, tmp_path / "x.parquet", [7])))
    ranks = RankTally(schema, (), "x", (edges,))
    frame = table.to_pandas()
    expected = (schema.cell_counts(frame, ["x"]).tolist(), ranks.of_frame(frame).tolist())
    for engine in layout_engines(name in SPARK_LISTS):
        found = count_cells(source, schema, ["x"], engine).tolist()
        assert (found, tally_table(source, ranks, engine).tolist()) == expected, engine
