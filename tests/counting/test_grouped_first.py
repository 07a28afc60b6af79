"""The statistics grouped by raw texts first on PostgreSQL and DuckDB (`aggregates.grouped_first`).

Where ANALYZE's statistics (PostgreSQL) or a count over the first rows (DuckDB,
`duckdb_engine.distinct_texts`) say a `by` text column holds few distinct texts, the
statistics queries group the rows by the raw texts (compared bytewise) and code each distinct
text once. The answers must equal the in-process engine's, on the edge texts (blanks, Unicode
whitespace, case and accents, a decomposed accent, NULL) under a hostile column name, with
the special floats in the summed and ranked column; and equal the per-row form's where the
table has no statistics or many texts. Broken twin: texts grouped case-blind (lower()) merge
texts the categories tell apart, which the comparison sees.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mechanisms.counting import TableSource, tally_table
from mechanisms.counting.tally import CellTally
from mechanisms.schema import Schema
from mechanisms.statistics import aggregates
from tests.counting.engine_tables import (
    postgres_schema,  # noqa: F401 (the fixture `postgres`)
)
from tests.counting.test_edge_values import SPECIAL_FLOATS, TEXTS, float_array, postgres_table

GROUP = 'g"; DROP TABLE x; --'  # a hostile name for the `by` column
CATEGORIES = ["F", "M", " F", "f", "é", "e\u0301"]


def case() -> tuple[pd.DataFrame, list[Any]]:
    """Every edge text with every special float (and a few plain values), and the tallies."""
    texts = [*TEXTS, "e\u0301", "E"]
    values = [*SPECIAL_FLOATS, -50.0, -0.25, 7.5, 50.0, 12.0]
    rows = [(t, v) for t in texts for v in values]
    frame = pd.DataFrame(
        {GROUP: pd.Series([t for t, _ in rows], dtype=object), "x": [v for _, v in rows]}
    )
    frame["x"] = frame["x"].astype("float64")  # None is NaN here: missing, as SQL's NULL
    schema = Schema.from_dict(
        {
            "columns": [
                {"name": "x", "type": "numeric", "lower": -50, "upper": 50, "bins": 10},
                {"name": GROUP, "type": "categorical", "categories": CATEGORIES},
            ]
        }
    ).accepting()
    tallies = [
        aggregates.GroupTally(schema, (GROUP,), ("x",)),
        aggregates.RankTally(schema, (GROUP,), "x"),
    ]
    return frame, tallies


def on_postgres(
    postgres, frame: pd.DataFrame, tallies: list[Any], analyze: bool, texts: Any = None
) -> list:
    """The tallies of the frame stored in PostgreSQL (x with its NULLs and NaNs), and whether
    each query grouped by the raw texts first; `texts` rewrites the grouped texts' items."""
    connection, namespace = postgres
    name = f"grouped {uuid.uuid4().hex}"
    raw = [None if v is None else v for v in frame[GROUP]]
    x = [float(v) for v in frame["x"]]
    x = [None if i % 13 == 2 and v != v else v for i, v in enumerate(x)]  # some NaN as NULL
    source = postgres_table(
        connection, namespace, name, {GROUP: ("text", raw), "x": ("double precision", x)}
    )
    if analyze:
        connection.execute(f'ANALYZE {namespace}."{name}"')
    return list(on_postgres_source(source, tallies, texts))


def test_grouping_by_raw_texts_first_answers_as_in_process(postgres):
    frame, tallies = case()
    reference = [t.of_frame(frame).tolist() for t in tallies]
    assert all(sum(map(sum, r)) > 0 for r in reference)
    found, used = on_postgres(postgres, frame, tallies, analyze=True)
    assert used == [True, True]
    assert found == reference


def test_without_statistics_the_rows_are_coded_one_by_one(postgres):
    frame, tallies = case()
    found, used = on_postgres(postgres, frame, tallies, analyze=False)
    assert used == [False, False]
    assert found == [t.of_frame(frame).tolist() for t in tallies]


def test_the_check_catches_texts_grouped_case_blind(postgres):
    """Broken twin: the rows grouped by lower(text), not the text compared bytewise ("F" and
    "f", "E" and "e" of the decomposed accent in one group, coded as the lowercase text):
    the comparison above sees it."""

    def blind(item: str) -> str:
        text, alias = item.rsplit(" AS ", 1)
        return f"lower({text}) AS {alias}"

    frame, tallies = case()
    found, used = on_postgres(postgres, frame, tallies, analyze=True, texts=blind)
    assert used == [True, True]
    assert found != [t.of_frame(frame).tolist() for t in tallies]


