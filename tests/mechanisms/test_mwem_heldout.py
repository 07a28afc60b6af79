"""The held-out benchmark protocol (benchmarks/heldout.py) stays frozen (issue 44, item 2)."""

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "heldout.py"


def _heldout():
    spec = importlib.util.spec_from_file_location("heldout", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["heldout"] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_the_stored_split_is_the_recorded_seeds_and_covers_every_table_once():
    heldout = _heldout()
    assert len(heldout.TABLES) >= 24
    assert heldout.SPLIT == heldout.split_from_seed(heldout.SPLIT_SEED)
    tune, held = set(heldout.SPLIT["tune"]), set(heldout.SPLIT["held-out"])
    assert not tune & held
    assert tune | held == set(heldout.TABLES)


def test_every_schema_declares_its_bounds_and_categories():
    """No column leaves a bound or its categories to the data (the loader is not called)."""
    heldout = _heldout()
    for name, table in heldout.TABLES.items():
        for column in table.columns:
            if column.get("type") == "numeric":
                assert {"lower", "upper"} <= column.keys(), (name, column)
            if column.get("type") == "categorical":
                assert column["categories"], (name, column)
