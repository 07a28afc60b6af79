"""What an engine computes where the data lives: a tally, an exact aggregate of the rows.

A `Tally` is one aggregate every engine computes the same way: the columns it reads, the shape
of its int64 answer, the answer for a chunk of rows (`of_frame`: the in-process reference, which
the in-process and Dask engines run on record batches and add up) and the same answer as one SQL
`SELECT key, value ... GROUP BY key` (`query`, built by `mechanisms.counting.sql`, whose binning
arithmetic repeats numpy's) turned into the array by `from_rows`. An engine therefore needs only
two ways to run a tally (Python over record batches, or SQL), and a new SQL engine (Spark) is one
more `fetch` function over `sql_tally`.

Tallies:
- `CellTally`: rows per cell of the schema's columns (`Schema.cell_counts`): histograms, MWEM.
- `GridTally`: rows per cell of a range-count grid over the public bounds (`Support.counts`),
  rows with a missing value left out: range counts.

Privacy: a tally is exact and holds only aggregates (counts per public cell); no row leaves the
engine, and no noise is added here: the mechanism that reads the tally adds it, so the
guarantee is the mechanism's whichever engine computed the tally.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.counting.sql import (
    MAX_EDGES,
    Dialect,
    clamp_sql,
    column_sql,
    count_query,
    dense_counts,
    edge_search,
    number_sql,
)
from mechanisms.errors import MechanismError
from mechanisms.range_count.inputs import Support
from mechanisms.schema import NumericColumn, Schema

Fetch = Callable[[str], list[tuple[Any, ...]]]


class Tally(Protocol):
    """An exact aggregate of a table, the same from every engine (see the module docstring)."""

    @property
    def columns(self) -> list[str]:
        """The columns the tally reads."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of its int64 answer."""

    def of_frame(self, frame: pd.DataFrame) -> AnyArray:
        """The answer for these rows alone (answers of consecutive chunks add up)."""

    def query(self, dialect: Dialect, kinds: dict[str, str], table: str) -> str:
        """One SQL query whose rows `from_rows` reads; `kinds`: how each column is stored."""

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        """The answer from the query's rows."""


def sql_tally(
    tally: Tally, dialect: Dialect, kinds: dict[str, str], table: str, fetch: Fetch
) -> AnyArray:
    """Run `tally` as one query sent through `fetch`: only its aggregate rows come back."""
    return tally.from_rows(fetch(tally.query(dialect, kinds, table)))


def frames_tally(tally: Tally, frames: Any) -> AnyArray:
    """Run `tally` over DataFrames of consecutive rows, one at a time (memory: one chunk)."""
    total = np.zeros(tally.shape, dtype=np.int64)
    for frame in frames:
        total += tally.of_frame(frame)
    return total


@dataclass(frozen=True)
class CellTally:
    """Rows per cell of `columns` of `schema` (an accepting schema: `Schema.accepting`)."""

    schema: Schema
    names: tuple[str, ...]

    @property
    def columns(self) -> list[str]:
        return list(self.names)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.schema.domain_shape(self.columns))

    def of_frame(self, frame: pd.DataFrame) -> AnyArray:
        return self.schema.cell_counts(frame, self.columns)

    def query(self, dialect: Dialect, kinds: dict[str, str], table: str) -> str:
        codes = [column_sql(dialect, self.schema.column(c), kinds[c]) for c in self.columns]
        return count_query(self.schema, codes, table)

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        pairs = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return dense_counts(self.schema, self.columns, pairs[:, 0], pairs[:, 1])


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
                f"{MAX_EDGES + 1} cells along one column, more than SQL engines compare: use a "
                "coarser grid, or the inprocess or dask engine"
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


def grid_tally(support: Support, schema: Schema) -> GridTally:
    """The tally of `support`'s columns of `schema` (numeric columns, as range counts need)."""
    specs = [schema.column(c) for c in support.columns]
    bad = [s.name for s in specs if not isinstance(s, NumericColumn)]
    if bad:
        raise MechanismError(f"range counting needs numeric columns; {bad[0]!r} is not numeric")
    return GridTally(support, tuple(s for s in specs if isinstance(s, NumericColumn)))


def checked(tally: Tally, answer: AnyArray, engine: str) -> AnyArray:
    """The engine's answer as int64, refused if its shape is not the tally's."""
    if tuple(answer.shape) != tuple(tally.shape):  # a broken engine must never reach a mechanism
        raise MechanismError(f"engine {engine!r} returned an answer of shape {answer.shape}")
    return np.asarray(answer, dtype=np.int64)


__all__ = [
    "CellTally",
    "Fetch",
    "GridTally",
    "Tally",
    "checked",
    "frames_tally",
    "grid_tally",
    "sql_tally",
]