def many_texts(postgres, monkeypatch_query: str | None = None) -> tuple[list, list, float]:
    """20,000 distinct texts in the `by` column, analysed (pg_stats gives their number as a
    fraction of the rows, n_distinct -1): the tallies against the in-process engine's, whether
    each query grouped first, and the estimate `distinct_texts` read."""
    from mechanisms.counting import postgres_engine

    texts = [f"t{i}" for i in range(20_000)]
    frame = pd.DataFrame({GROUP: texts, "x": [float(i % 101) - 50 for i in range(20_000)]})
    _, tallies = case()
    connection, namespace = postgres
    name = f"many {uuid.uuid4().hex}"
    source = postgres_table(
        connection,
        namespace,
        name,
        {GROUP: ("text", texts), "x": ("double precision", frame["x"].tolist())},
    )
    connection.execute(f'ANALYZE {namespace}."{name}"')
    with pytest.MonkeyPatch.context() as patch:
        if monkeypatch_query is not None:
            patch.setattr(postgres_engine, "DISTINCT_TEXTS", monkeypatch_query)
        with postgres_engine.read_only(source) as reading:
            ((_column, estimate),) = postgres_engine.distinct_texts(reading, source, [GROUP])
        found, used = on_postgres_source(source, tallies)
    return [found, [t.of_frame(frame).tolist() for t in tallies]], used, estimate


def on_postgres_source(
    source, tallies, texts: Any = None, engine: str = "postgres"
) -> tuple[list, list]:
    """The tallies of a stored table, and whether each query grouped by the raw texts first;
    `texts` rewrites the grouped texts' items."""
    used = []
    original = aggregates.grouped_first

    def spied(*args: Any) -> Any:
        *given, query = args
        if texts is not None:
            given.append(lambda items: query([texts(item) for item in items]))
        else:
            given.append(query)
        built = original(*given)
        used.append(built is not None)
        return built

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(aggregates, "grouped_first", spied)
        found = [tally_table(source, t, engine).tolist() for t in tallies]
    return found, used


def test_texts_counted_as_a_fraction_of_the_rows_are_many(postgres):
    """ANALYZE gives a column of distinct texts as -1 (all rows): read as 20,000 texts, more
    than the grouped-first limit, so the rows are coded one by one, and equal as always."""
    (found, reference), used, estimate = many_texts(postgres)
    assert 15_000 <= estimate <= 25_000, estimate
    assert used == [False, False]
    assert found == reference


def test_the_check_catches_a_fraction_read_as_a_count(postgres):
    """Broken twin: n_distinct's sign dropped (-1 read as 1 text): the estimate is 1 and both
    queries group 20,000 texts first; the checks above see both."""
    from mechanisms.counting import postgres_engine

    broken = postgres_engine.DISTINCT_TEXTS.replace("s.n_distinct,", "abs(s.n_distinct),")
    assert broken != postgres_engine.DISTINCT_TEXTS
    (found, reference), used, estimate = many_texts(postgres, broken)
    assert estimate == 1 and used == [True, True]
    assert found == reference  # slower, never wrong


def parquet_of(folder: Path, frame: pd.DataFrame) -> TableSource:
    """The frame as a Parquet file: x with NULLs beside its NaNs, rows in groups of 7."""
    x = [float(v) for v in frame["x"]]
    x = [None if i % 13 == 2 and v != v else v for i, v in enumerate(x)]  # some NaN as NULL
    raw = pa.array([None if t is None else t for t in frame[GROUP]], type=pa.string())
    path = folder / "grouped.parquet"
    pq.write_table(pa.table({GROUP: raw, "x": float_array(x)}), path, row_group_size=7)
    return TableSource(str(path))


def on_duckdb(folder: Path, frame: pd.DataFrame, tallies: list[Any], texts: Any = None) -> list:
    """The tallies of the frame as a Parquet file (`parquet_of`) on DuckDB, and whether each
    query grouped by the raw texts first."""
    return list(on_postgres_source(parquet_of(folder, frame), tallies, texts, "duckdb"))


def test_duckdb_groups_few_raw_texts_first_as_in_process(tmp_path):
    frame, tallies = case()
    found, used = on_duckdb(tmp_path, frame, tallies)
    assert used == [True, True]
    assert found == [t.of_frame(frame).tolist() for t in tallies]


