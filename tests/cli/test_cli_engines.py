"""Command line with --engine: a perturbed histogram from a Parquet folder (DuckDB) and from a
PostgreSQL table (counted inside the database) and from the Parquet folder on Spark (when
./test.sh's Spark cluster is named) equals the one from the same rows as CSV.

Data: vega_datasets' local seattle-weather table (NOAA daily weather, tests/real_tables.py),
as CSV, as a Parquet folder of three files, and as a table in a schema of its own in the
PostgreSQL database `test` (dropped afterwards; skipped only when PostgreSQL is unreachable).
"""

from __future__ import annotations

import json
import os
import socket

import pandas as pd
import pytest

from mechanisms.__main__ import main
from mechanisms.counting.spark_engine import REMOTE_VARIABLE
from tests.counting.engine_tables import (
    POSTGRES_URL,
    postgres_schema,  # noqa: F401 (the fixture `postgres`)
    public_case,
    write_parquet,
    write_postgres,
)
from tests.real_tables import seattle_weather

COLUMNS = "date,weather,wind"
SPARK = ("spark",) if os.environ.get(REMOTE_VARIABLE) else ()


@pytest.fixture(scope="module")
def weather(tmp_path_factory, postgres):
    """(folder, CSV file, Parquet folder, PostgreSQL URL naming the table)."""
    connection, namespace = postgres
    folder = tmp_path_factory.mktemp("engines")
    csv, schema = seattle_weather()
    (folder / "weather.csv").write_bytes(csv)
    (folder / "schema.json").write_text(json.dumps(schema))
    frame, _ = public_case("seattle_weather")
    write_parquet(frame, folder / "parquet", files=3)
    write_postgres(connection, namespace, "weather", frame)
    url = f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}table={namespace}.weather"
    return folder, folder / "weather.csv", folder / "parquet", url


def _release(folder, name: str, source, *options: str) -> int:
    return main(
        [
            "perturbed-histogram",
            "--input",
            str(source),
            "--schema",
            str(folder / "schema.json"),
            "--columns",
            COLUMNS,
            "--epsilon",
            "1",
            "--seed",
            "11",
            "--out",
            str(folder / name),
            *options,
        ]
    )


def test_engines_release_what_the_csv_path_releases(weather):
    folder, csv, parquet, url = weather
    assert _release(folder, "csv", csv) == 0
    assert _release(folder, "duckdb", parquet, "--engine", "duckdb") == 0
    assert _release(folder, "postgres", url, "--engine", "postgres") == 0
    assert _release(folder, "inprocess", url) == 0  # default engine: a server-side cursor
    for engine in SPARK:  # the Parquet folder on the Spark cluster ./test.sh starts
        assert _release(folder, engine, parquet, "--engine", engine) == 0
    expected = pd.read_csv(folder / "csv" / "noisy_counts.csv", keep_default_na=False)
    assert len(expected) == 13 * 7 * 6  # months, 5 kinds and other, 5 bins; each + missing
    for engine in ("duckdb", "postgres", "inprocess", *SPARK):
        counts = pd.read_csv(folder / engine / "noisy_counts.csv", keep_default_na=False)
        assert counts.shape == expected.shape and counts.equals(expected), engine
        manifest = json.loads((folder / engine / "manifest.json").read_text())
        assert manifest["parameters"]["counting_engine"] == engine
        record = json.loads((folder / f"{engine}.custodian.json").read_text())
        assert record["counting_engine"] == engine and "postgres@" not in json.dumps(record)
    assert "counting_engine" not in json.loads((folder / "csv" / "manifest.json").read_text())


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"input": "URL-NO-TABLE"}, "names one table"),
        ({"input": "postgresql://me@host:port/db?table=t"}, "cannot be read"),
        ({"table": "absent"}, "does not exist"),
        ({"columns": "date,rain"}, "not in the schema"),
        ({"engine": "duckdb", "input": "CSV"}, "read as CSV"),
        ({"engine": "duckdb", "input": "URL"}, "local Parquet"),
        ({"engine": "duckdb", "input": "spark-table:db.visits"}, "counted by Spark only"),
        ({"engine": "spark", "input": "spark-table:"}, "names its table"),
        # range counts run on engines now (issue 45); a grid finer than SQL compares does not
        ({"mechanism": "range-count", "input": "PARQUET", "grid": "5000"}, "coarser grid"),
    ],
)
def test_bad_sources_exit_2_with_words(weather, change, words, capsys):
    folder, csv, parquet, url = weather
    inputs = {
        "URL": url,
        "CSV": str(csv),
        "PARQUET": str(parquet),
        "URL-NO-TABLE": url.split("?")[0],
    }
    source = inputs.get(change.get("input", "URL"), change.get("input"))
    if "table" in change:
        source = url.rsplit(".", 1)[0] + "." + change["table"]
    argv = [
        change.get("mechanism", "perturbed-histogram"),
        "--input",
        source,
        "--schema",
        str(folder / "schema.json"),
        "--columns",
        change.get("columns", COLUMNS),
        "--epsilon",
        "1",
        "--out",
        str(folder / "bad"),
        "--engine",
        change.get("engine", "postgres"),
    ]
    if argv[0] == "range-count":
        argv[6], argv[-1] = "wind", "duckdb"
        argv += ["--grid", change["grid"], "--random-boxes", "3"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert words in error and len(error.splitlines()) == 1 and "Traceback" not in error


def test_a_spark_server_that_does_not_answer_exits_2_in_one_line(weather, monkeypatch, capsys):
    pytest.importorskip("pyspark")
    folder, _csv, parquet, _url = weather
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    monkeypatch.setenv(REMOTE_VARIABLE, f"sc://127.0.0.1:{port}")
    assert _release(folder, "down", parquet, "--engine", "spark") == 2
    closed.close()
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"cannot reach the Spark Connect server at 127.0.0.1:{port}" in error
    assert not (folder / "down").exists()
