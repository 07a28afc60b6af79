"""The catalogue: one explicit table of every mechanism, and the one entry point that runs them.

Each row of CATALOGUE is a MechanismSpec: the name, a plain-language title, the function that runs
it (on one MechanismInputs), its parameter schema (enough to build form fields and command-line
options), its public noise plan (mechanisms.plans, on one PlanInputs), whether it reads data in
chunks, and its guarantee as a function of the request. The command line and the portal read only
this table; adding a mechanism is adding one row.

`run_release` validates the common privacy parameters, runs the mechanism, refuses an output
whose recorded spend exceeds the request, and writes the one manifest shape of MANIFEST_KEYS.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import pandas as pd

from mechanisms import histogram, persons, plans, public_bounds, statistics
from mechanisms.accounting import (
    DEFAULT_NEIGHBOURING,
    approx_dp_to_zcdp,
    check_delta,
    check_epsilon,
    check_neighbouring,
)
from mechanisms.chunks import ChunkedTable, EngineTable
from mechanisms.errors import MechanismError
from mechanisms.mwem import QUICK_CELLS, run_mwem
from mechanisms.noise import RandomSource, resolve_rng
from mechanisms.range_count.api import MECHANISM_NAMES, range_count_release
from mechanisms.range_count.intervals import ANSWER_COLUMNS
from mechanisms.release import PACKAGE_VERSION, Progress, ReleaseOutput, json_ready
from mechanisms.release_request import MechanismInputs, PlanInputs
from mechanisms.schema import Schema

UNIT = "one row of the input table"
MANIFEST_KEYS = (
    "mechanism",
    "package_version",
    "parameters",
    "guarantee",
    "accounting",
    "row_count_public",
    "schema",
    "files",
)


@dataclass(frozen=True)
class Guarantee:
    """What a release promises, at the requested (epsilon, delta).

    `definition` (e.g. pure epsilon-DP), or rho-zCDP when rho is set, for the unit `unit` under
    `neighbouring`; `sensitivity` is the L1 change one unit makes to the counts the noise
    protects.
    """

    unit: str
    neighbouring: str
    definition: str
    epsilon: float
    delta: float
    rho: float | None
    sensitivity: int

    def as_manifest(self) -> dict[str, Any]:
        """The manifest's guarantee block (the same keys for every mechanism)."""
        record = asdict(self)
        record["epsilon"] = "inf" if math.isinf(self.epsilon) else self.epsilon
        return record


@dataclass(frozen=True)
class Parameter:
    """One mechanism setting: its params key, type, default, bounds or choices, and help."""

    name: str
    type: type
    help: str
    default: object = None
    bounds: tuple[Any, ...] = (None, None)
    choices: tuple[str, ...] = ()
    repeat: bool = False  # the command line takes it several times (a list in params)


@dataclass(frozen=True)
class MechanismSpec:
    """Everything the package knows about one mechanism; see the module docstring."""

    name: str
    title: str
    summary: str
    run: Callable[[MechanismInputs[Any]], ReleaseOutput]
    parameters: tuple[Parameter, ...]
    plan: Callable[[PlanInputs], plans.NoisePlan]
    guarantee: Callable[[float, float, str, dict[str, Any]], Guarantee]
    files: dict[str, str]
    # what each column of its CSV files holds, per file: mechanisms.package.columns
    columns: dict[str, dict[str, str]] = field(default_factory=dict)
    reads_in_chunks: bool = False
    # reads nothing but aggregates an engine tallies (cell counts, a range-count grid), so it
    # takes an EngineTable
    counts_only: bool = False
    long_running: bool = False  # iterative: always a long job, whatever its support size
    synthetic_rows: bool = False  # publishes counts of made-up rows (so never negative)
    # its columns are ones the schema has yet to describe (any declared type, "ignored" too):
    # it finds their public metadata, so it is offered where the schema is written (the
    # portal's schema page), not on the release form
    describes_schema: bool = False
    # (epsilon, delta, group) -> the row-level (epsilon, delta) that costs (epsilon, delta)
    # for `group` rows (group privacy): persons.row_level_budget (pure DP, or zCDP when
    # delta > 0), persons.approx_group_budget for an (epsilon, delta)-DP mechanism
    group_budget: Callable[[float, float, int], tuple[float, float]] = persons.row_level_budget


