"""What a catalogue row's functions receive: the request, typed once.

`MechanismSpec.run` takes one MechanismInputs and `MechanismSpec.plan` one PlanInputs; both
carry the ReleaseRequest fields (schema, columns, params and the budget). `run_release` builds
the MechanismInputs after validating the request; the portal and the benchmarks build a
PlanInputs to preview a release before any budget is spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pandas as pd

from mechanisms.chunks import ChunkedTable, EngineTable
from mechanisms.noise import RandomSource
from mechanisms.release import Progress
from mechanisms.schema import Schema

Table = pd.DataFrame | ChunkedTable | EngineTable  # every kind of table run_release may pass on
TableT = TypeVar("TableT", bound=Table)


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    """The request both a run and its plan answer: public inputs only, never data.

    `columns` are resolved names of `schema`; `params` the mechanism's own settings (its
    catalogue row's Parameters). `epsilon`, `delta` and `neighbouring` are the ROW-LEVEL budget
    the mechanism must meet: one row of its input under `neighbouring`. At person level
    `run_release` has already bounded each person's rows and turned the person's budget into
    this one (`persons.row_level_budget`, add-remove), so a mechanism never sees persons.
    """

    schema: Schema
    columns: Sequence[str]
    params: dict[str, Any]
    epsilon: float
    delta: float
    neighbouring: str


@dataclass(frozen=True, kw_only=True)
class MechanismInputs(ReleaseRequest, Generic[TableT]):
    """A run's inputs: the request, the data, the random source and a progress callback.

    TableT is the kind of table the mechanism reads (a DataFrame, or also a ChunkedTable or
    an EngineTable where its catalogue row says `reads_in_chunks` or `counts_only`). The
    mechanism's recorded spend (ReleaseOutput.spent) must not exceed (epsilon, delta).
    """

    data: TableT
    rng: RandomSource
    progress: Progress | None = None


@dataclass(frozen=True, kw_only=True)
class PlanInputs(ReleaseRequest):
    """A plan's inputs: the request and `n`, the row count.

    `n` is public under replace-one; under add-remove only the custodian's own preview may
    pass it (mechanisms.plans).
    """

    n: int
