"""Every engine computes the aggregates of every release kind exactly as the in-process reference.

The reference is the tally's own Python code on the whole pandas DataFrame (`Tally.of_frame`:
for range counts `Support.counts` of `NumericColumn.numbers`); each engine computes the same
tally from the same rows stored as a Parquet file, a folder of three files, or a PostgreSQL
table, and must return the same int64 array. The tables are those of the cell-count equality
test (tests/counting/engine_tables.py: public tables, and hostile ones with real NaN, NULL,
+-inf, 1e300, values at and a float step around every edge, whole numbers with gaps, every date
part, time zones, an empty table, 40 random equal-width columns), with the first numeric column
renamed to a hostile name. Dask joins where a cluster is named (./test.sh starts one).
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pandas as pd
import pytest

import mechanisms
from mechanisms.counting import TableSource, engine_table, tally_table
from mechanisms.counting.bounding import POSITION, BoundedTally, whole
from mechanisms.counting.tally import CellTally
from mechanisms.errors import MechanismError
from mechanisms.range_count.api import support_from_schema
from mechanisms.range_count.grid_tally import grid_tally
from mechanisms.schema import Schema
from mechanisms.statistics.aggregates import GroupsAndRanks, GroupTally, table_passes
from tests.counting import engine_tables as tables
from tests.counting.engine_tables import postgres_schema  # noqa: F401 (the fixture `postgres`)
from tests.counting.test_counting_engines import (
    PARQUET_ENGINES,
    POSTGRES_ENGINES,
    layout_engines,
)

RANGE_NAME = 'r"; DROP TABLE x; --'


def renamed(frame: pd.DataFrame, document: dict, old: str, new: str) -> tuple[pd.DataFrame, dict]:
    columns = [{**c, "name": new} if c["name"] == old else c for c in document["columns"]]
    return frame.rename(columns={old: new}), {**document, "columns": columns}


def range_cases() -> dict[str, tuple[pd.DataFrame, dict, list[tuple[list[str], str | None]]]]:
    """name -> (frame, schema, [(columns, grid)]): grid None is the schema's bins."""
    frame, document = renamed(*tables.hostile_case(), "equal width", RANGE_NAME)
    hostile = [
        ([RANGE_NAME], None),
        ([RANGE_NAME], "64"),
        ([RANGE_NAME, "whole"], "7x31"),
        (["explicit", "day"], "10x5"),
        (["naïve ✓", "tiny range", "whole"], None),
    ]
    found = {"hostile": (frame, document, hostile), "empty": (frame.iloc[:0], document, hostile)}
    found["date parts"] = (
        *tables.date_parts_case(),
        [(["year", "date"], "13x9"), (["year as number"], "51")],
    )
    frame, document = tables.random_bins_case(columns=12)
    found["random bins"] = (frame, document, [([c], None) for c in frame.columns])
    for name, columns in (("cars", ["Horsepower", "Weight_in_lbs"]), ("co2", ["co2"])):
        found[name] = (
            *tables.public_case(name),
            [(columns, None), (columns, "x".join(["5"] * len(columns)))],
        )
    return found


CASES = range_cases()


def grids(document: dict, runs: list[tuple[list[str], str | None]]):
    schema = Schema.from_dict(document).accepting()
    for columns, grid in runs:
        support = support_from_schema(schema, columns, {} if grid is None else {"grid": grid})
        yield columns, grid_tally(support, schema)


def test_the_hostile_grid_counts_see_nan_and_the_edges():
    """Guard: the hostile column's rows fall on both sides of grid edges and some are NaN, so
    the equality above would catch an engine that keeps NaN, or closes a cell on the wrong
    side (a comparison `<=` where numpy's searchsorted has `<`)."""
    frame, document, _ = CASES["hostile"]
    ((_, tally),) = grids(document, [([RANGE_NAME], "64")])
    values = frame[RANGE_NAME].to_numpy(dtype=float)
    assert np.isnan(values).any() and tally.of_frame(frame).sum() == (~np.isnan(values)).sum()
    edges = tally.support.axis_edges(0)
    present = np.clip(values[~np.isnan(values)], edges[0], edges[-1])
    wrong = np.clip(np.searchsorted(edges, present, side="left") - 1, 0, 63)
    right = np.clip(np.searchsorted(edges, present, side="right") - 1, 0, 63)
    assert not np.array_equal(wrong, right)


