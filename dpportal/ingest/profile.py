"""What the data says about each column, accumulated block by block (owner-only).

The profile is computed from the raw data: it is shown to the owner only, marked "from your
data", and never becomes part of a release.
"""

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

MAX_PROPOSED_CATEGORIES = 50
MAX_CATEGORY_CHARS = 100
DEFAULT_BINS = 10


@dataclass
class ColumnProfile:
    """What the data says about one column (owner-only; feeds the schema proposal)."""

    name: str
    kind: str  # "int", "float" or "text"
    rows: int = 0
    missing: int = 0
    minimum: float | None = None
    maximum: float | None = None
    categories: set | None = field(default_factory=set)  # None once there are too many

    @property
    def present(self) -> int:
        return self.rows - self.missing

    def update(self, column: pa.ChunkedArray | pa.Array) -> None:
        self.rows += len(column)
        if self.kind == "text":
            self.missing += pc.sum(pc.equal(column, "")).as_py() or 0
            if self.categories is not None:
                self.categories.update(v for v in pc.unique(column).to_pylist() if v != "")
                if len(self.categories) > MAX_PROPOSED_CATEGORIES:
                    self.categories = None
            return
        self.missing += column.null_count
        if self.kind == "float":  # inf (also 1e309) and NaN never reach the profile or its JSON
            column = pc.filter(column, pc.is_finite(column))
        extremes = pc.min_max(column)
        low, high = extremes["min"].as_py(), extremes["max"].as_py()
        if low is not None:
            self.minimum = low if self.minimum is None else min(self.minimum, low)
            self.maximum = high if self.maximum is None else max(self.maximum, high)

    def proposal(self) -> dict:
        """A proposed schema entry; `from_data` lists the values that came from the data.

        Text with a few repeated values is proposed as categorical; text whose values are all
        different (identifiers, free text) or too many is proposed as ignored.
        """
        base: dict[str, Any] = {"name": self.name, "missing": self.missing}
        low, high = self.minimum, self.maximum
        if self.kind != "text" and low is not None and high is not None:
            upper = high if high > low else low + 1
            proposal = base | {
                "type": "numeric",
                "lower": _plain(low),
                "upper": _plain(upper),
                "bins": DEFAULT_BINS,
                "from_data": ["lower", "upper"],
            }
            if self.kind == "int":  # a type, not a statistic: the custodian confirms it
                proposal["integer"] = True
            if self.kind == "int" and upper - low < DEFAULT_BINS:
                proposal["bins"] = int(upper - low) + 1  # one bin per whole number
                proposal["from_data"].append("bins")
            return proposal
        categories = self.categories
        usable = (
            bool(categories)
            and categories is not None
            and all(len(c) <= MAX_CATEGORY_CHARS for c in categories)
            and (len(categories) == 1 or len(categories) < self.present)
        )
        if usable and categories is not None:
            return base | {
                "type": "categorical",
                "categories": sorted(categories),
                "unknown": "other",
                "from_data": ["categories"],
            }
        return base | {"type": "ignored", "from_data": []}


def _plain(value):
    """An integral float as an int, so proposals read 17 rather than 17.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