def pure_guarantee(
    epsilon: float, delta: float, neighbouring: str, params: dict[str, Any]
) -> Guarantee:
    """Pure epsilon-DP on counts of L1 sensitivity 2 (replace-one) or 1 (add-remove)."""
    sensitivity = histogram.count_sensitivity(neighbouring)
    return Guarantee(UNIT, neighbouring, "pure epsilon-DP", epsilon, 0.0, None, sensitivity)


def range_count_guarantee(
    epsilon: float, delta: float, neighbouring: str, params: dict[str, Any]
) -> Guarantee:
    """Pure epsilon-DP at delta = 0; else the largest rho-zCDP meeting (epsilon, delta).

    mn12_laplace with delta > 0 is (epsilon, delta)-DP by advanced composition instead.
    """
    base = pure_guarantee(epsilon, 0.0, neighbouring, params)
    if delta == 0:
        return base
    if params.get("mechanism") == "mn12_laplace":
        return Guarantee(**{**asdict(base), "definition": "(epsilon, delta)-DP", "delta": delta})
    rho = math.inf if math.isinf(epsilon) else approx_dp_to_zcdp(epsilon, delta)
    definition = "rho-zCDP, which implies (epsilon, delta)-DP"
    return Guarantee(**{**asdict(base), "definition": definition, "delta": delta, "rho": rho})


def estimate_guarantee(
    epsilon: float, delta: float, neighbouring: str, params: dict[str, Any]
) -> Guarantee:
    """Bounds: pure epsilon-DP; categories (params kind "categorical"): (epsilon, delta)-DP.

    On counts of L1 sensitivity 2 (replace-one) or 1 (add-remove): public_bounds.run_estimate.
    """
    base = pure_guarantee(epsilon, 0.0, neighbouring, params)
    if params.get("kind") != "categorical":
        return base
    return Guarantee(**{**asdict(base), "definition": "(epsilon, delta)-DP", "delta": delta})


