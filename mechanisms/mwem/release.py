"""MWEM, the mechanism: ``mwem`` and ``measure_all``, and ``run_mwem`` that writes a release.

They hold the records only to hand them to ``measure`` (the one part that touches data) and
read their number, which is public under replace-one; the rest is ``plan`` (budget, from
public values), ``fit`` and ``distribution`` (post-processing of the noisy measurements).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mechanisms.accounting import check_epsilon, check_neighbouring, float_at_most, noise_scale
from mechanisms.accuracy import CONFIDENCE, count_intervals
from mechanisms.arrays import AnyArray
from mechanisms.chunks import EngineTable
from mechanisms.errors import MechanismError
from mechanisms.mwem.distribution import QUICK_CELLS, FactoredDistribution, query_answer
from mechanisms.mwem.fit import (
    final_targets,
    independent_weights,
    joint_weights,
    mw_update,
    refit,
    target_floor,
)
from mechanisms.mwem.least_squares import fit_least_squares
from mechanisms.mwem.measure import (
    TrueAnswers,
    expected_abs_noise,
    marginal_sensitivity,
    measure_one_way,
    measure_query,
    noisy_row_count,
    select_query,
    selection_candidates,
)
from mechanisms.mwem.plan import (
    MAX_DEFAULT_ROUNDS,
    SELECT_FRACTION,
    MwemPlan,
    RoundSchedule,
    check_counts,
    check_dense_fits,
    check_noise_fits,
    check_options,
    count_epsilon,
    epsilon_left,
    epsilon_share,
    initial_fraction,
    measures_joint,
    plan_budget,
    round_split,
)
from mechanisms.mwem.structural import (
    rule_text,
    structural_cells,
    unsupported_cells,
    zero_cells,
)
from mechanisms.noise import check_count_noise, resolve_rng
from mechanisms.release import DEFAULT_SYNTHETIC_ROWS, ReleaseOutput, csv_bytes, json_bytes
from mechanisms.release_request import MechanismInputs
from mechanisms.schema import NumericColumn, Schema
from mechanisms.workload import Query, expand_workload, load_workload, marginals_spec

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


DEFAULT_MEMORY_CELLS = 25_000_000  # float64 cells per group: 200 MB


@dataclass
class MwemResult:
    """What MWEM releases: the fitted distribution, its noisy measurements and a trace.

    Everything here is differentially private (measurements) or post-processing of it.
    """

    distribution: FactoredDistribution
    n: int
    measurements: list[dict[str, Any]] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    budget: dict[str, Any] = field(default_factory=dict)
    # rounds in which the memory budget (memory_cells) left out at least one query: public
    left_out_rounds: int = 0
    # the "(missing)"/"(other)" (column, cell) pairs emptied (``structural``): public, a
    # function of the noisy measurements
    zeroed: list[tuple[int, int]] = field(default_factory=list)


def mwem(
    codes: AnyArray | TrueAnswers,
    shape: tuple[int, ...],
    workload: list[Query],
    *,
    epsilon: float,
    rounds: int | None = None,
    neighbouring: str = "replace-one",
    init_fraction: float | None = None,
    select_fraction: float = SELECT_FRACTION,
    mw_passes: int | None = None,
    output: str = "last",
    update: str = "damped",
    dense: bool = False,
    memory_cells: int = DEFAULT_MEMORY_CELLS,
    quick_cells: int | None = QUICK_CELLS,
    rng: RandomSource | None = None,
    progress: Callable[[int, int], None] | None = None,
    structural: dict[int, list[int]] | None = None,
) -> MwemResult:
    """Fit a synthetic-data distribution to ``workload`` with MWEM.

    Each round selects among ``selection_candidates(workload)``: the workload and the pairs
    inside its marginals of three or more columns.
    ``codes`` are the encoded records (n × d cell indices), or their ``TrueAnswers`` (from a
    counting engine's cell counts), ``shape`` the public domain shape
    from the schema. Budget split (the whole ε, nothing else is spent):
    ``init_fraction·ε`` measures every 1-way marginal (the start is their product; 0 starts
    from uniform), then each of T rounds spends ``select_fraction`` of ``(1 - init_fraction)·ε/T``
    on selecting a query (exponential mechanism, score = L1 error of the current model minus the
    expected L1 size of the measurement noise) and the rest on measuring it with discrete
    Laplace noise. ``init_fraction=0, select_fraction=0.5`` is the paper's ε/(2T) split.
    The shares, T and the noise scales are ``plan_budget``'s (``mechanisms.mwem.plan``); when
    the full table is small against n·ε (``plan.measures_joint``) the default plan measures it
    once with the whole ε instead (``_joint_release``).
    In the default plan (neither ``rounds`` nor ``init_fraction`` given) the rounds anneal:
    after a round measured at noise level (``_noise_level``) later rounds get more ε, so there
    may be fewer than the plan's (``plan.RoundSchedule``); the budget record lists each
    round's ε. After each measurement, ``mw_passes`` multiplicative-weights passes over all
    measurements so far (default: see ``refit``); before the last round's, the targets are
    made to agree on every 1-way marginal, and a marginal's cells aim at their noisy value
    with no floor (``fit.final_targets``), in passes of half steps (``fit.refit``); then the
    "(missing)" and "(other)" cells the noisy counts do not tell from empty (``structural``:
    each column's such cells, ``structural.structural_cells``) are emptied
    (``structural.zero_cells``), and the model is fitted to every measurement at once by
    weighted least squares (``least_squares``), which keeps them empty. Every plan returns its
    model with those cells emptied (``_emptied``; the pairs in ``zeroed`` of the result).
    ``update="damped"`` (default) moves each cell by √(target / current), clipped; ``"paper"`` is
    the paper's A(x) ← A(x)·exp(q(x)·(m − q(A))/(2n)), which needs many more passes.
    ``output="last"`` returns the last iterate, ``"average"`` the average of the iterates
    (the analysed estimator; needs the dense representation).
    ``quick_cells``: blocks of the model whose whole table would have more cells are kept as
    a junction tree of cliques (``FactoredDistribution.join``), the same distribution at a
    fraction of the time and memory (tables above 2^22 cells, benchmarks/mwem_peers.py:
    docs/mwem.md); ``None`` keeps every block one whole table. ``memory_cells`` bounds the
    largest table a query may need; ``left_out_rounds`` of the result counts the rounds in which
    it left out at least one query. That count is public: it is a function of the earlier
    selections (ε-DP), the public domain shape, workload and limits only, never of the data,
    so publishing it costs no budget. How the model is held is post-processing: the
    measurements and selections, and their ε, do not depend on it.

    Privacy: unit = one record; pure ε-DP by sequential composition under ``neighbouring``
    (annealed rounds: each round's ε from earlier noisy answers, under a total fixed in
    advance and never exceeded, ``plan.RoundSchedule``).
    Sensitivities: replace-one: a marginal's cell vector has L1 sensitivity 2 (one cell −1,
    another +1), so does its L1-error score; a box count and its absolute error have 1; the
    d initial 1-way marginals jointly have L1 sensitivity 2d. add-remove: all of these are
    halved (1, 1, d), and n is not public: by default (no rounds, no init_fraction given)
    ``COUNT_FRACTION``·ε first buys a noisy row count (sensitivity 1), the n of the plan and
    the fit; with rounds or init_fraction given, n is estimated from the noisy 1-way marginals.
    """
    rng = resolve_rng(rng)
    check_epsilon(epsilon)  # before the default split divides by it
    workload = selection_candidates(workload)  # public: the workload and pairs inside it
    check_neighbouring(neighbouring)
    true = codes if isinstance(codes, TrueAnswers) else TrueAnswers(codes, shape)
    # n: public under replace-one; under add-remove the default plan's noisy row count, else
    # (None) the estimate from the noisy 1-way marginals
    eps_count = count_epsilon(epsilon, neighbouring, rounds, init_fraction)
    rest = epsilon_left(epsilon, eps_count)
    if eps_count:  # refuse bad options before the count is drawn
        check_options(neighbouring, 0.0, select_fraction, output, update, workload, rounds)
        check_counts(1, mw_passes=mw_passes, memory_cells=memory_cells, quick_cells=quick_cells)
        check_count_noise(noise_scale(1, eps_count), epsilon)
    public_n = (
        true.rows
        if neighbouring == "replace-one"
        else (noisy_row_count(true, eps_count, rng) if eps_count else None)
    )
    if public_n is not None and measures_joint(
        public_n, rest, shape, workload, neighbouring, rounds, init_fraction
    ):
        check_options(neighbouring, 0.0, select_fraction, output, update, workload, rounds)
        check_counts(
            public_n, mw_passes=mw_passes, memory_cells=memory_cells, quick_cells=quick_cells
        )
        plan = plan_budget(public_n, epsilon, shape, workload, neighbouring)
        check_noise_fits(epsilon, 0.0, len(shape), plan.marginal_l1, plan.eps_measure)
        return _emptied(_joint_release(true, plan, rng, progress), shape, structural)
    requested_fraction = init_fraction  # None: plan_budget's default plan decides
    init_fraction = initial_fraction(
        public_n, rest, shape, workload, neighbouring, init_fraction, rounds, bool(eps_count)
    )
    check_options(neighbouring, init_fraction, select_fraction, output, update, workload, rounds)
    # under add-remove an empty table must run like any other
    rows = 1 if public_n is None else public_n
    check_counts(
        rows, rounds=rounds, mw_passes=mw_passes, memory_cells=memory_cells, quick_cells=quick_cells
    )
    marginal_l1 = marginal_sensitivity(neighbouring)
    eps_init = epsilon_share(rest, init_fraction)
    # refuse a too small ε before any draw: the most rounds the default could choose
    most = 0 if init_fraction == 1 else rounds or min(len(workload), MAX_DEFAULT_ROUNDS)
    worst = round_split(rest, eps_init, most, select_fraction)
    check_noise_fits(epsilon, eps_init, len(shape), marginal_l1, worst[1])
    n, one_way, start, init_scale = measure_one_way(true, public_n, eps_init, neighbouring, rng)
    if output == "average":
        dense = check_dense_fits(shape, memory_cells)
    plan = plan_budget(
        n,
        epsilon,
        shape,
        workload,
        neighbouring,
        rounds=rounds,
        init_fraction=requested_fraction,
        select_fraction=select_fraction,
    )
    # no rounds: the independent-marginals release (counts clipped at half a row, not raised)
    model = FactoredDistribution.independent(
        start if plan.rounds else independent_weights(one_way), dense=dense
    )
    result = MwemResult(model, n, budget=_spent_budget(plan, []))
    for a, noisy in enumerate(one_way):
        result.measurements.append(_measurement_record(Query((a,)), noisy, init_scale))
    measured = [(Query((a,)), m / n, target_floor(init_scale, n)) for a, m in enumerate(one_way)]
    scales = [init_scale] * len(one_way)  # each measurement's noise scale, as ``measured``
    iterate_sum = np.zeros(shape) if output == "average" else None
    schedule = RoundSchedule(plan, anneals=rounds is None and requested_fraction is None)
    spent: list[tuple[float, float]] = []
    for t in range(plan.rounds):
        eps_select, eps_measure, last = schedule.next_round()
        spent.append((eps_select, eps_measure))
        query, left_out = select_query(
            model,
            true,
            workload,
            n,
            eps_select,
            eps_measure,
            marginal_l1,
            memory_cells,
            rng,
            whole_cells=quick_cells,
        )
        result.left_out_rounds += left_out
        noisy, scale = measure_query(true, query, eps_measure, marginal_l1, rng)
        predicted = query_answer(query, model.marginal(query.attrs))
        before = _error_before(query, noisy, scale, predicted, n, shape)
        result.measurements.append(_measurement_record(query, noisy, scale))
        measured.append((query, noisy / n, target_floor(scale, n)))
        scales.append(scale)
        model.join(query.attrs, quick_cells)
        # the last round's passes aim at targets that agree on every 1-way marginal, unfloored
        targets = final_targets(measured, scales, shape) if last else measured
        moved = targets is not measured
        refit(model, targets, mw_passes, update, last_round=last, every_target=moved)
        if last and update == "damped" and iterate_sum is None:
            # the structural rule first: the fit then keeps those cells empty (least_squares)
            zero_cells(model, unsupported_cells(result.measurements, shape, structural or {}))
            fit_least_squares(model, targets, scales, n)
        if iterate_sum is not None:
            iterate_sum += model.to_dense()
        result.trace.append(_trace_entry(t, query, noisy, model, measured, before))
        if progress is not None:
            progress(t + 1, t + 1 if last else plan.rounds)
        if last:
            break
        if _noise_level(query, predicted, model, before[1]):
            schedule.noise_level_round()
    result.rounds, result.budget = len(spent), _spent_budget(plan, spent)
    if iterate_sum is not None and spent:  # no rounds: the start is the only iterate
        result.distribution = FactoredDistribution(shape, [(tuple(range(len(shape))), iterate_sum)])
    return _emptied(result, shape, structural)


def _emptied(
    result: MwemResult, shape: tuple[int, ...], structural: dict[int, list[int]] | None
) -> MwemResult:
    """The result with its empty-looking structural cells emptied, whatever the plan.

    The cells are those whose noisy counts do not tell them from empty
    (``structural.unsupported_cells``); after the least-squares fit, which already kept them
    empty, this changes nothing. Post-processing of the measurements only.
    """
    result.zeroed = unsupported_cells(result.measurements, shape, structural or {})
    zero_cells(result.distribution, result.zeroed)
    return result


def _noise_level(query: Query, predicted: AnyArray, model: Any, noise_level: float) -> bool:
    """Whether the round measured at noise level: it moved the model, but by less than its noise.

    The fit moved the model's answer to ``query`` (``predicted`` before the round) by a total
    variation of at most ``noise_level``, the part of the measurement's gap its expected
    noise explains (``_error_before``). A fit that left the model as it was (the
    measurement agreed with it within the fit's tolerance, ``fit._SETTLED``) says nothing
    about the round's ε: not noise-level. Tuned on the tune half (docs/mwem.md, "Budget
    annealing"): counting those rounds too cut movies' 20 rounds to 11 at ε 10 and doubled
    its 2-way TVD. Post-processing of noisy answers only.
    """
    after = query_answer(query, model.marginal(query.attrs))
    moved = 0.5 * float(np.abs(np.asarray(after) - predicted).sum())
    return 0 < moved <= noise_level


def _spent_budget(plan: MwemPlan, spent: list[tuple[float, float]]) -> dict[str, Any]:
    """The plan's budget record with what the rounds spent.

    Their number, and each round's selection and measurement ε as lists (``RoundSchedule``:
    equal unless annealed).
    """
    return {
        **plan.budget,
        "rounds": len(spent),
        "per_round_select": [select for select, _ in spent],
        "per_round_measure": [measure for _, measure in spent],
    }


def _joint_release(
    true: TrueAnswers,
    plan: MwemPlan,
    rng: RandomSource,
    progress: Callable[[int, int], None] | None,
) -> MwemResult:
    """MWEM's release under a ``measures_joint`` plan: the full table, measured once.

    The model is the noisy table projected onto tables of n rows (``fit.joint_weights``, every
    cell kept possible); the one measurement is recorded as round 1, with no selection. The
    options of the fit (mw_passes, update, output, dense, memory_cells) have nothing to act on:
    the model is one dense table of at most ``plan.JOINT_MAX_CELLS`` (module constant) cells.
    Privacy: ``measure_query`` at ``plan.eps_measure``, the whole ε (after the add-remove default
    plan's row count): the full table is a marginal, of L1 sensitivity ``plan.marginal_l1``.
    """
    shape = true.shape
    query = Query(tuple(range(len(shape))))
    noisy, scale = measure_query(true, query, plan.eps_measure, plan.marginal_l1, rng)
    weights = joint_weights(noisy, plan.n).reshape(shape)
    uniform = FactoredDistribution.independent([np.ones(k) for k in shape])
    predicted = query_answer(query, uniform.marginal(query.attrs))
    before = _error_before(query, noisy, scale, predicted, plan.n, shape)
    model = FactoredDistribution(shape, [(query.attrs, weights)])
    result = MwemResult(
        model, plan.n, rounds=1, budget=_spent_budget(plan, [(0.0, plan.eps_measure)])
    )
    result.measurements.append(_measurement_record(query, noisy, scale))
    measured = [(query, noisy / plan.n, target_floor(scale, plan.n))]
    result.trace.append(_trace_entry(0, query, noisy, model, measured, before))
    if progress is not None:
        progress(1, 1)
    return result


def measure_all(
    codes: AnyArray,
    shape: tuple[int, ...],
    workload: list[Query],
    *,
    epsilon: float,
    neighbouring: str = "replace-one",
    mw_passes: int = 20,
    rng: RandomSource | None = None,
) -> FactoredDistribution:
    """The non-adaptive baseline: measure every workload query at ε/|W|, then fit by MW passes.

    Privacy: unit = one record; pure ε-DP by sequential composition over the |W| queries, each
    with discrete Laplace noise of scale Δ_q·|W|/ε (Δ_q as in ``mwem``). Replace-one only (the
    fit uses the public n). Its targets are floored at the whole noise scale, which suits its
    tiny per-query ε best (MWEM's smaller floor raises this baseline's relative entropy).
    """
    rng = resolve_rng(rng)
    check_epsilon(epsilon)
    if neighbouring != "replace-one":
        raise MechanismError(f"neighbouring ({neighbouring!r}) must be replace-one here")
    true, n = TrueAnswers(codes, shape), len(codes)
    eps_query = (
        math.inf if math.isinf(epsilon) else float_at_most(Fraction(epsilon) / len(workload))
    )
    check_count_noise(noise_scale(2, eps_query), epsilon)
    model = FactoredDistribution.independent([np.ones(k) for k in shape])
    measured = []
    for query in workload:
        noisy, scale = measure_query(true, query, eps_query, 2, rng)
        measured.append((query, noisy / n, target_floor(scale, n, share=1.0)))
        model.join(query.attrs)
    for _ in range(mw_passes):
        for query, target, floor in measured:
            mw_update(model, query, target, floor)
    return model


def _measurement_record(query: Query, noisy: AnyArray, scale: float) -> dict[str, Any]:
    """A measurement as published, with each count's 95% interval.

    ``accuracy.count_intervals`` of its discrete Laplace noise of ``scale`` (post-processing).
    The noise of a measurement is drawn after its query was selected, so the interval holds
    whichever query was chosen.
    """
    lower, upper = count_intervals(np.asarray(noisy, dtype=np.int64), scale)
    return {
        "query": query,
        "noisy_answer": [int(v) for v in noisy],
        "noise_scale": scale,
        "ci_lower": [int(v) for v in lower],
        "ci_upper": [int(v) for v in upper],
        "confidence": CONFIDENCE,
    }


def _trace_entry(
    t: int,
    query: Query,
    noisy: AnyArray,
    model: Any,
    measured: Any,
    before: tuple[float, float],
) -> dict[str, Any]:
    """Round t's public trace (post-processing of DP values).

    The selected query, its noisy answer, the largest gap between the model and any noisy
    measurement so far (fraction of n), and ``before``: the estimated error of the selected
    query under the model *before* this round (half the L1 gap between its noisy answer and the
    model's, as a share of n: a total variation distance), with the part of that gap the noise
    alone explains (``noise_level``). Selection picks the query the model gets (about) most
    wrong, so the estimate falls towards the noise level as the model improves.
    """
    gap = max(
        float(np.abs(target - query_answer(q, model.marginal(q.attrs))).max())
        for q, target, _ in measured
    )
    return {
        "round": t + 1,
        "query": query,
        "noisy_answer": [int(v) for v in noisy],
        "max_error_estimate": gap,
        "selected_error_estimate": before[0],
        "noise_level": before[1],
    }


def _error_before(
    query: Query, noisy: AnyArray, scale: float, predicted: AnyArray, n: int, shape: tuple[int, ...]
) -> tuple[float, float]:
    """(½‖noisy/n − predicted‖₁, ½·cells·E|noise|/n).

    ``predicted``: the model's answer before it is refit.
    """
    gap = 0.5 * float(np.abs(np.asarray(noisy) / n - predicted).sum())
    return gap, 0.5 * query.cells(shape) * expected_abs_noise(scale) / n


CELL_ORDER = "a marginal's answers run over its columns' bins in row-major order (last fastest)"
RELEASE_PARAMS = {
    "rounds",
    "workload",
    "marginals",
    "init_fraction",
    "select_fraction",
    "mw_passes",
    "output",
    "update",
    "memory_cells",
    "quick_cells",
}
WHOLE_TABLES = "none"  # quick_cells that keeps every block of the model one whole table


def _true_answers(
    data: pd.DataFrame | EngineTable, schema: Schema, columns: list[str]
) -> TrueAnswers:
    """The exact marginals MWEM measures, from the encoded records or an engine's cell counts.

    An engine's table is read as its cell counts: the worker holds one array of the domain's
    size, never a row per record (10^8 rows rebuilt as records held 4 GB).
    """
    if isinstance(data, EngineTable):
        return TrueAnswers.from_counts(schema.cell_counts(data, columns))
    return TrueAnswers(schema.encode(data, columns), schema.domain_shape(columns))


def run_mwem(inputs: MechanismInputs[pd.DataFrame | EngineTable]) -> ReleaseOutput:
    """The registry entry: encode, run MWEM, decode synthetic rows, package the files.

    The synthetic rows number ``n`` (public, or estimated from the noisy measurements), at
    most DEFAULT_SYNTHETIC_ROWS. MWEM reads the whole table, or an EngineTable's cell counts
    (`_true_answers`). The "(missing)" and "(other)" cells that the noisy measurements do not
    tell from empty have zero mass (``mwem``'s ``structural``: post-processing; the manifest
    states the rule and names the cells).
    """
    params, schema, columns, rng = inputs.params, inputs.schema, list(inputs.columns), inputs.rng
    unknown = sorted(set(params) - RELEASE_PARAMS)
    if unknown:
        raise MechanismError(
            f"parameter ({unknown[0]!r}) is not used by mwem; allowed: {sorted(RELEASE_PARAMS)}"
        )
    if inputs.delta != 0:
        raise MechanismError(f"delta ({inputs.delta}) must be 0: mwem is pure epsilon-DP")
    shape = schema.domain_shape(columns)
    spec = workload_spec(params, len(columns))
    workload = expand_workload(
        spec, columns, shape, {c for c in columns if isinstance(schema.column(c), NumericColumn)}
    )
    options = {
        k: params[k]
        for k in RELEASE_PARAMS - {"workload", "marginals", "quick_cells"}
        if k in params
    }
    quick_cells = parse_quick_cells(params.get("quick_cells", QUICK_CELLS))
    structural = structural_cells(schema, columns)
    result = mwem(
        _true_answers(inputs.data, schema, columns),
        shape,
        workload,
        epsilon=inputs.epsilon,
        neighbouring=inputs.neighbouring,
        rng=rng,
        progress=inputs.progress,
        quick_cells=quick_cells,
        structural=structural,
        **options,
    )
    zeroed = result.zeroed
    rows = min(result.n, DEFAULT_SYNTHETIC_ROWS)
    synthetic = schema.decode(result.distribution.sample(rows, rng), columns, rng)
    measurements = [dict(m, query=m["query"].describe(columns)) for m in result.measurements]
    trace = [dict(t, query=t["query"].describe(columns)) for t in result.trace]
    empty = {
        "rule": rule_text(),
        "zeroed": [f"{columns[a]}: {schema.axis_labels(columns[a])[c]}" for a, c in zeroed],
    }
    manifest = {
        "parameters": {
            **options,
            "rounds": result.rounds,
            "workload": spec,
            "structural_cells": empty,
            "model_blocks": model_record(
                quick_cells,
                options.get("memory_cells", DEFAULT_MEMORY_CELLS),
                result.left_out_rounds,
                result.rounds,
            ),
        }
    }
    files = {
        "synthetic.csv": csv_bytes(synthetic),
        "measurements.json": json_bytes(
            {"budget_split": result.budget, "cell_order": CELL_ORDER, "measurements": measurements}
        ),
    }
    return ReleaseOutput(
        files=files,
        manifest=manifest,
        trace={"rounds": result.rounds, "trace": trace},
        spent=spent_by(result.budget),
    )


def parse_quick_cells(value: Any) -> int | None:
    """The largest whole table from a parameter: a whole number of cells >= 1, or "none"."""
    if value is None or (isinstance(value, str) and value.strip().lower() == WHOLE_TABLES):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MechanismError(
            f"quick_cells ({value!r}) must be a whole number of cells >= 1 (default "
            f"{QUICK_CELLS}), or {WHOLE_TABLES!r} to keep every block of the model one whole "
            "table"
        )
    return value


def model_record(
    quick_cells: int | None, memory_cells: int, left_out_rounds: int, rounds: int
) -> dict[str, Any]:
    """The manifest's record of how the model was held; a sentence when memory left queries out.

    The largest whole table (``whole_cells``; above it, junction trees), the memory budget,
    in how many rounds that budget left out at least one query, and a note saying so in words
    when it did ("" otherwise). Public: the count is a function of the DP selections, the
    public schema, workload and limits only (``mwem``), so it is published like the rounds.
    """
    note = ""
    if left_out_rounds:
        note = (
            f"In {left_out_rounds} of {rounds} rounds the memory budget left out patterns "
            f"whose model tables would have had more than {memory_cells:,} cells; raising "
            "memory_cells lets them compete, at the cost of memory."
        )
    return {
        "whole_cells": quick_cells,
        "memory_cells": memory_cells,
        "left_out_rounds": left_out_rounds,
        "rounds": rounds,
        "note": note,
    }


def spent_by(budget: dict[str, Any]) -> dict[str, Any]:
    """What a run with this budget record spent: the exact sum of its parts, rounded up to a float.

    Pure epsilon-DP by sequential composition: the row count (the add-remove default plan),
    the 1-way start, then each round's selection and measurement (``_spent_budget``'s lists).
    """
    parts = (
        budget.get("row_count", 0.0),
        budget["initial_one_way"],
        *budget["per_round_select"],
        *budget["per_round_measure"],
    )
    if any(math.isinf(part) for part in parts):
        return {"epsilon": math.inf, "delta": 0.0, **budget}
    total = noise_scale(sum((Fraction(part) for part in parts), Fraction(0)), 1)  # float >= sum
    return {"epsilon": total, "delta": 0.0, **budget}


def workload_spec(params: dict[str, Any], d: int) -> dict[str, Any]:
    """The workload document from the release's parameters.

    Either ``workload`` (a file path or the document) or ``marginals`` k, all k-way marginals
    (default 2, 1 for a single column); both at once are refused.
    """
    if "workload" in params and "marginals" in params:
        raise MechanismError("workload and marginals are both given; pass only one of them")
    if "workload" in params:
        spec = params["workload"]
        return load_workload(spec) if isinstance(spec, str) else spec
    return marginals_spec(params.get("marginals", min(2, d)))
