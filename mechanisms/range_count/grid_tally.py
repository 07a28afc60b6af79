"""The range-count grid as a tally every engine computes alike (`mechanisms.counting.tally`).

Privacy: the tally is exact counts per public grid cell; no row leaves the engine and no noise
is added here (the range-count mechanism adds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.counting.sql import MAX_EDGES, Dialect, clamp_sql, edge_search, number_sql
from mechanisms.errors import MechanismError
from mechanisms.range_count.inputs import Support
from mechanisms.schema import NumericColumn, Schema


@dataclass(frozen=True)
class GridTally:
    """Rows per point of a range-count support, as `Support.counts` counts them.

    Each value is read as `NumericColumn.numbers` reads it; a row with a missing value in any
    column is left out; the others are clamped to the support's bounds and placed by the grid's
    edges (`Support.grid_cells`). SQL engines need a grid (a point support is placed by nearest
    point, which only the Python engines repeat) of at most MAX_EDGES + 1 cells per column.
    """

    support: Support
    specs: tuple[NumericColumn, ...]

    @property
    def columns(self) -> list[str]:
        return list(self.support.columns)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.support.n,)

    def of_frame(self, frame: pd.DataFrame) -> AnyArray:
        values = np.column_stack([s.numbers(frame[s.name]) for s in self.specs])
        return self.support.counts(values.reshape(-1, len(self.specs)))

    def query(self, dialect: Dialect, kinds: dict[str, str], table: str) -> str:
        grid = self.support.grid_shape
        if grid is None:
            raise MechanismError(
                "range counts over a list of support points are placed by nearest point, which "
                "SQL engines do not repeat: use a grid, or the inprocess or dask engine"
            )
        if max(grid) > MAX_EDGES + 1:
            raise MechanismError(
                f"a range-count grid of {'x'.join(map(str, grid))} cells has more than "
                f"{MAX_EDGES + 1:,} cells along one column, more than the {dialect.name} engine "
                f"compares: choose a coarser grid (at most {MAX_EDGES + 1:,} cells per column), or "
                "the inprocess or dask engine"
            )
        flat, missing = "", []
        for axis, spec in enumerate(self.specs):
            value, absent = number_sql(dialect, spec, kinds[spec.name])
            missing.append(absent)
            lower, upper = float(self.support.lower[axis]), float(self.support.upper[axis])
            clamped = clamp_sql(dialect, value, lower, upper)
            inner = self.support.axis_edges(axis)[1:-1].tolist()
            cell = edge_search(dialect, clamped, inner, spec.name)
            flat = f"({cell})" if axis == 0 else f"({flat}) * {grid[axis]} + ({cell})"
        present = " AND ".join(f"NOT {m}" for m in missing)
        return (
            f"SELECT CAST({flat} AS BIGINT) AS cell, count(*) AS n FROM {table} "  # noqa: S608  # nosec B608: quoted
            f"WHERE {present} GROUP BY 1"
        )

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        pairs = np.array(rows, dtype=np.int64).reshape(-1, 2)
        counts = np.zeros(self.support.n, dtype=np.int64)
        if pairs.size and (pairs[:, 0].min() < 0 or pairs[:, 0].max() >= counts.size):
            raise MechanismError("the engine returned a cell outside the range-count grid")
        np.add.at(counts, pairs[:, 0], pairs[:, 1])
        return counts

    def settled(self, answer: AnyArray) -> AnyArray:
        return answer


def grid_tally(support: Support, schema: Schema) -> GridTally:
    """The tally of `support`'s columns of `schema` (numeric columns, as range counts need)."""
    specs = [schema.column(c) for c in support.columns]
    bad = [s.name for s in specs if not isinstance(s, NumericColumn)]
    if bad:
        raise MechanismError(f"range counting needs numeric columns; {bad[0]!r} is not numeric")
    return GridTally(support, tuple(s for s in specs if isinstance(s, NumericColumn)))