SCHEMA_ESTIMATE = "dp_schema_estimate"  # the name existing releases and ledgers carry
ROWS = Parameter("rows", int, "number of synthetic rows to release", bounds=(0, None))
CATALOGUE: dict[str, MechanismSpec] = {
    "perturbed_histogram": MechanismSpec(
        name="perturbed_histogram",
        title="Noisy histogram",
        summary="noisy cell counts and synthetic rows (Wasserman & Zhou 4.2)",
        run=histogram.run_perturbed,
        parameters=(ROWS,),
        plan=plans.perturbed_plan,
        guarantee=pure_guarantee,
        files=histogram.PERTURBED_FILES,
        columns=histogram.PERTURBED_COLUMNS,
        reads_in_chunks=True,
        counts_only=True,
    ),
    "smoothed_histogram": MechanismSpec(
        name="smoothed_histogram",
        title="Smoothed histogram",
        summary="synthetic rows from a smoothed histogram (Wasserman & Zhou 4.1)",
        run=histogram.run_smoothed,
        parameters=(
            ROWS,
            Parameter(
                "mix",
                float,
                "mixing weight of the uniform component (the paper's delta)",
                None,
                (0, 1),
            ),
        ),
        plan=plans.smoothed_plan,
        guarantee=pure_guarantee,
        files=histogram.SMOOTHED_FILES,
        columns=histogram.SMOOTHED_COLUMNS,
        reads_in_chunks=True,
        counts_only=True,
        synthetic_rows=True,
    ),
    "mwem": MechanismSpec(
        name="mwem",
        title="Synthetic data (MWEM)",
        summary="synthetic rows fitted to a workload of marginals or ranges "
        "(Hardt, Ligett & McSherry)",
        run=run_mwem,
        parameters=(
            Parameter(
                "rounds",
                int,
                "number of MWEM rounds T (default: from n, epsilon, workload)",
                bounds=(1, 200),
            ),
            Parameter(
                "workload", str, "workload JSON file (k-way marginals, ranges, boxes, mixes)"
            ),
            Parameter(
                "marginals", int, "use all K-way marginals as the workload (default 2)", 2, (1, 3)
            ),
            Parameter(
                "update",
                str,
                "damped (default) or paper (the paper's exp step, slower)",
                "damped",
                choices=("damped", "paper"),
            ),
            Parameter(
                "output",
                str,
                "last (default) or average (the iterates' mean; small domains)",
                "last",
                choices=("last", "average"),
            ),
            Parameter(
                "quick_cells",
                str,
                "the largest block of the model kept as one whole table: larger blocks are kept "
                "as a junction tree of smaller tables (the same fit, in less time and memory); "
                f"default {QUICK_CELLS}, or none for whole tables only (slower, more memory)",
            ),
        ),
        plan=plans.mwem_plan,
        guarantee=pure_guarantee,
        files={
            "synthetic.csv": "rows sampled from MWEM's fitted distribution",
            "measurements.json": "every noisy measurement MWEM made (itself the DP release)",
        },
        columns={
            "synthetic.csv": {
                "*": "a made-up value of {column}, sampled from MWEM's fitted distribution (a "
                "numeric value drawn evenly within its bin)"
            }
        },
        long_running=True,
        synthetic_rows=True,
        counts_only=True,  # it measures marginals of the cell counts (mwem.measure.TrueAnswers)
    ),
    "range_count": MechanismSpec(
        name="range_count",
        title="Range counts",
        summary="private range counts (intervals, boxes, halfspaces) over a grid or point support",
        run=range_count_release,
        parameters=(
            Parameter("grid", str, "support grid, e.g. 64x64 (default: the schema's bins)"),
            Parameter("workload", str, "workload JSON or CSV file of intervals, boxes, halfspaces"),
            Parameter("random_halfspaces", int, "add M random halfspaces through support points"),
            Parameter("random_boxes", int, "add M random boxes inside the bounds"),
            Parameter(
                "mechanism",
                str,
                f"{', '.join(MECHANISM_NAMES)} (default auto)",
                "auto",
                choices=MECHANISM_NAMES,
            ),
            Parameter(
                "estimator",
                str,
                "mn12/path_tree answers: auto (default), chain or gls",
                "auto",
                choices=("auto", "chain", "gls"),
            ),
        ),
        plan=plans.range_count_plan,
        guarantee=range_count_guarantee,
        files={
            "answers.csv": "per range: estimate, 95% interval (noise plus rounding), noise sd",
            "structure.json": "the released structure: answers new ranges at no privacy cost",
        },
        columns={"answers.csv": ANSWER_COLUMNS},
        reads_in_chunks=True,
        counts_only=True,  # the grid's counts, tallied where the data lives
    ),
    "statistics": MechanismSpec(
        name="statistics",
        title="Summary statistics",
        summary="counts, sums, means, variances and quantiles by group, with 95-percent intervals",
        run=statistics.run_statistics,
        parameters=(
            Parameter(
                "stat",
                str,
                "a statistic as kind:column (count, sum, mean, variance, std, median, q25, ...)",
                repeat=True,
            ),
            Parameter("by", str, "a categorical column to group by (at most two)", repeat=True),
            Parameter("weights", str, "budget weights, one per statistic (default: even)"),
        ),
        plan=statistics.statistics_plan,
        guarantee=pure_guarantee,
        files=statistics.FILES,
        columns=statistics.COLUMNS,
        counts_only=True,  # its aggregates, tallied where the data lives
    ),
    SCHEMA_ESTIMATE: MechanismSpec(
        name=SCHEMA_ESTIMATE,
        title="DP estimate of a column's bounds or categories",
        summary="bounds (a median, then sparse-vector scans) or categories (thresholded noisy "
        "counts) of columns whose public metadata is unknown, spending budget",
        run=public_bounds.run_estimate,
        parameters=(
            Parameter(
                "kind",
                str,
                "numeric: bounds (default); categorical: categories (needs --delta > 0)",
                "numeric",
                choices=public_bounds.ESTIMATE_KINDS,
            ),
        ),
        plan=public_bounds.estimate_plan,
        guarantee=estimate_guarantee,
        files=public_bounds.ESTIMATE_FILES,
        columns=public_bounds.ESTIMATE_COLUMNS,
        describes_schema=True,
        group_budget=persons.approx_group_budget,
    ),
}


