"""Releases at the planner's ε on tables of several shapes, and the share of outputs it promised.

Shared by tests/mechanisms/test_planner_promise.py (the checks) and
benchmarks/planner_promise.py (the table of figures). For each case: plan the ε for the
target (`mechanisms.planner.plan_epsilon`), release at it `releases` times through
`run_release` (the secure source), and measure per release the share of its outputs within ±T
of the truth, as the promise defines output and truth (`mechanisms.planner`'s docstring):

- histograms: every cell (the perturbed noisy count; the smoothed real-count estimate);
- mwem: every count measured in a round (the one-way counts measured first have their own,
  larger scale and are left out: the promise is the rounds');
- range counts: every answer against the rows in the range as asked (records_in);
- statistics: every group the promise covers (holding at least the values it assumed:
  `statistics.promise.Measured.judged`) of every statistic against the statistic of the
  clamped values, a withheld estimate ("too few rows to publish") counting as outside;
  quantiles in rows of rank beyond the best candidate's (`statistics.promise`). Groups
  smaller than assumed are outside the promise and not measured.

The per-release shares are independent across releases (independent noise), so their mean
estimates the promised expected share, with a standard error from their spread.

Each case also has a broken twin: the promise a defective planner would make at the same ε
(`twin_targets`), which the same measurement must show is not kept:

- noise halved: a planner that takes the noise scale for half what it is (histograms, MWEM);
- average cell: the smoothed histogram planned for a cell holding an average share only;
- no rounding: a range-count planner that leaves out the grid rounding (crowding 0);
- no group sizes: a statistics planner that takes each group to hold all n rows (measured on
  the groups the real promise covers);
- row level: a person-level planner that ignores the bound k (plans at k times the ε);
- count's share ignored: a statistics planner that gives a sum or quantile its whole share
  although SUPPORT_SHARE of it goes to its own noisy count (`statistics.support`): the
  promise at ε / (1 - SUPPORT_SHARE), where the rest is what the statistic gets at ε.

Tables: the 2,000-row Adult sample (demo schema), loglinear6 (tests/data), and the public
tables of tests/real_tables.py (cars, seattle_weather, co2), plus a made-up visits table with
a person column (at most k rows per person, so bounding drops none and the raw table is the
truth).
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mechanisms import accuracy, planner, plans
from mechanisms.catalogue import run_release
from mechanisms.range_count import api
from mechanisms.range_count.inputs import records_in
from mechanisms.release_request import PlanInputs
from mechanisms.schema import Schema
from mechanisms.statistics import selected_request, support
from mechanisms.statistics.promise import GroupAssumption, statistic_errors
from tests import real_tables
from tests.helpers import DEMO_SCHEMA, SMALL_ADULT

DATA = Path(__file__).resolve().parents[1] / "data"
Z = 4.265  # one-sided normal quantile at 1e-5: each check's false-alarm rate
K = 2  # rows per person in the visits table


@dataclass(frozen=True)
class Case:
    """One planned release: table, kind, columns, settings, target, how many releases."""

    label: str
    kind: str
    table: str
    columns: tuple[str, ...]
    target: float | dict[str, float]
    releases: int
    params: dict[str, Any] = field(default_factory=dict)
    neighbouring: str = "replace-one"
    twin: str = ""
    twin_key: str = ""  # the promise the twin breaks ("" for single-promise kinds)
    group_rows: float | None = None  # statistics: the stated fewest rows per group

    def __str__(self) -> str:
        return f"{self.kind}: {self.label}"


def _boxes(table: str, columns: tuple[str, ...], count: int, seed: int) -> list[dict[str, Any]]:
    """`count` boxes with random corners inside the schema's bounds: off the grid (public)."""
    schema, _ = load(table)
    lower = np.array([schema.column(c).lower for c in columns], dtype=float)
    upper = np.array([schema.column(c).upper for c in columns], dtype=float)
    corners = lower + np.random.default_rng(seed).uniform(size=(count, 2, len(columns))) * (
        upper - lower
    )
    return [
        {"type": "box", "lo": c.min(axis=0).tolist(), "hi": c.max(axis=0).tolist()} for c in corners
    ]