def test_the_check_catches_duckdb_texts_grouped_case_blind(tmp_path):
    """Broken twin: DuckDB's rows grouped by lower(text): the comparison above sees it."""

    def blind(item: str) -> str:
        text, alias = item.rsplit(" AS ", 1)
        return f"lower({text}) AS {alias}"

    frame, tallies = case()
    found, used = on_duckdb(tmp_path, frame, tallies, texts=blind)
    assert used == [True, True]
    assert found != [t.of_frame(frame).tolist() for t in tallies]


def many_on_duckdb(folder: Path) -> tuple[list, list, list]:
    """20,000 distinct texts in the `by` column on DuckDB: the tallies, the in-process
    engine's, and whether each query grouped first."""
    texts = [f"t{i}" for i in range(20_000)]
    frame = pd.DataFrame({GROUP: texts, "x": [float(i % 101) - 50 for i in range(20_000)]})
    _, tallies = case()
    found, used = on_duckdb(folder, frame, tallies)
    return found, [t.of_frame(frame).tolist() for t in tallies], used


def test_duckdb_codes_many_texts_row_by_row(tmp_path):
    """The first rows hold 20,000 distinct texts (DuckDB's count: about that many), more than
    the grouped-first limit: the rows are coded one by one, and equal as always."""
    from mechanisms.counting import duckdb_engine

    path = str(tmp_path / "grouped.parquet")
    found, reference, used = many_on_duckdb(tmp_path)
    with duckdb_engine.spilling_connection() as connection:
        ((_column, estimate),) = duckdb_engine.distinct_texts(
            connection, f"read_parquet(['{path}'])", [GROUP]
        )
    assert 15_000 <= estimate <= 25_000, estimate
    assert used == [False, False]
    assert found == reference


def test_the_check_catches_duckdb_counting_too_few_rows(tmp_path, monkeypatch):
    """Broken twin: the texts counted in the first row only (an estimate of 1): both queries
    group the 20,000 texts first; the check above sees it, and the answers stay equal."""
    from mechanisms.counting import duckdb_engine

    monkeypatch.setattr(duckdb_engine, "SAMPLE_ROWS", 1)
    found, reference, used = many_on_duckdb(tmp_path)
    assert used == [True, True]
    assert found == reference  # slower, never wrong


def cells_on_duckdb(folder: Path, frame: pd.DataFrame) -> tuple[list, list, list]:
    """The histogram cells of the text column beside x (both orders) on DuckDB, the in-process
    engine's, and whether each query grouped by the raw texts first (`keys_first_counts`)."""
    from mechanisms.counting import sql

    _, (grouped, _ranked) = case()
    cells = [CellTally(grouped.schema, (GROUP, "x")), CellTally(grouped.schema, ("x", GROUP))]
    used = []
    original = sql.raw_texts

    def spied(dialect: Any, names: Any) -> Any:
        used.append(bool(names))
        return original(dialect, names)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sql, "raw_texts", spied)
        source = parquet_of(folder, frame)
        found = [tally_table(source, t, "duckdb").tolist() for t in cells]
    return found, [t.of_frame(frame).tolist() for t in cells], used


def test_duckdb_histogram_cells_group_few_raw_texts_first_as_in_process(tmp_path):
    frame, _ = case()
    found, reference, used = cells_on_duckdb(tmp_path, frame)
    assert used == [True, True]
    assert found == reference


def test_the_check_catches_duckdb_cells_of_texts_grouped_case_blind(tmp_path, monkeypatch):
    """Broken twin: DuckDB reading every stored text as lower(text): the comparison above sees
    the merged texts."""
    from mechanisms.counting import duckdb_engine

    blind = dataclasses.replace(duckdb_engine.DUCKDB, bytewise=lambda text: f"lower({text})")
    monkeypatch.setattr(duckdb_engine, "DUCKDB", blind)
    frame, _ = case()
    found, reference, used = cells_on_duckdb(tmp_path, frame)
    assert used == [True, True]
    assert found != reference


def test_duckdb_histogram_cells_of_many_texts_are_coded_row_by_row(tmp_path):
    texts = [f"t{i}" for i in range(20_000)]
    frame = pd.DataFrame({GROUP: texts, "x": [float(i % 101) - 50 for i in range(20_000)]})
    found, reference, used = cells_on_duckdb(tmp_path, frame)
    assert used == [False, False]
    assert found == reference
