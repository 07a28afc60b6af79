"""A catalogue row's run takes one MechanismInputs and its plan one PlanInputs (issue 42, item 3).

`signature_problems` reads each function's signature and type hints, so a row whose run or plan
still takes the old ten (or eight) separate arguments is named by this test, not by a TypeError
in the middle of a release. Broken twins: rows planted in the catalogue with the old keyword
signature, with one argument of another type, or with one unannotated argument, are each caught.

The kind of table a run declares (MechanismInputs[...]) must also agree with its row's flags:
a ChunkedTable where `reads_in_chunks`, an EngineTable where `counts_only`, since run_release
hands a row exactly the tables its flags allow.
"""

import inspect
import typing
from dataclasses import replace

import pandas as pd
import pytest

from mechanisms.catalogue import CATALOGUE, MechanismSpec
from mechanisms.chunks import ChunkedTable, EngineTable
from mechanisms.noise import RandomSource
from mechanisms.plans import NoisePlan
from mechanisms.release import Progress, ReleaseOutput
from mechanisms.release_request import MechanismInputs, PlanInputs
from mechanisms.schema import Schema

REAL_ROWS = sorted(n for n, s in CATALOGUE.items() if s.run.__module__.startswith("mechanisms."))


def signature_problems(name: str, spec: MechanismSpec) -> list[str]:
    """What is wrong with a row's run and plan signatures (an empty list: nothing)."""
    problems = []
    for role, function, wanted in (
        ("run", spec.run, MechanismInputs),
        ("plan", spec.plan, PlanInputs),
    ):
        parameters = list(inspect.signature(function).parameters)
        try:
            hints = typing.get_type_hints(function)
        except NameError as exc:  # an annotation names a type imported for type checking only
            hints = {}
            problems.append(f"{name}.{role}'s annotations do not resolve ({exc})")
        types = [typing.get_origin(hints.get(p)) or hints.get(p) for p in parameters]
        if types != [wanted]:
            problems.append(f"{name}.{role} takes {parameters}, not one {wanted.__name__}")
    return problems


def catalogue_problems() -> list[str]:
    return [
        problem for name, spec in CATALOGUE.items() for problem in signature_problems(name, spec)
    ]


def table_kinds(spec: MechanismSpec) -> set[type]:
    """The kinds of table a row's run declares it reads: MechanismInputs[kind | kind ...]."""
    (hint,) = (h for p, h in typing.get_type_hints(spec.run).items() if p != "return")
    (table,) = typing.get_args(hint)
    return set(typing.get_args(table)) or {table}


def flag_problems(name: str, spec: MechanismSpec) -> list[str]:
    kinds = table_kinds(spec)
    wanted = {
        pd.DataFrame: True,
        ChunkedTable: spec.reads_in_chunks,
        EngineTable: spec.counts_only,
    }
    return [
        f"{name}.run {'omits' if needed else 'declares'} {kind.__name__}"
        for kind, needed in wanted.items()
        if (kind in kinds) != needed
    ]


def test_the_catalogue_holds_the_six_mechanisms_this_file_checks():
    assert REAL_ROWS == [
        "dp_schema_estimate",
        "mwem",
        "perturbed_histogram",
        "range_count",
        "smoothed_histogram",
        "statistics",
    ]


@pytest.mark.parametrize("name", REAL_ROWS)
def test_each_row_runs_on_one_mechanism_inputs_and_plans_on_one_plan_inputs(name):
    assert signature_problems(name, CATALOGUE[name]) == []


@pytest.mark.parametrize("name", REAL_ROWS)
def test_each_run_declares_the_tables_its_row_flags_allow(name):
    assert flag_problems(name, CATALOGUE[name]) == []


# ---------------------------------------------------------------- broken twins


def old_run(
    data: pd.DataFrame,
    schema: Schema,
    *,
    columns: list[str],
    params: dict[str, typing.Any],
    epsilon: float,
    delta: float,
    neighbouring: str,
    rng: RandomSource,
    progress: Progress | None,
) -> ReleaseOutput:
    raise AssertionError("never called: the signature check reads it only")


def old_plan(schema, columns, params, *, epsilon, delta, neighbouring, n):  # as old, untyped
    raise AssertionError("never called")


def dict_run(inputs: dict[str, typing.Any]) -> ReleaseOutput:
    raise AssertionError("never called")


def bare_plan(inputs) -> NoisePlan:
    raise AssertionError("never called")


@pytest.mark.parametrize(
    "change, caught",
    [
        ({"run": old_run}, "old_style.run takes ['data', 'schema', 'columns', 'params', 'epsilon'"),
        ({"plan": old_plan}, "old_style.plan takes ['schema', 'columns', 'params', 'epsilon'"),
        ({"run": dict_run}, "old_style.run takes ['inputs'], not one MechanismInputs"),
        ({"plan": bare_plan}, "old_style.plan takes ['inputs'], not one PlanInputs"),
    ],
    ids=["old-run", "old-plan", "run-of-a-dict", "unannotated-plan"],
)
def test_a_planted_row_with_another_signature_is_named(monkeypatch, change, caught):
    assert catalogue_problems() == []  # the honest catalogue, before planting
    twin = replace(CATALOGUE["perturbed_histogram"], name="old_style", **change)
    monkeypatch.setitem(CATALOGUE, "old_style", twin)
    problems = catalogue_problems()
    assert len(problems) == 1 and problems[0].startswith(caught), problems


def frame_only_run(inputs: MechanismInputs[pd.DataFrame]) -> ReleaseOutput:
    raise AssertionError("never called")


@pytest.mark.parametrize(
    "row, change, caught",
    [
        ("statistics", {"reads_in_chunks": True}, ["statistics.run omits ChunkedTable"]),
        (
            "statistics",
            {"counts_only": True, "run": frame_only_run},
            ["statistics.run omits EngineTable"],
        ),
        ("mwem", {"counts_only": False}, ["mwem.run declares EngineTable"]),
        (
            "perturbed_histogram",
            {"run": frame_only_run},
            [
                "perturbed_histogram.run omits ChunkedTable",
                "perturbed_histogram.run omits EngineTable",
            ],
        ),
    ],
    ids=["chunks-not-read", "engine-not-read", "engine-refused", "run-of-frames-only"],
)
def test_a_row_whose_flags_promise_other_tables_is_named(row, change, caught):
    assert flag_problems(row, replace(CATALOGUE[row], **change)) == caught