def cases() -> list[Case]:
    """The cases, in the order of the benchmark's table."""
    age_hours, co2 = ("age", "hours-per-week"), ("co2",)
    return [
        Case("adult sex×race×income", "perturbed_histogram", "adult", ("sex", "race", "income"),
             20, 30, {"rows": 0}, twin="noise halved"),
        Case("seattle weather×wind", "perturbed_histogram", "seattle_weather",
             ("weather", "wind"), 20, 30, {"rows": 0}, twin="noise halved"),
        Case("loglinear6 a–f", "perturbed_histogram", "loglinear6", tuple("abcdef"), 10, 30,
             {"rows": 0}, twin="noise halved"),
        Case("adult sex×income", "smoothed_histogram", "adult", ("sex", "income"), 110, 30),
        Case("16 cells, 8 full", "smoothed_histogram", "half_full", ("code",), 110, 800,
             twin="average cell"),
        Case("adult sex×race×income", "mwem", "adult", ("sex", "race", "income"), 20, 30,
             twin="noise halved"),
        Case("loglinear6 a–d", "mwem", "loglinear6", tuple("abcd"), 15, 40, twin="noise halved"),
        Case("co2, 64 cells, off-grid intervals", "range_count", "co2", co2, 125, 30,
             {"grid": [64], "workload": _boxes("co2", co2, 60, 3)}, twin="no rounding"),
        Case("adult age×hours, 64×64, off-grid boxes", "range_count", "adult", age_hours, 102, 30,
             {"grid": "64x64", "workload": _boxes("adult", age_hours, 60, 2)},
             twin="no rounding"),
        Case("seattle temp max×min, 32×32, halfspaces", "range_count", "seattle_weather",
             ("temp_max", "temp_min"), 80, 30, {"grid": "32x32", "random_halfspaces": 60}),
        Case("cars by origin", "statistics", "cars", ("Horsepower", "Origin"),
             {"count": 12, "mean:Horsepower": 100, "median:Horsepower": 45,
              "std:Horsepower": 150}, 80,
             {"stat": ["count", "mean:Horsepower", "median:Horsepower", "std:Horsepower"],
              "by": ["Origin"]}, "add-remove", twin="no group sizes", twin_key="mean:Horsepower",
             group_rows=70),
        Case("seattle by weather", "statistics", "seattle_weather", ("temp_max", "weather"),
             {"mean:temp_max": 12.6, "variance:temp_max": 625, "sum:temp_max": 1200}, 90,
             {"stat": ["mean:temp_max", "variance:temp_max", "sum:temp_max"],
              "by": ["weather"]}, twin="no group sizes", twin_key="mean:temp_max"),
        Case("adult hours by occupation, own count", "statistics", "adult",
             ("hours-per-week", "occupation"), {"sum:hours-per-week": 1000}, 280,
             {"stat": ["sum:hours-per-week"], "by": ["occupation"]},
             twin="count's share ignored", twin_key="sum:hours-per-week", group_rows=45),
        Case("adult age, public n", "statistics", "adult", ("age",),
             {"count": 1, "mean:age": 1.1, "median:age": 200, "variance:age": 250}, 560,
             {"stat": ["count", "mean:age", "median:age", "variance:age"]},
             twin="noise halved", twin_key="mean:age"),
        Case("visits, k = 2", "perturbed_histogram", "visits", ("ward",), 15, 160, {"rows": 0},
             "add-remove", twin="row level"),
        Case("visits by ward, k = 2", "statistics", "visits", ("stay", "ward"),
             {"count": 15, "mean:stay": 1.0}, 30, {"stat": ["count", "mean:stay"], "by": ["ward"]},
             "add-remove"),
    ]  # fmt: skip


# ---------------------------------------------------------------- tables


@cache
def load(name: str) -> tuple[Schema, pd.DataFrame]:
    """(schema, the whole table as `read_table` gives it) of one test table."""
    if name == "adult":
        return Schema.from_dict(DEMO_SCHEMA), _read(SMALL_ADULT.read_bytes(), DEMO_SCHEMA)
    if name == "loglinear6":
        return _loglinear(name)
    if name == "visits":
        return _visits()
    if name == "half_full":
        return _half_full()
    text, document = real_tables.TABLES[name]()
    return Schema.from_dict(document), _read(text, document)


def _read(text: bytes, document: dict[str, Any]) -> pd.DataFrame:
    import tempfile

    from mechanisms.__main__ import read_table

    schema = Schema.from_dict(document)
    with tempfile.NamedTemporaryFile(suffix=".csv") as handle:
        handle.write(text)
        handle.flush()
        return read_table(handle.name, schema, schema.resolve_columns(None))


def _loglinear(name: str) -> tuple[Schema, pd.DataFrame]:
    counts = pd.read_csv(DATA / f"{name}.csv", dtype=str)
    columns = [c for c in counts.columns if c != "count"]
    rows = counts.loc[counts.index.repeat(counts["count"].astype(int)), columns]
    entry = {"type": "categorical", "categories": ["0", "1"], "missing": "reject"}
    document = {"columns": [{"name": c, **entry, "unknown": "reject"} for c in columns]}
    return Schema.from_dict(document), rows.reset_index(drop=True)


def _half_full() -> tuple[Schema, pd.DataFrame]:
    """2,000 rows in 8 of 16 categories, 250 each: near the smoothed histogram's hardest K."""
    codes = [f"c{i:02d}" for i in range(16)]
    document = {
        "columns": [
            {"name": "code", "type": "categorical", "categories": codes, "missing": "reject",
             "unknown": "reject"}
        ]
    }  # fmt: skip
    frame = pd.DataFrame({"code": np.repeat(codes[::2], 250)})
    return Schema.from_dict(document), frame