def spec(name: str) -> MechanismSpec:
    """The catalogue row of `name`, or a MechanismError naming the known mechanisms."""
    if name not in CATALOGUE:
        raise MechanismError(
            f"mechanism ({name!r}) is unknown; choose one of {', '.join(CATALOGUE)}"
        )
    return CATALOGUE[name]


def reads_in_chunks(name: str) -> bool:
    """Whether the mechanism `name` accepts a ChunkedTable (it only counts, in one pass)."""
    return name in CATALOGUE and CATALOGUE[name].reads_in_chunks


def runs_where_data_lives(name: str) -> bool:
    """Whether the mechanism `name` runs on a table that stays where it lives (an EngineTable).

    It reads only aggregates an engine tallies there (`counts_only`), never the rows.
    """
    return name in CATALOGUE and CATALOGUE[name].counts_only


def run_release(
    name: str,
    data: pd.DataFrame | ChunkedTable | EngineTable,
    schema: Schema,
    *,
    epsilon: float,
    delta: float = 0.0,
    neighbouring: str = DEFAULT_NEIGHBOURING,
    columns: Sequence[str] | None = None,
    params: dict[str, Any] | None = None,
    rng: RandomSource | None = None,
    progress: Progress | None = None,
    max_rows_per_person: int | None = None,
) -> ReleaseOutput:
    """Run the catalogue's mechanism `name` and write its manifest in the one shape.

    Privacy: the spec's guarantee at the requested (epsilon, delta); this wrapper adds no
    privacy loss. The mechanism reports what it spent (ReleaseOutput.spent); an output whose
    spend exceeds the request (exact comparison) is refused and nothing is returned.
    The manifest holds only public fields: nothing computed from the data but mechanism output.

    Person level (the schema has a person column; `max_rows_per_person` overrides its k): the
    rows are bounded to k per person, the person column is dropped, and the mechanism runs
    under row-level add-remove at the budget the row's `group_budget` derives, so the
    guarantee holds for one person under `neighbouring` (mechanisms.persons). The rows dropped
    by bounding go to `ReleaseOutput.custodian` only. An EngineTable is bounded inside its engine
    (`EngineTable.bounded`, with a secret drawn from `rng`); its dropped rows are not counted.

    `data` may be an EngineTable (mechanisms.counting.engine_table) for the mechanisms that
    read only aggregates an engine tallies (`counts_only`): the engine computes them where the
    table lives, the mechanism adds the noise, and the manifest's parameters name the engine.
    Such a table may change after any check, so it is read with `schema.accepting()` (no
    "reject" rule: see there why the guarantee holds), which the manifest's schema shows.
    """
    entry = spec(name)
    if not isinstance(schema, Schema):
        raise MechanismError(f"schema ({type(schema).__name__}) must be a mechanisms.Schema")
    if isinstance(data, EngineTable):
        _check_engine_table(entry, data)
        schema = schema.accepting()
    if isinstance(data, ChunkedTable) and not entry.reads_in_chunks:
        chunked = sorted(n for n, s in CATALOGUE.items() if s.reads_in_chunks)
        raise MechanismError(
            f"data in chunks needs a counting mechanism ({', '.join(chunked)}), "
            f"not {name!r}; pass a DataFrame instead"
        )
    columns = schema.resolve_columns(columns, undescribed=entry.describes_schema)
    params = dict(params or {})
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    neighbouring, rng = check_neighbouring(neighbouring), resolve_rng(rng)
    person = persons.for_release(schema.person, max_rows_per_person)
    budget, custodian = (epsilon, delta, neighbouring), {}
    if person is not None:
        persons.check_person_level(name, delta, params)
        if isinstance(data, EngineTable):  # bounded inside the engine; drops stay uncounted
            data, dropped = (
                data.bounded(person.column, person.max_rows, persons.bounding_secret(rng)),
                None,
            )
        else:
            data, dropped = persons.bound_contributions(_whole(data), person, rng)
        group = person.group_size(neighbouring)
        budget, custodian = (
            (*entry.group_budget(epsilon, delta, group), "add-remove"),
            {"rows_dropped_by_bounding": dropped},
        )
    output = entry.run(
        MechanismInputs(
            data=data,
            schema=schema,
            columns=columns,
            params=params,
            epsilon=budget[0],
            delta=budget[1],
            neighbouring=budget[2],
            rng=rng,
            progress=progress,
        )
    )
    output.custodian.update(custodian)
    spent = _checked_spend(name, output, *budget[:2])
    parameters = dict(output.manifest.get("parameters", {}))
    if isinstance(data, EngineTable):
        parameters["counting_engine"] = data.engine
    output.manifest = json_ready(
        {
            "mechanism": name,
            "package_version": PACKAGE_VERSION,
            "parameters": parameters,
            "guarantee": _guarantee(entry, person, epsilon, delta, neighbouring, params),
            "accounting": spent if person is None else _person_accounting(epsilon, delta, spent),
            "row_count_public": neighbouring == "replace-one" and person is None,
            "schema": {"columns": [schema.columns[c].to_dict() for c in columns]},
            "files": dict(entry.files),
        }
    )
    return output


