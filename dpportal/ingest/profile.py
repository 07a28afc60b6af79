"""What the data says about each column's type, accumulated block by block (owner-only).

The profile proposes a type per column (numeric, categorical or ignored) and counts the empty
cells. It never proposes a bound, a bin or a category: those come from public knowledge or a
budgeted DP estimate (`dpportal.services.dp_estimates`), never silently from the data.
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
    numbers: int = 0  # finite numbers seen
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
        if self.kind == "float":  # inf (also 1e309) and NaN are not numbers a bound could hold
            column = pc.filter(column, pc.is_finite(column))
        self.numbers += len(column) - column.null_count

    def proposal(self) -> dict:
        """A proposed schema entry: a type only (no bound, bin or category from the data).

        Numbers are proposed as numeric; text with a few repeated values as categorical; text
        whose values are all different (identifiers, free text) or too many as ignored.
        """
        base: dict[str, Any] = {"name": self.name, "missing": self.missing}
        if self.kind != "text" and self.numbers:
            if self.kind == "int":  # whole numbers are a type, not a statistic: confirmed by hand;
                # no bins: the schema's default is one bin per value up to 31 values, else 10
                return base | {"type": "numeric", "integer": True}
            return base | {"type": "numeric", "bins": DEFAULT_BINS}
        categories = self.categories
        usable = (
            bool(categories)
            and categories is not None
            and all(len(c) <= MAX_CATEGORY_CHARS for c in categories)
            and (len(categories) == 1 or len(categories) < self.present)
        )
        if usable:
            return base | {"type": "categorical", "unknown": "other"}
        return base | {"type": "ignored"}
