"""The schema page's one-click public category lists (countries, US states, sexes, yes/no,
weekdays, months): `dpportal/datasets/data/public_lists.json`, written by
scripts/make_public_lists.py."""

import json
from functools import lru_cache
from pathlib import Path

LISTS_FILE = Path(__file__).resolve().parent / "data" / "public_lists.json"


@lru_cache(maxsize=1)
def public_lists() -> tuple[dict, ...]:
    """Each list as {"id", "label", "values"}, in the order the page offers them."""
    return tuple(json.loads(LISTS_FILE.read_text(encoding="utf-8"))["lists"])
