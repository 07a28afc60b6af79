"""What an engine computes where the data lives: a tally, an exact aggregate of the rows.

A `Tally` is one aggregate every engine computes the same way: the columns it reads, the shape
of its int64 answer, the answer for a chunk of rows (`of_frame`: the in-process reference, which
the in-process and Dask engines run on record batches and add up) and the same answer as one SQL
`SELECT key, value ... GROUP BY key` (`query`, built by `mechanisms.counting.sql`, whose binning
arithmetic repeats numpy's) turned into the array by `from_rows`. An engine therefore needs only
two ways to run a tally (Python over record batches, or SQL), and a new SQL engine (Spark) is one
more `fetch` function over `sql_tally`.

Tallies:
- `CellTally` (here): rows per cell of the schema's columns (`Schema.cell_counts`): histograms,
  MWEM.
- `mechanisms.range_count.grid_tally.GridTally`: rows per cell of a range-count grid over the
  public bounds (`Support.counts`), rows with a missing value left out: range counts.
- `mechanisms.statistics.aggregates.GroupTally` and `RankTally`: per group, rows, values present,
  exact clamped sums, and counts around the quantile candidates: summary statistics.

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
    Dialect,
    column_sql,
    count_query,
    dense_counts,
    keyed_numbers,
    keys_first_counts,
    outside_groups_query,
)
from mechanisms.errors import MechanismError
from mechanisms.schema import Schema

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

    def settled(self, answer: AnyArray) -> AnyArray:
        """The answer in its one written form, however its parts were added up (`checked`)."""


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
        first = keys_first_counts(dialect, self.schema, self.columns, kinds, table)
        if first is not None:
            return first
        codes = [column_sql(dialect, self.schema.column(c), kinds[c]) for c in self.columns]
        return count_query(self.schema, codes, table)

    def outside_query(
        self, dialect: Dialect, kinds: dict[str, str], table: str, rows: int
    ) -> str | None:
        """The share of groups that values outside the bins' bounds add (`outside_groups_query`).

        To the unclamped keys of `keys_first_counts`, in `table`'s first `rows` rows; None
        where no column is keyed so.
        """
        keyed = keyed_numbers(dialect, self.schema, self.columns, kinds).values()
        axes = [(value, spec.lower, spec.upper, spec.n_bins) for spec, value in keyed]
        return outside_groups_query(dialect, table, rows, axes) if axes else None

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        pairs = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return dense_counts(self.schema, self.columns, pairs[:, 0], pairs[:, 1])

    def settled(self, answer: AnyArray) -> AnyArray:
        return answer


def checked(tally: Tally, answer: AnyArray, engine: str) -> AnyArray:
    """The engine's answer as int64 in its one form (`Tally.settled`).

    Refused if its shape is not the tally's.
    """
    if tuple(answer.shape) != tuple(tally.shape):  # a broken engine must never reach a mechanism
        raise MechanismError(f"engine {engine!r} returned an answer of shape {answer.shape}")
    return tally.settled(np.asarray(answer, dtype=np.int64))


__all__ = [
    "CellTally",
    "Fetch",
    "Tally",
    "checked",
    "frames_tally",
    "sql_tally",
]
