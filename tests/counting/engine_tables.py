"""Tables for the counting-engine tests, and writing them as Parquet and into PostgreSQL.

Each case is (frame, schema document): the reference counts are `Schema.cell_counts(frame)`,
and every engine must return them from the same rows stored as Parquet or as a PostgreSQL
table (column types follow the pandas dtypes: float -> double precision, whole numbers ->
bigint, text -> text, booleans -> boolean, dates -> date, timestamps -> timestamp [with time
zone]).
"""

from __future__ import annotations

import datetime
import io
import math
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.real_tables import TABLES

POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
HOSTILE = 'a"; DROP TABLE x; --'


@pytest.fixture(scope="module", name="postgres")
def postgres_schema():
    """(autocommit connection, a fresh schema) in the test database; the schema is dropped after.

    Skipped only when PostgreSQL cannot be reached.
    """
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    try:
        connection = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_URL}: {error}")
    name = f"engines_{uuid.uuid4().hex[:10]}"
    connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield connection, name
    finally:
        connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
        connection.close()


def public_case(name: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A package-bundled public table (tests/real_tables.py) with its dates as timestamps."""
    csv, schema = TABLES[name]()
    frame = pd.read_csv(io.BytesIO(csv), keep_default_na=False, na_values=[""])
    for column in schema["columns"]:
        if column["type"] == "date":
            frame[column["name"]] = pd.to_datetime(frame[column["name"]])
    return frame, schema


def edge_values(lower: float, upper: float, bins: int) -> list[float]:
    """Every equal-width edge, a float step either side, tenths, and values beyond the bounds."""
    edges = np.linspace(lower, upper, bins + 1)
    values = [
        float(v) for e in edges for v in (e, np.nextafter(e, -np.inf), np.nextafter(e, np.inf))
    ]
    values += [lower + k * (upper - lower) / (10 * bins) for k in range(10 * bins + 1)]
    return values + [lower - 1e300, upper + 1e300, -math.inf, math.inf, 1e308, -1e308]


def hostile_case(rows: int = 600) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Clamping, values at bin edges, missing values, unlisted categories, odd names."""
    rng = np.random.default_rng(7)
    values = edge_values(-7.3, 12.9, 7) + edge_values(0, 1, 10)
    numbers = np.resize(np.array(values + [math.nan]), rows)
    rng.shuffle(numbers)
    explicit = np.resize(
        np.array([0.0, 0.5, 0.49999999999999994, 2.5, 3.0, 9.99, 10, 11, -1, math.nan]), rows
    )
    whole = pd.array(rng.integers(-5, 40, rows), dtype="Int64")
    whole[::17] = pd.NA
    texts = [
        "F",
        "M",
        "it's",
        'quote"d',
        "é",
        "e\u0301",
        " F",
        "F ",
        "",
        "  ",
        "\t\n",
        "\u3000",
        "zz",
        None,
    ]
    stamps = pd.Timestamp("1969-12-30 22:00") + pd.to_timedelta(
        rng.integers(0, 10**6, rows), unit="min"
    )
    frame = pd.DataFrame(
        {
            "equal width": numbers,
            HOSTILE: rng.choice(np.array(texts, dtype=object), rows),
            "explicit": explicit,
            "whole": whole,
            "tiny range": rng.integers(0, 3, rows),
            "flag": rng.choice(np.array([True, False, None], dtype=object), rows),
            "naïve ✓": stamps,
            "aware": stamps.tz_localize("Europe/Paris", ambiguous="NaT", nonexistent="NaT"),
            "day": [d.date() if not pd.isna(d) else None for d in stamps[::-1]],
            "code": rng.integers(0, 12, rows),
        }
    )
    frame.loc[::23, "naïve ✓"] = pd.NaT
    schema = {
        "columns": [
            {"name": "equal width", "type": "numeric", "lower": -7.3, "upper": 12.9, "bins": 7},
            {
                "name": HOSTILE,
                "type": "categorical",
                "categories": ["F", "M", "it's", 'quote"d', "é", " F"],
            },
            {
                "name": "explicit",
                "type": "numeric",
                "lower": 0,
                "upper": 10,
                "bins": [0, 0.5, 2.5, 3, 10],
            },
            {
                "name": "whole",
                "type": "numeric",
                "lower": 0,
                "upper": 30,
                "integer": True,
                "bins": 7,
            },
            {
                "name": "tiny range",
                "type": "numeric",
                "lower": 0,
                "upper": 2,
                "integer": True,
                "missing": "reject",
            },
            {"name": "flag", "type": "categorical", "categories": ["True"], "unknown": "other"},
            {"name": "naïve ✓", "type": "date", "part": "hour", "bins": 5},
            {"name": "aware", "type": "date", "part": "weekday"},
            {
                "name": "day",
                "type": "date",
                "part": "date",
                "lower": "1969-12-01",
                "upper": "1972-01-31",
                "bins": ["1969-12-01", "1970-01-01", "1970-06-15", "1972-01-31"],
            },
            {"name": "code", "type": "categorical", "categories": [1, 2, 3, 5, 8]},
        ]
    }
    return frame, schema


def date_parts_case() -> tuple[pd.DataFrame, dict[str, Any]]:
    """One timestamp column read as each part, and years stored as whole numbers."""
    rng = np.random.default_rng(3)
    stamps = pd.Timestamp("1899-06-01") + pd.to_timedelta(
        rng.integers(0, 150 * 365 * 24, 800), unit="h"
    )
    frame = pd.DataFrame({p: stamps for p in ("year", "month", "weekday", "hour", "date")})
    frame["year as number"] = pd.array(stamps.year, dtype="Int64")
    frame.loc[::9, "year as number"] = pd.NA
    schema = {
        "columns": [
            {
                "name": "year",
                "type": "date",
                "part": "year",
                "lower": 1900,
                "upper": 2030,
                "bins": 13,
            },
            {"name": "month", "type": "date", "part": "month"},
            {"name": "weekday", "type": "date", "part": "weekday"},
            {"name": "hour", "type": "date", "part": "hour", "bins": 4},
            {
                "name": "date",
                "type": "date",
                "part": "date",
                "lower": "1900-01-01",
                "upper": "2030-12-31",
                "bins": 9,
            },
            {
                "name": "year as number",
                "type": "date",
                "part": "year",
                "lower": 1950,
                "upper": 2000,
            },
        ]
    }
    return frame, schema


def write_parquet(frame: pd.DataFrame, path: Path, files: int = 1) -> Path:
    """The frame as one Parquet file, or as `files` files in the folder `path`, one schema."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if files == 1:
        pq.write_table(table, path)
        return path
    path.mkdir()
    step = max(1, math.ceil(len(frame) / files))
    for i in range(files):
        pq.write_table(table.slice(i * step, step), path / f"part-{i}.parquet")
    return path


def postgres_type(series: pd.Series) -> str:
    if series.dtype.kind == "f":
        return "double precision"
    if series.dtype.kind in "iu":
        return "bigint"
    if series.dtype.kind == "M":
        return "timestamp with time zone" if getattr(series.dt, "tz", None) else "timestamp"
    present = series.dropna()
    if len(present) and all(isinstance(v, bool | np.bool_) for v in present):
        return "boolean"
    if len(present) and all(isinstance(v, datetime.date) for v in present):
        return "date"
    return "text"


def _value(value: Any, is_float: bool) -> Any:
    """A cell for COPY: NaN stays NaN in a float column, else it is a missing value (NULL)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float) and math.isnan(value) and not is_float:
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_postgres(
    connection: Any, schema: str, table: str, frame: pd.DataFrame, like: pd.DataFrame | None = None
) -> None:
    """Create `schema`.`table` with the frame's columns and copy its rows in.

    The column types follow `like` (default: the frame itself; an empty frame has no values
    to tell dates or booleans from text).
    """
    from psycopg import sql

    name = sql.Identifier(schema, table)
    types = {c: postgres_type((frame if like is None else like)[c]) for c in frame.columns}
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(types[c])) for c in frame.columns
    )
    connection.execute(sql.SQL("CREATE TABLE {} ({})").format(name, columns))
    names = sql.SQL(", ").join(sql.Identifier(c) for c in frame.columns)
    with connection.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(name, names)) as copy:
        floats = [types[c] == "double precision" for c in frame.columns]
        for row in zip(*(frame[c].tolist() for c in frame.columns), strict=True):
            copy.write_row([_value(v, f) for v, f in zip(row, floats, strict=True)])


def random_bins_case(columns: int = 40, seed: int = 11) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Equal-width columns with random bounds and bin counts, valued on and around every edge.

    Each column is counted alone: the case tests the arithmetic of many (lower, upper, bins),
    where a rounding difference between numpy and SQL would show.
    """
    rng = np.random.default_rng(seed)
    data, specs = {}, []
    for j in range(columns):
        lower = float(rng.uniform(-1e3, 1e3)) * float(10.0 ** rng.integers(-6, 4))
        upper = lower + float(rng.lognormal(0, 3))
        bins = int(rng.integers(1, 60))
        values = edge_values(lower, upper, bins)
        values += list(rng.uniform(lower, upper, 2000 - len(values)))
        data[f"c{j}"] = np.resize(np.array(values), 2000)
        specs.append(
            {"name": f"c{j}", "type": "numeric", "lower": lower, "upper": upper, "bins": bins}
        )
    return pd.DataFrame(data), {"columns": specs}