@pytest.mark.parametrize("engine", [*PARQUET_ENGINES])
def test_a_range_count_release_from_a_source_equals_the_dataframe_release(engine, tmp_path):
    """run_release on an EngineTable: the same files, the manifest naming the engine."""
    frame, document, _ = CASES["hostile"]
    path = tables.write_parquet(frame, tmp_path / "h.parquet", 3)
    schema = Schema.from_dict(document).accepting()
    params = {"grid": "16x8", "random_boxes": 20, "mechanism": "tree"}
    runs = [
        mechanisms.run_release(
            "range_count",
            data,
            schema,
            epsilon=1.0,
            columns=[RANGE_NAME, "whole"],
            params=params,
            rng=mechanisms.seeded_source(9),
        )
        for data in (frame, engine_table(TableSource(str(path)), engine))
    ]
    assert runs[1].files == runs[0].files
    assert runs[1].manifest["parameters"].pop("counting_engine") == engine
    assert runs[1].manifest == runs[0].manifest


def test_sql_engines_refuse_what_they_cannot_place_in_words(tmp_path):
    frame, document, _ = CASES["hostile"]
    path = TableSource(str(tables.write_parquet(frame, tmp_path / "p.parquet")))
    schema = Schema.from_dict(document).accepting()
    points = support_from_schema(schema, ["whole"], {"points": [[1.0], [20.0]]})
    with pytest.raises(MechanismError, match="nearest point, which SQL engines do not repeat"):
        tally_table(path, grid_tally(points, schema), "duckdb")
    assert tally_table(path, grid_tally(points, schema), "inprocess").sum() > 0
    fine = support_from_schema(schema, ["whole"], {"grid": "5000"})
    with pytest.raises(MechanismError, match="coarser grid"):
        tally_table(path, grid_tally(fine, schema), "duckdb")


# ---------------------------------------------------------------- summary statistics

STATISTICS = {  # case -> (stat, by) requests; every kind of statistic, grouped and not
    "hostile": [
        (["count", f"sum:{RANGE_NAME}", "mean:whole", "variance:explicit"], [tables.HOSTILE]),
        ([f"median:{RANGE_NAME}", "q25:whole", "q90:explicit", "std:day"], ["flag", "code"]),
        (["mean:naïve ✓", "median:tiny range"], []),
    ],
    "date parts": [(["mean:year", "median:date", "q10:year as number"], [])],
    "random bins": [(["sum:c0", "variance:c1", "median:c2", "q75:c3"], [])],
    "cars": [(["mean:Horsepower", "median:Weight_in_lbs", "std:Acceleration"], ["Origin"])],
}
STATISTICS["empty"] = STATISTICS["hostile"]


def statistics_tallies(case: str):
    """Each request's tallies (its groups' sums, and every sum of its columns), the groups'
    sums with each quantile column's ranks in one pass, then for each quantile column its
    second pass (per-group grids inside narrow intervals of neighbouring end candidates, every
    third group without one)."""
    from mechanisms.statistics import parse_request, quantiles
    from mechanisms.statistics.aggregates import inner_tallies, tallies

    frame, document, _ = CASES[case]
    schema = Schema.from_dict(document).accepting()
    for stat, by in STATISTICS[case]:
        params = {"stat": stat, "by": by}
        request = parse_request(schema, params, epsilon=1.0, neighbouring="add-remove")
        groups, ranked = tallies(schema, request)
        every_sum = dataclasses.replace(groups, wanted=None)  # every term of every column
        yield from (groups, every_sum, *ranked, *(GroupsAndRanks(groups, r) for r in ranked))
        for tally in ranked:
            ends = quantiles.candidates(tally.spec, quantiles.END_CANDIDATES)
            pairs = [ends[g % (len(ends) - 1) : g % (len(ends) - 1) + 2] for g in range(9)]
            grids = [() if g % 3 == 1 else quantiles.inner(tally.spec, *pairs[g % 9])
                     for g in range(tally.shape[0])]  # fmt: skip
            yield from inner_tallies(schema, request.by, tally.column, grids)


