"""The range-count grid as a tally every engine computes alike (`mechanisms.counting.tally`).

Privacy: the tally is exact counts per public grid cell; no row leaves the engine and no noise
is added here (the range-count mechanism adds it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.counting.sql import (
    MAX_EDGES,
    Dialect,
    clamp_sql,
    edge_search,
    key_cell,
    missing_sql,
    number,
    number_sql,
    outside_groups_query,
    shifted,
)
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
        if dialect.ieee:
            return self._keys_query(dialect, kinds, table)
        flat, missing = "", []
        for axis, spec in enumerate(self.specs):
            value, absent = number_sql(dialect, spec, kinds[spec.name])
            missing.append(absent)
            lower, upper = float(self.support.lower[axis]), float(self.support.upper[axis])
            clamped = clamp_sql(dialect, value, lower, upper)
            cell = edge_search(
                dialect, clamped, self.support.axis_edges(axis)[1:-1].tolist(), spec.name
            )
            flat = f"({cell})" if axis == 0 else f"({flat}) * {grid[axis]} + ({cell})"
        present = " AND ".join(f"NOT {m}" for m in missing)
        return (
            f"SELECT CAST({flat} AS BIGINT) AS cell, count(*) AS n FROM {table} "  # noqa: S608  # nosec B608: quoted
            f"WHERE {present} GROUP BY 1"
        )

    def _keys_query(self, dialect: Dialect, kinds: dict[str, str], table: str) -> str:
        """The grid's SQL where doubles never raise (`Dialect.ieee`, DuckDB): keys per axis.

        The rows are grouped by one key per axis, and each group's cell made from its keys.

        An even axis's key is `EvenAxis.sql` of the unclamped value: no least() or greatest()
        per row (DuckDB: about 0.05 s of CPU each per 10^7 rows) and no missing test, since
        a missing value's key is NULL or NaN, which make the group's cell NULL (`from_rows`
        leaves that group out). A searched axis's key is its cell, its missing values left
        out by the WHERE as in `query`. The outer query clamps each key to the axis's cells:
        the cell of the value clamped to the bounds. Values far outside the bounds make more
        groups: slower, the same counts (the benchmark's grid with every value times 1,000,
        1.46 million key pairs: 0.59 against 0.30 s of CPU per 10^7 rows; every row its own
        pair: 1.4 against 0.25-0.30 s). Where `Dialect.unclamped_keys` is off, an even axis's
        key is that of the clamped value instead, its missing values left out by the WHERE:
        at most the axis's cells and one more as groups.
        """
        grid = self.support.grid_shape
        assert grid is not None
        keys, filters, unknown, flat = [], [], [], ""
        for axis, spec in enumerate(self.specs):
            value, absent = number_sql(dialect, spec, kinds[spec.name])
            lower, upper = float(self.support.lower[axis]), float(self.support.upper[axis])
            edges = self.support.axis_edges(axis)
            even = EvenAxis.of(lower, upper, grid[axis], edges)
            if even is not None and dialect.unclamped_keys:
                keys.append(even.sql(dialect, value))
                unknown.append(missing_sql(dialect, f"k{axis}", "float"))
            else:
                clamped = clamp_sql(dialect, value, lower, upper)
                searched = edge_search(dialect, clamped, edges[1:-1].tolist(), spec.name)
                keys.append(searched if even is None else even.sql(dialect, clamped))
                filters.append(f"NOT {absent}")
            cell = key_cell(f"k{axis}", grid[axis])
            flat = cell if axis == 0 else f"({flat}) * {grid[axis]} + {cell}"
        named = ", ".join(f"{key} AS k{axis}" for axis, key in enumerate(keys))
        by = ", ".join(f"k{axis}" for axis in range(len(keys)))
        where = f" WHERE {' AND '.join(filters)}" if filters else ""
        inner = f"SELECT {named}, count(*) AS n FROM {table}{where} GROUP BY {by}"  # noqa: S608  # nosec B608: quoted
        if unknown:
            flat = f"CASE WHEN {' OR '.join(unknown)} THEN NULL ELSE {flat} END"
        cells = f"SELECT CAST({flat} AS BIGINT) AS cell, sum(n) AS n FROM ({inner}) AS k"  # noqa: S608  # nosec B608: quoted
        return f"{cells} GROUP BY 1"

    def outside_query(self, dialect: Dialect, kinds: dict[str, str], table: str, rows: int) -> str:
        """The share of groups that values outside the bounds add (`outside_groups_query`).

        To the unclamped keys of `_keys_query`, in `table`'s first `rows` rows.
        """
        shape = self.support.grid_shape or (1,) * len(self.specs)
        axes = [
            (
                number_sql(dialect, spec, kinds[spec.name])[0],
                float(self.support.lower[axis]),
                float(self.support.upper[axis]),
                shape[axis],
            )
            for axis, spec in enumerate(self.specs)
        ]
        return outside_groups_query(dialect, table, rows, axes)

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        """Counts per grid cell from (cell, rows) pairs.

        A NULL cell holds rows with a missing value (`_keys_query`) and is left out, as
        `Support.counts` leaves them out.
        """
        pairs = np.array([r for r in rows if r[0] is not None], dtype=np.int64).reshape(-1, 2)
        counts = np.zeros(self.support.n, dtype=np.int64)
        if pairs.size and (pairs[:, 0].min() < 0 or pairs[:, 0].max() >= counts.size):
            raise MechanismError("the engine returned a cell outside the range-count grid")
        np.add.at(counts, pairs[:, 0], pairs[:, 1])
        return counts

    def settled(self, answer: AnyArray) -> AnyArray:
        return answer


EVEN_FROM = 4  # cells from which an IEEE dialect places a value by `EvenAxis`, not a search


@dataclass(frozen=True)
class EvenAxis:
    """A value's cell on one grid axis by arithmetic and one exact comparison, unclamped.

    The axis's edges are e_j = lower + j w (`Support.axis_edges`, w = (upper - lower) / g). The
    bucket B(v) = floor((v - lower) g / (upper - lower) + 1/2) is non-decreasing in v (each IEEE
    step is, infinities included), and `of` checks with numpy, step for step as the SQL computes
    it, that B(e_j) = j for each inner edge j = 1 .. g - 1 (the half puts each edge mid-bucket,
    so a rounding either way keeps it there). So an edge below bucket B(v) lies below v and one
    above it above v: for B(v) = j in 1 .. g - 1 the cell, #(inner edges <= v), is the key
    K = B - 1 + [e_B <= v], whose comparison is numpy's search's, with the exact edge. A value
    below e_1 has B <= 1, so K <= 0; one at or above e_{g-1} has B >= g - 1, so K >= g - 1:
    clamping K to 0 .. g - 1 gives the cell of the value clamped to [lower, upper], as
    `Support.axis_cells` finds it, without clamping each value (K is a double, +-inf for
    +-inf). Only for a dialect whose doubles never raise (`Dialect.ieee`): PostgreSQL refuses
    the product that underflows for a value a hair above lower. DuckDB, 10^7 rows, the 32x16
    grid of benchmarks/engine_overhead.py, one thread: 0.136 s of CPU grouped by the two keys,
    against 0.257 s for each value clamped and its cell computed per row (docs/scale.md).
    """

    lower: float
    step: float  # w, numpy's edge spacing
    factor: float  # g / (upper - lower), the bucket's constant
    cells: int

    @staticmethod
    def of(lower: float, upper: float, cells: int, edges: AnyArray) -> EvenAxis | None:
        """The axis if every inner edge is its own bucket (else None: search the edges)."""
        if cells < EVEN_FROM:
            return None
        with np.errstate(all="ignore"):
            step, factor = (upper - lower) / cells, cells / (upper - lower)
            inner = np.asarray(edges, dtype=np.float64)[1:cells]
            j = np.arange(cells)
            spaced = np.array_equal(lower + j * step, np.asarray(edges)[:cells])
            moved = inner - lower if lower != 0 else inner
            buckets = np.floor(moved * factor + 0.5)
        if not (spaced and math.isfinite(factor) and np.array_equal(buckets, j[1:])):
            return None
        return EvenAxis(lower, step, factor, cells)

    def sql(self, dialect: Dialect, value: str) -> str:
        """The key K of a present value (not NULL, not NaN), unclamped: a double."""
        moved = shifted(dialect, value, self.lower)
        bucket = f"floor({moved} * {number(dialect, self.factor)} + {number(dialect, 0.5)})"
        edge = f"{bucket} * {number(dialect, self.step)}"
        if self.lower != 0:
            edge = f"({number(dialect, self.lower)} + {edge})"
        return f"({bucket} - 1 + CAST({edge} <= {value} AS INTEGER))"


def grid_tally(support: Support, schema: Schema) -> GridTally:
    """The tally of `support`'s columns of `schema` (numeric columns, as range counts need)."""
    specs = [schema.column(c) for c in support.columns]
    bad = [s.name for s in specs if not isinstance(s, NumericColumn)]
    if bad:
        raise MechanismError(f"range counting needs numeric columns; {bad[0]!r} is not numeric")
    return GridTally(support, tuple(s for s in specs if isinstance(s, NumericColumn)))