def _visits() -> tuple[Schema, pd.DataFrame]:
    """600 patients with 1 or 2 visits each (never more than K): a ward and a stay in days."""
    generator = np.random.default_rng(11)
    visits = generator.integers(1, K + 1, 600)
    person = np.repeat(np.arange(600), visits).astype(str)
    wards = generator.choice(["a", "b", "c"], len(person), p=[0.5, 0.3, 0.2])
    stay = np.clip(np.round(generator.gamma(2.0, 2.0, len(person))), 0, 30)
    document = {
        "columns": [
            {"name": "patient", "role": "person_id"},
            {"name": "ward", "type": "categorical", "categories": ["a", "b", "c"]},
            {"name": "stay", "type": "numeric", "lower": 0, "upper": 30, "integer": True},
        ],
        "max_rows_per_person": K,
    }
    frame = pd.DataFrame({"patient": person, "ward": wards, "stay": stay})
    return Schema.from_dict(document), frame


# ---------------------------------------------------------------- planning


def request(case: Case) -> planner.PlanRequest:
    """The plan request of a case (its table's row count as n)."""
    schema, frame = load(case.table)
    return planner.PlanRequest(
        case.kind,
        schema,
        case.columns,
        case.params,
        len(frame),
        neighbouring=case.neighbouring,
        assumptions=planner.Assumptions(group_rows=case.group_rows),
    )


def targets(case: Case, promises: tuple[planner.Promise, ...]) -> dict[str, float]:
    """Each promise's target: the case's single number, or its entry per statistic."""
    if isinstance(case.target, dict):
        return {p.key: case.target[p.key] for p in promises}
    return {p.key: float(case.target) for p in promises}


def twin_targets(case: Case, epsilon: float) -> dict[str, float]:
    """The half-widths a broken planner (the case's `twin`) would promise at `epsilon`.

    noise halved: the promise at 2ε (every scale is proportional to 1/ε); row level: at kε
    (person level divides ε by k); count's share ignored: at ε / (1 - SUPPORT_SHARE); no
    rounding, no group sizes: the planner with crowding 0, or with every group holding all n
    rows; average cell: the smoothed plan's old half-width.
    """
    plan_request = request(case)
    _, frame = load(case.table)
    at = epsilon
    if case.twin == "noise halved":
        at = 2 * epsilon
    elif case.twin == "row level":
        at = K * epsilon
    elif case.twin == "count's share ignored":
        at = epsilon / (1 - support.SUPPORT_SHARE)
    elif case.twin == "no rounding":
        plan_request = replace(plan_request, assumptions=planner.Assumptions(crowding=0))
    elif case.twin == "no group sizes":
        plan_request = replace(plan_request, assumptions=planner.Assumptions(group_rows=len(frame)))
        # measured on the groups the planner's own promise covers (`shares`)
    elif case.twin == "average cell":
        half = accuracy.plan_half_width(_mechanism_plan(case, epsilon), len(frame))
        assert half is not None
        return {"": half}
    return {p.key: p.half_width for p in planner.accuracy_at(plan_request, at)}


def _mechanism_plan(case: Case, epsilon: float) -> plans.NoisePlan:
    schema, frame = load(case.table)
    plan_of = {
        "perturbed_histogram": plans.perturbed_plan,
        "smoothed_histogram": plans.smoothed_plan,
        "mwem": plans.mwem_plan,
    }[case.kind]
    params = {k: v for k, v in case.params.items() if k != "rows"}
    return plan_of(
        PlanInputs(
            schema=schema,
            columns=list(case.columns),
            params=params,
            epsilon=epsilon,
            delta=0.0,
            neighbouring=case.neighbouring,
            n=len(frame),
        )
    )


def release_params(case: Case, proposal: planner.Proposal) -> dict[str, Any]:
    """The case's settings plus what the plan chose (the smoothed histogram's rows)."""
    chosen = {k: v for p in proposal.promises for k, v in p.settings.items()}
    return {**case.params, **chosen}


# ---------------------------------------------------------------- releasing and measuring