@pytest.mark.parametrize("case", sorted(STATISTICS))
def test_one_pass_of_groups_and_ranks_is_the_two_passes(case, monkeypatch):
    """`GroupsAndRanks` (the groups' sums and a column's rank counts in one pass) answers, split,
    exactly the two tallies it joins, on the DataFrame (each engine's answer is compared with
    this one above); past JOINED_ROWS (group, slot) pairs, the two run apart."""
    from mechanisms.statistics import aggregates, parse_request
    from mechanisms.statistics.aggregates import tallies

    frame, document, _ = CASES[case]
    schema = Schema.from_dict(document).accepting()
    joined = [t for t in statistics_tallies(case) if isinstance(t, GroupsAndRanks)]
    assert joined
    for tally in joined:
        groups, ranks = tally.split(tally.of_frame(frame))
        assert np.array_equal(groups, tally.groups.of_frame(frame))
        assert np.array_equal(ranks, tally.ranks.of_frame(frame))
    for stat, by in STATISTICS[case]:
        request = parse_request(
            schema, {"stat": stat, "by": by}, epsilon=1.0, neighbouring="add-remove"
        )
        groups, ranked = tallies(schema, request)
        first = [GroupsAndRanks(groups, ranked[0])] if ranked else [groups]
        assert table_passes(schema, request) == [*first, *ranked[1:]]
        with monkeypatch.context() as patched:
            patched.setattr(aggregates, "JOINED_ROWS", 0)
            assert table_passes(schema, request) == [groups, *ranked]


@pytest.mark.parametrize(("engine", "one_pass"), [("duckdb", True), ("postgres", False)])
def test_postgresql_reads_the_groups_and_the_ranks_in_two_passes(engine, one_pass):
    """The tallies a statistics release asks an engine for (`read_aggregates`): the groups'
    sums with the median's ranks in one pass, except on PostgreSQL, whose planner would sort
    every row to group them (`aggregates.ONE_PASS_ENGINES`); the same aggregates either way."""
    from mechanisms.chunks import EngineTable
    from mechanisms.statistics import parse_request
    from mechanisms.statistics.compute import read_aggregates

    frame, document, _ = CASES["cars"]
    schema = Schema.from_dict(document).accepting()
    request = parse_request(
        schema, {"stat": ["mean:Horsepower", "median:Weight_in_lbs"], "by": ["Origin"]},
        epsilon=1.0, neighbouring="add-remove",
    )  # fmt: skip
    asked = []

    def tally(inner):
        asked.append(inner)
        return inner.of_frame(frame)

    table = EngineTable(engine, "the cars", lambda *_: None, tally)
    found = read_aggregates(table, schema, request)
    reference = read_aggregates(frame, schema, request)
    assert [isinstance(t, GroupsAndRanks) for t in asked] == ([True] if one_pass else [False] * 2)
    assert np.array_equal(found.table, reference.table)
    assert np.array_equal(found.ranks["Weight_in_lbs"], reference.ranks["Weight_in_lbs"])


@pytest.mark.parametrize("engine", [*PARQUET_ENGINES])
def test_a_statistics_release_from_a_source_equals_the_dataframe_release(engine, tmp_path):
    frame, document, _ = CASES["hostile"]
    path = tables.write_parquet(frame, tmp_path / "s.parquet", 3)
    schema = Schema.from_dict(document).accepting()
    stat, by = STATISTICS["hostile"][0]
    stat = [*stat, f"median:{RANGE_NAME}"]
    runs = [
        mechanisms.run_release(
            "statistics",
            data,
            schema,
            epsilon=2.0,
            columns=[RANGE_NAME, "whole", "explicit", *by],
            params={"stat": stat, "by": by},
            rng=mechanisms.seeded_source(4),
        )
        for data in (frame, engine_table(TableSource(str(path)), engine))
    ]
    assert runs[1].files == runs[0].files
    assert runs[1].manifest["parameters"].pop("counting_engine") == engine
    assert runs[1].manifest == runs[0].manifest


# ---------------------------------------------------------------- every kind on every engine


PERSON, SEED, K = 'who"; --', "5eed" * 8, 2