def _check_engine_table(entry: MechanismSpec, data: EngineTable) -> None:
    """Refuse a table counted by an engine where the mechanism needs more than cell counts."""
    if not entry.counts_only:
        supported = sorted(n for n, s in CATALOGUE.items() if s.counts_only)
        raise MechanismError(
            f"{entry.name!r} reads more than counts, so it cannot run on {data.description}"
            f" counted by the {data.engine!r} engine; engines serve {', '.join(supported)}"
        )


def _whole(data: pd.DataFrame | ChunkedTable) -> pd.DataFrame:
    """The table as one DataFrame: bounding needs all rows of each person at once."""
    if isinstance(data, ChunkedTable):
        return pd.concat(list(data), ignore_index=True)
    return data


def _guarantee(
    entry: MechanismSpec,
    person: persons.PersonLevel | None,
    epsilon: float,
    delta: float,
    neighbouring: str,
    params: dict[str, Any],
) -> dict[str, Any]:
    """The manifest's guarantee block, with the unit one person at person level.

    There the L1 sensitivity is k times the row-level one (k add-remove, 2k replace), and k
    is stated.
    """
    guarantee = entry.guarantee(epsilon, delta, neighbouring, params)
    if person is None:
        return guarantee.as_manifest()
    sensitivity = guarantee.sensitivity * person.max_rows
    scaled = Guarantee(**{**asdict(guarantee), "unit": person.unit(), "sensitivity": sensitivity})
    return {**scaled.as_manifest(), "max_rows_per_person": person.max_rows}


def _person_accounting(epsilon: float, delta: float, spent: dict[str, Any]) -> dict[str, Any]:
    """Person level: the requested (epsilon, delta) for one person, and the row-level spend.

    `per_row` is the mechanism's own recorded spend (checked against the row's group_budget).
    """
    record: dict[str, Any] = {"epsilon": epsilon, "delta": delta, "per_row": spent}
    if math.isinf(epsilon):
        record["epsilon"] = "inf"
    return record


def _checked_spend(
    name: str, output: ReleaseOutput, epsilon: float, delta: float
) -> dict[str, Any]:
    """The mechanism's recorded spend, if it is within the request (exactly); else refuse."""
    spent = dict(output.spent or {})
    if set(output.manifest) - {"parameters"} or "epsilon" not in spent or "delta" not in spent:
        raise MechanismError(
            f"mechanism {name!r} did not report its spend (epsilon, delta) and parameters only; "
            "nothing was released"
        )
    for key, asked in (("epsilon", epsilon), ("delta", delta)):
        if _above(spent[key], asked):
            raise MechanismError(
                f"mechanism {name!r} recorded a spend of {key}={spent[key]!r}, above the "
                f"requested {asked!r}; nothing was released"
            )
    return spent


def _above(spent: Any, asked: float) -> bool:
    """spent > asked, exactly (floats compared as the rationals they are)."""
    spent = float("inf") if spent == "inf" else float(spent)
    if math.isinf(asked):
        return False
    return math.isinf(spent) or math.isnan(spent) or Fraction(spent) > Fraction(asked)