def shares(
    case: Case,
    epsilon: float,
    params: dict[str, Any],
    within: dict[str, dict[str, float]],
    rng: Any,
) -> dict[str, dict[str, np.ndarray]]:
    """Per label and promise key, the per-release shares of outputs within ±within[label][key].

    Every label is measured on the same `case.releases` releases at `epsilon`.
    """
    schema, frame = load(case.table)
    promises = planner.accuracy_at(request(case), epsilon)
    measured: dict[str, dict[str, list[float]]] = {
        label: {key: [] for key in keys} for label, keys in within.items()
    }
    for _ in range(case.releases):
        output = run_release(
            case.kind,
            frame,
            schema,
            epsilon=epsilon,
            neighbouring=case.neighbouring,
            columns=list(case.columns),
            params=params,
            rng=rng,
        )
        errors = _errors(case, schema, frame, (epsilon, promises), output)
        for label, keys in within.items():
            for key, bound in keys.items():
                assert errors[key].size, f"{case}: no output the promise {key!r} covers"
                measured[label][key].append(float(np.mean(errors[key] <= bound + 1e-9)))
    return {
        label: {key: np.array(values) for key, values in keys.items()}
        for label, keys in measured.items()
    }


def _errors(
    case: Case,
    schema: Schema,
    frame: pd.DataFrame,
    planned: tuple[float, tuple[planner.Promise, ...]],
    output: Any,
) -> dict[str, np.ndarray]:
    """Per promise key, the errors of the outputs the promise covers (planned: ε, promises)."""
    epsilon, promises = planned
    if case.kind in ("perturbed_histogram", "smoothed_histogram"):
        return {"": _cell_errors(case, schema, frame, output)}
    if case.kind == "mwem":
        return {"": _measured_errors(case, schema, frame, epsilon, output)}
    if case.kind == "range_count":
        return {"": _range_errors(case, schema, frame, output)}
    return _statistic_errors(case, schema, frame, promises, output)


def _cell_errors(case: Case, schema: Schema, frame: pd.DataFrame, output: Any) -> np.ndarray:
    truth = schema.cell_counts(frame, list(case.columns)).ravel()
    released = np.asarray(output.trace["counts"], dtype=float)
    if case.kind == "smoothed_histogram":
        parameters = output.manifest["parameters"]
        released = accuracy.smoothed_intervals(
            released, rows=parameters["rows"], mix=parameters["mix"], n=parameters["n"]
        )[0]
    return np.abs(released - truth)


def _measured_errors(
    case: Case, schema: Schema, frame: pd.DataFrame, epsilon: float, output: Any
) -> np.ndarray:
    columns = list(case.columns)
    codes, shape = schema.encode(frame, columns), schema.domain_shape(columns)
    round_scale = _mechanism_plan(case, epsilon).scale or 0.0
    errors: list[float] = []
    for record in json.loads(output.files["measurements.json"])["measurements"]:
        if record["noise_scale"] > round_scale * (1 + 1e-9):
            continue  # a one-way count measured first: its own scale, not the rounds'
        attrs = tuple(columns.index(c) for c in record["query"]["columns"])
        dims = tuple(shape[a] for a in attrs)
        flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), dims)
        truth = np.bincount(flat, minlength=math.prod(dims))
        errors.extend(np.abs(np.asarray(record["noisy_answer"]) - truth))
    return np.array(errors, dtype=float)


def _range_errors(case: Case, schema: Schema, frame: pd.DataFrame, output: Any) -> np.ndarray:
    support = api.support_from_schema(schema, list(case.columns), case.params)
    values = np.column_stack(
        [np.asarray(schema.column(c).numbers(frame[c]), dtype=float) for c in case.columns]
    )
    values = values[~np.isnan(values).any(axis=1)]
    workload = json.loads(output.files["structure.json"])["workload"]
    truth = np.array([records_in(support, values, q).sum() for q in workload], dtype=float)
    answers = pd.read_csv(io.BytesIO(output.files["answers.csv"]))["estimate"].to_numpy(float)
    return np.abs(answers - truth)


def _statistic_errors(
    case: Case,
    schema: Schema,
    frame: pd.DataFrame,
    promises: tuple[planner.Promise, ...],
    output: Any,
) -> dict[str, np.ndarray]:
    """Per statistic, |estimate - truth| of each group its promise covers (withheld: inf)."""
    table = pd.read_csv(io.BytesIO(output.files["statistics.csv"]))
    stats = selected_request(
        schema, case.params, list(case.columns), epsilon=1.0, neighbouring=case.neighbouring
    )
    groups = len(stats.groups)
    released = table["estimate"].to_numpy(float).reshape(len(stats.statistics), groups)
    data = frame.drop(columns=[schema.person.column]) if schema.person is not None else frame
    measured = statistic_errors(data, schema, stats, released)
    promised = {p.key: p for p in promises}
    out = {}
    for index, stat in enumerate(stats.statistics):
        promise = promised[stat.text]
        assert promise.assumed_rows is not None
        group = GroupAssumption(promise.assumed_rows, promise.assumed_missing)
        out[stat.text] = measured.judged(index, group.values(stat, schema))
    return out


def summary(values: np.ndarray) -> tuple[float, float]:
    """(mean, standard error of the mean) of per-release shares."""
    spread = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return float(np.mean(values)), spread / math.sqrt(len(values))