def with_persons(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with a person column: a few people with many rows, most with one, some
    rows without an ID (left out), IDs stored as whole numbers with gaps."""
    ids = pd.array([i % 7 if i % 3 else i for i in range(len(frame))], dtype="Int64")
    ids[::29] = pd.NA
    return frame.assign(**{PERSON: ids})


def kind_tallies(kind: str, case: str) -> list:
    """The tallies one release kind asks an engine for, on one case's schema."""
    if kind == "range counts":
        _, document, runs = CASES[case]
        return [tally for _, tally in grids(document, runs)]
    if kind == "statistics":
        return list(statistics_tallies(case))
    schema = Schema.from_dict(CASES[case][1]).accepting()
    inner = [CellTally(schema, (RANGE_NAME, tables.HOSTILE)), *kind_tallies("range counts", case)]
    statistics = kind_tallies("statistics", case)
    joined = next(t for t in statistics if isinstance(t, GroupsAndRanks))  # one pass of both
    inner += [*statistics[:3], joined, GroupTally(schema, (), ())]  # and a row count
    return [BoundedTally(t, PERSON, K, SEED) for t in inner]


KIND_CASES = [("range counts", c) for c in sorted(CASES)]
KIND_CASES += [("statistics", c) for c in sorted(STATISTICS)]
KIND_CASES += [("person level", c) for c in ("empty", "hostile")]


def table_of(kind: str, case: str) -> pd.DataFrame:
    frame = CASES[case][0]
    return with_persons(frame) if kind == "person level" else frame


def reference(tally, frame: pd.DataFrame, source: TableSource, single: str | None) -> np.ndarray:
    """The in-process reference: the tally of the DataFrame; at person level, of the rows at
    their stored positions (the in-process engine reads them; for one Parquet file, checked
    here against the DataFrame with its row numbers)."""
    if not whole(tally):
        return tally.of_frame(frame)
    expected = tally_table(source, tally, "inprocess")
    if single is not None:
        positions = [f"{single}#{i}" for i in range(len(frame))]
        assert np.array_equal(tally.of_frame(frame.assign(**{POSITION: positions})), expected)
    return expected


@pytest.mark.parametrize(("kind", "case"), KIND_CASES)
def test_each_kind_matches_the_reference_on_parquet(kind, case, tmp_path):
    frame = table_of(kind, case)
    paths = [tables.write_parquet(frame, tmp_path / f"{files}.parquet", files) for files in (1, 3)]
    for tally in kind_tallies(kind, case):
        for path in paths:
            source = TableSource(str(path))
            expected = reference(tally, frame, source, str(path) if path.is_file() else None)
            assert expected.dtype == np.int64
            # Spark: the folder, and not the empty table (its queries return no row; how
            # Spark reads its columns of no type is test_counting_engines' "empty" case)
            for engine in layout_engines(path.is_dir() and case != "empty"):
                got = tally_table(source, tally, engine)
                assert np.array_equal(got, expected), (kind, case, engine, path.name, tally)


@pytest.mark.parametrize(("kind", "case"), KIND_CASES)
def test_each_kind_matches_the_reference_in_postgresql(kind, case, postgres):
    connection, namespace = postgres
    frame = table_of(kind, case)
    table = f"{kind} {case}"
    like = table_of(kind, "hostile") if case == "empty" else None
    tables.write_postgres(connection, namespace, table, frame, like=like)
    source = TableSource(tables.POSTGRES_URL, table=f"{namespace}.{table}")
    for tally in kind_tallies(kind, case):
        expected = reference(tally, frame, source, None)
        for engine in POSTGRES_ENGINES:
            got = tally_table(source, tally, engine)
            assert np.array_equal(got, expected), (kind, case, engine, tally)


def test_person_level_keeps_at_most_k_rows_of_each_person(tmp_path):
    """The bound itself: the kept rows are exactly min(rows, k) per person with an ID, on
    every engine, and a twin that keeps k + 1 is seen."""
    frame = with_persons(CASES["hostile"][0])
    path = tables.write_parquet(frame, tmp_path / "p.parquet", 3)
    schema = Schema.from_dict(CASES["hostile"][1]).accepting()
    cells = CellTally(schema, (tables.HOSTILE,))
    per_person = frame[PERSON].dropna().value_counts()
    for k in (1, K, 5):
        expected = int(np.minimum(per_person, k).sum())
        for engine in PARQUET_ENGINES:
            kept = tally_table(TableSource(str(path)), BoundedTally(cells, PERSON, k, SEED), engine)
            assert kept.sum() == expected, (engine, k)
    assert np.minimum(per_person, K + 1).sum() > np.minimum(per_person, K).sum()


def test_a_group_of_more_than_a_million_rows_is_summed_whole():
    """OpenDP's unsized float sum stops at 2^20 values, so the statistics summed only a group's
    first 1,048,576 values (a sum of 2^20 + 5 values of 3.5 read 3,670,016); the exact sums read
    every row. Epsilon 1000: the noise (scale 0.009) is far below the 17.5 the five extra rows
    add. On d12f55f the estimate read 3,670,016.001."""
    rows = 2**20 + 5
    frame = pd.DataFrame({"x": np.full(rows, 3.5)})
    schema = Schema.from_dict(
        {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 9, "bins": 3}]}
    )
    output = mechanisms.run_release(
        "statistics", frame, schema, epsilon=1000.0, params={"stat": ["sum:x"]},
        neighbouring="add-remove", rng=mechanisms.seeded_source(1),
    )  # fmt: skip
    table = pd.read_csv(io.BytesIO(output.files["statistics.csv"]))
    assert abs(table["estimate"][0] - rows * 3.5) < 1.0


