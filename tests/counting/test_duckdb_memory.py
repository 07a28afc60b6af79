"""The DuckDB engine holds its memory to DPPORTAL_DUCKDB_MEMORY_LIMIT and spills to a private
folder that is deleted after each query (issue 45 item 4).

DuckDB runs inside the worker, so the limit bounds the worker's memory; the spilled pages hold
raw rows, so the folder is the worker user's alone (0700) and never outlives the count, whether
it succeeded or failed. The settings are read inside the engine's own connection; the folder is
watched by pointing Python's temporary folder at an empty folder of the test's.
"""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from mechanisms.counting import TableSource, tally_table
from mechanisms.counting.bounding import BoundedTally
from mechanisms.counting.duckdb_engine import (
    DEFAULT_MEMORY_LIMIT,
    MEMORY_VARIABLE,
    spilling_connection,
)
from mechanisms.counting.tally import CellTally
from mechanisms.errors import MechanismError
from mechanisms.schema import Schema
from tests.counting.engine_tables import write_parquet


@pytest.fixture
def spill_root(monkeypatch, tmp_path) -> Path:
    """An empty folder in which the engine's spill folders are made (Python's temporary one)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def as_duckdb_reads(limit: str) -> str:
    """How DuckDB prints a memory limit once set (e.g. 512MB reads 488.2 MiB)."""
    with duckdb.connect(":memory:") as plain:
        plain.execute(f"SET memory_limit = '{limit}'")
        (shown,) = plain.execute("SELECT current_setting('memory_limit')").fetchone() or ("",)
    return str(shown)


@pytest.mark.parametrize("value", [None, "300MB", " 2GB "])
def test_the_engine_connection_gets_the_limit_and_a_private_spill_folder(
    value, spill_root, monkeypatch
):
    if value is None:
        monkeypatch.delenv(MEMORY_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(MEMORY_VARIABLE, value)
    with spilling_connection() as connection:
        limit, folder, ordered = connection.execute(
            "SELECT current_setting('memory_limit'), current_setting('temp_directory'), "
            "current_setting('preserve_insertion_order')"
        ).fetchone() or (None, None, None)
        spill = Path(str(folder))
        assert spill.parent == spill_root
        assert stat.S_IMODE(spill.stat().st_mode) == 0o700  # the worker user's alone
        assert ordered is False
    assert limit == as_duckdb_reads((value or DEFAULT_MEMORY_LIMIT).strip())
    assert limit != as_duckdb_reads("1GB")  # the comparison tells limits apart
    assert not spill.exists()


def person_table(tmp_path: Path) -> tuple[TableSource, BoundedTally]:
    """A Parquet folder of 20,000 rows of 3,000 people, and a person-level tally of it."""
    rng = np.random.default_rng(7)
    frame = pd.DataFrame({"x": rng.normal(5, 3, 20_000), "pid": rng.integers(0, 3_000, 20_000)})
    document = {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 10, "bins": 5}]}
    schema = Schema.from_dict(document).accepting()
    source = TableSource(str(write_parquet(frame, tmp_path / "people", 3)))
    return source, BoundedTally(CellTally(schema, ("x",)), "pid", 2, "5eed" * 8)


def test_a_count_leaves_no_spill_folder_and_equals_the_reference(spill_root, tmp_path):
    source, tally = person_table(tmp_path)
    got = tally_table(source, tally, "duckdb")
    assert np.array_equal(got, tally_table(source, tally, "inprocess"))
    assert got.sum() > 0
    assert list(spill_root.iterdir()) == []


def test_a_limit_duckdb_cannot_read_is_refused_in_words(spill_root, tmp_path, monkeypatch):
    source, tally = person_table(tmp_path)
    monkeypatch.setenv(MEMORY_VARIABLE, "lots")
    with pytest.raises(MechanismError, match=f"{MEMORY_VARIABLE}='lots'.*e.g. 512MB"):
        tally_table(source, tally, "duckdb")
    assert list(spill_root.iterdir()) == []


def test_running_out_of_the_limit_is_a_clear_error_and_leaves_no_folder(
    spill_root, tmp_path, monkeypatch
):
    source, tally = person_table(tmp_path)
    monkeypatch.setenv(MEMORY_VARIABLE, "1MB")
    with pytest.raises(MechanismError, match=f"more memory than {MEMORY_VARIABLE} allows"):
        tally_table(source, tally, "duckdb")
    assert list(spill_root.iterdir()) == []