@pytest.mark.parametrize(
    ("name", "params", "columns"),
    [
        ("perturbed_histogram", {}, [tables.HOSTILE]),
        ("range_count", {"grid": "16", "random_boxes": 10, "mechanism": "tree"}, [RANGE_NAME]),
        ("statistics", {"stat": ["count", f"mean:{RANGE_NAME}", "median:whole"]}, None),
    ],
    ids=["histogram", "range counts", "statistics"],
)
def test_a_person_level_release_is_the_same_from_every_engine(name, params, columns, tmp_path):
    """run_release at person level on a source: bounded inside the engine by a seed from the
    release's random source, so the same source gives the same files on every engine."""
    frame = with_persons(CASES["hostile"][0])
    path = TableSource(str(tables.write_parquet(frame, tmp_path / "p.parquet", 3)))
    document = dict(CASES["hostile"][1])
    document["columns"] = [*document["columns"], {"name": PERSON, "role": "person_id"}]
    schema = Schema.from_dict({**document, "max_rows_per_person": K}).accepting()
    columns = columns or [RANGE_NAME, "whole"]
    outputs = [
        mechanisms.run_release(
            name,
            engine_table(path, engine),
            schema,
            epsilon=1.0,
            columns=columns,
            params=params,
            rng=mechanisms.seeded_source(8),
        )
        for engine in PARQUET_ENGINES
    ]
    assert all(output.files == outputs[0].files for output in outputs)
    assert outputs[-1].manifest["guarantee"]["max_rows_per_person"] == K
    assert outputs[-1].custodian["rows_dropped_by_bounding"] is None  # not counted on a source


@pytest.mark.skipif("dask" not in PARQUET_ENGINES, reason="needs a Dask cluster")
def test_dask_keeps_the_same_rows_of_persons_spread_over_many_pieces(tmp_path):
    """The Dask engine bounds persons in buckets by a hash of their ID, one bucket per piece
    (a piece per file here): 21 files, so 21 buckets whose keys merge in a tree of FAN_IN,
    persons of 1 to 40 rows spread over every file, some IDs missing, some people with all
    their rows in one file. Equal to the in-process reference for k = 1, K and 7, and keeping
    exactly min(rows, k) per person."""
    rng = np.random.default_rng(3)
    rows = 4_000
    ids = pd.array(rng.integers(0, 300, rows), dtype="Int64")
    ids[rng.random(rows) < 0.03] = pd.NA
    ids[:40] = 1_000  # one person's 40 rows, all in the first file
    frame = pd.DataFrame({tables.HOSTILE: rng.normal(0, 3, rows), PERSON: ids})
    document = {"columns": [{"name": tables.HOSTILE, "type": "numeric", "lower": -5,
                             "upper": 5, "bins": 10}]}  # fmt: skip
    cells = CellTally(Schema.from_dict(document).accepting(), (tables.HOSTILE,))
    source = TableSource(str(tables.write_parquet(frame, tmp_path / "many", 21)))
    per_person = frame[PERSON].dropna().value_counts()
    for k in (1, K, 7):
        bounded = BoundedTally(cells, PERSON, k, SEED)
        expected = tally_table(source, bounded, "inprocess")
        assert expected.sum() == np.minimum(per_person, k).sum()
        assert np.array_equal(tally_table(source, bounded, "dask"), expected), k
