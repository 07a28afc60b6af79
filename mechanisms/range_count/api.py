"""Private range counting: plan from public inputs, measure once, answer by post-processing.

`range_count` releases noisy answers to a workload of intervals, boxes and halfspaces over a
public support, with each answer's predicted (public, data-independent) variance, the
accounting, and a released structure from which `answer_queries` answers any new range later
at no privacy cost. `range_count_release` is the release.py entry point ("range_count").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from mechanisms.accounting import zcdp_to_approx_dp
from mechanisms.arrays import AnyArray
from mechanisms.chunks import ChunkedTable, EngineTable, table_chunks
from mechanisms.counting.tally import frames_tally
from mechanisms.errors import MechanismError, parsed_json
from mechanisms.noise import resolve_rng
from mechanisms.range_count.core import IdentityPlan, PerQueryPlan, PrivacyTarget, privacy_target
from mechanisms.range_count.grid_tally import grid_tally
from mechanisms.range_count.inputs import (
    Support,
    all_prefixes,
    grid_support,
    incidence,
    load_workload,
    normalize_queries,
    parse_grid,
    point_support,
    random_boxes,
    random_halfspaces,
    workload_kinds,
)
from mechanisms.range_count.intervals import (
    Plan,
    QueryAnswers,
    answer_with_intervals,
    answered_sets,
    answers_csv,
)
from mechanisms.range_count.mn12 import N_MIN, QUANTILE, MN12Plan, laplace_accounting
from mechanisms.range_count.path_tree import PathTreePlan
from mechanisms.range_count.tree import TreePlan
from mechanisms.release import ReleaseOutput, json_bytes
from mechanisms.release_request import MechanismInputs
from mechanisms.schema import CHUNK_ROWS, NumericColumn

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource
    from mechanisms.release import Progress
    from mechanisms.schema import Schema


MECHANISM_NAMES = ("auto", "mn12", "mn12_laplace", "tree", "path_tree", "identity", "per_query")
ESTIMATORS = ("auto", "chain", "gls")
GLS_FLOPS = 3e11  # `auto` uses GLS for mn12 while its dense solves stay below this
STRUCTURE_FORMAT = "dpportal.range_count/1"
MISSING_POLICY = "rows with a missing value in any of the columns are not counted"

PLAN_TYPES: dict[str, type[Plan]] = {
    "mn12": MN12Plan,
    "tree": TreePlan,
    "path_tree": PathTreePlan,
    "identity": IdentityPlan,
    "per_query": PerQueryPlan,
    "mn12_laplace": MN12Plan,
}


@dataclass
class RangeCountResult:
    """Noisy answers, their predicted variances, the accounting and the released structure.

    `intervals` holds each answer's 95% interval (noise plus grid rounding).
    """

    answers: AnyArray
    variance: AnyArray
    mechanism: str
    accounting: dict[str, Any]
    structure: dict[str, Any]
    predicted: dict[
        str, Any
    ]  # mechanism -> predicted mean variance (public), for the candidates planned
    intervals: QueryAnswers


def shatter_exponent(queries: list[dict[str, Any]], dim: int) -> int:
    """Exponent d of the shatter function: halfspaces in R^dim -> dim, boxes -> 2 dim."""
    return max(dim if q["type"] == "halfspace" else 2 * dim for q in queries)


def candidate_mechanisms(
    support: Support, queries: list[dict[str, Any]], target: PrivacyTarget, reusable: bool = True
) -> list[Any]:
    """What `auto` compares: baselines, the tree on grids, path_tree and mn12 for halfspaces.

    With `reusable` (a release that promises to answer new ranges later), only methods whose
    structure answers any range: per_query, which answers only its own ranges, is left out.
    """
    names = ["identity"] if reusable else ["identity", "per_query"]
    if support.grid_shape is not None:
        names.append("tree")
    if "halfspace" in workload_kinds(queries):
        names.append("path_tree")
        if target.kind == "zcdp":
            names.append("mn12")
    return names


def build_plan(
    name: str,
    support: Support,
    queries: list[dict[str, Any]],
    bits: AnyArray,
    target: PrivacyTarget,
    *,
    quantile: float = QUANTILE,
    n_min: int = N_MIN,
    progress: Progress | None = None,
) -> Plan:
    """Public plan of one mechanism: depends on support, workload and budget, never on counts."""
    if name == "identity":
        return IdentityPlan.build(support.n, target)
    if name == "per_query":
        return PerQueryPlan.build(bits, support.n, target)
    if name == "tree":
        return TreePlan.build(support.grid_shape, target)
    if name == "path_tree":
        return PathTreePlan.build(support.points, target)
    if name in ("mn12", "mn12_laplace"):
        if target.kind != "zcdp":
            raise MechanismError(
                f"{name} needs delta > 0 (it is an (epsilon, delta) mechanism); "
                "use tree or identity for pure epsilon-DP"
            )
        return MN12Plan.build(
            bits,
            support.n,
            shatter_exponent(queries, support.dim),
            target,
            quantile=quantile,
            n_min=n_min,
            progress=progress,
            laplace=name == "mn12_laplace",
        )
    raise MechanismError(f"mechanism ({name!r}) must be one of {', '.join(MECHANISM_NAMES)}")


def choose_plan(
    mechanism: str,
    support: Support,
    queries: list[dict[str, Any]],
    bits: AnyArray,
    target: PrivacyTarget,
    reusable: bool = True,
    **options: Any,
) -> tuple[Plan, dict[str, float]]:
    """The named plan, or for `auto` the candidate with the smallest predicted mean variance."""
    names = (
        candidate_mechanisms(support, queries, target, reusable)
        if mechanism == "auto"
        else [mechanism]
    )
    plans: dict[str, Plan] = {}
    predicted: dict[str, float] = {}
    for name in names:
        plans[name] = build_plan(name, support, queries, bits, target, **options)
        predicted[name] = float(np.mean(plans[name].predicted_variance(bits)))
    best = min(names, key=lambda k: predicted[k])
    return plans[best], predicted


def _check_options(mechanism: str, estimator: str, quantile: float, n_min: int) -> None:
    if mechanism not in MECHANISM_NAMES:
        raise MechanismError(
            f"mechanism ({mechanism!r}) must be one of {', '.join(MECHANISM_NAMES)}"
        )
    if estimator not in ESTIMATORS:
        raise MechanismError(f"estimator ({estimator!r}) must be one of {', '.join(ESTIMATORS)}")
    if not 0 < quantile <= 1:
        raise MechanismError(f"quantile ({quantile}) must be in (0, 1]")
    if not isinstance(n_min, int) or n_min < 1:
        raise MechanismError(f"n_min ({n_min!r}) must be an integer >= 1")


def range_count(
    counts: AnyArray,
    support: Support,
    queries: list[dict[str, Any]],
    *,
    epsilon: float,
    delta: float,
    neighbouring: str = "replace-one",
    mechanism: str = "auto",
    estimator: str = "auto",
    quantile: float = QUANTILE,
    n_min: int = N_MIN,
    rng: RandomSource | None = None,
    progress: Progress | None = None,
    reusable: bool = True,
) -> RangeCountResult:
    """Answer a workload of range counts over a public support under differential privacy.

    Privacy: unit = one record (its support point's count changes by one); with delta > 0 the
    release is rho-zCDP with the largest rho meeting (epsilon, delta) (discrete Gaussian noise,
    per-point L2 loss computed exactly from the plan); with delta = 0 it is pure epsilon-DP
    (discrete Laplace; not available for mn12). mn12_laplace (delta > 0) is (epsilon, delta)-DP
    by advanced composition of its discrete Laplace releases per point, the max over points.
    Replace-one neighbours halve the per-point budget (sensitivity doubles). The plan reads
    only the support, workload and budget. With `reusable`, `auto` picks only methods that
    answer new ranges later. Each answer carries a 95% interval covering noise plus grid
    rounding (`intervals`), computed from the released structure only.
    """
    _check_options(mechanism, estimator, quantile, n_min)
    target = privacy_target(epsilon=epsilon, delta=delta, neighbouring=neighbouring)
    queries = normalize_queries(queries, support.dim)
    counts = np.asarray(counts, dtype=np.int64)
    if counts.shape != (support.n,) or (counts < 0).any():
        raise MechanismError(f"counts (shape {counts.shape}) must be {support.n} counts >= 0")
    bits = answered_sets(support, queries)
    plan, predicted = choose_plan(
        mechanism,
        support,
        queries,
        bits,
        target,
        reusable,
        quantile=quantile,
        n_min=n_min,
        progress=progress,
    )
    accounting = account(plan, target)
    noisy = plan.measure(counts, resolve_rng(rng))
    estimator = resolve_estimator(estimator, plan, len(bits))
    answers = answer_with_intervals(support, plan, noisy, queries, estimator)
    structure = {
        "format": STRUCTURE_FORMAT,
        "mechanism": plan.name,
        "estimator": estimator,
        "support": support.to_dict(),
        "workload": queries,
        "plan": plan.to_dict(),
        "noisy": _jsonable(noisy),
        "guarantee": accounting,
        "planned_sets": "bounds",  # the plan's workload: `answered_sets`, not the centres alone
    }
    return RangeCountResult(
        answers.estimate, answers.variance, plan.name, accounting, structure, predicted, answers
    )


def resolve_estimator(estimator: str, plan: Any, queries: int) -> str:
    """`auto`: GLS (smaller variance) for path_tree, and for mn12 when its cost is moderate."""
    if estimator != "auto":
        return estimator
    if isinstance(plan, PathTreePlan):
        return "gls"
    if not isinstance(plan, MN12Plan):
        return "chain"  # identity/per_query answer directly; the tree always uses least squares
    flops = sum(len(r.x_points) ** 3 / 3 + queries * len(r.x_points) ** 2 for r in plan.rounds)
    return "gls" if flops <= GLS_FLOPS else "chain"


def account(plan: Any, target: PrivacyTarget) -> dict[str, Any]:
    """Privacy accounting recomputed from the plan's per-point loss; refuses any overspend."""
    if isinstance(plan, MN12Plan) and plan.noise == "laplace":
        return laplace_accounting(plan, target)
    loss = plan.point_loss()
    worst = float(loss.max()) if len(loss) else 0.0
    if worst > target.loss_budget * (1 + 1e-9):
        raise RuntimeError(
            f"internal error: per-point loss {worst} above budget "
            f"{target.loss_budget}; nothing was released"
        )
    factor = 2.0 if target.neighbouring == "replace-one" else 1.0
    out = {
        "unit": "one row of the input table",
        "neighbouring": target.neighbouring,
        "max_point_loss": worst,
        "point_loss_budget": target.loss_budget,
    }
    if target.kind == "zcdp":
        rho = worst * factor / 2.0
        eps = math.inf if math.isinf(rho) else zcdp_to_approx_dp(rho, target.delta)
        out |= {
            "privacy": "zCDP (discrete Gaussian)",
            "rho": rho,
            "epsilon": eps,
            "delta": target.delta,
        }
    else:
        out |= {
            "privacy": "pure epsilon-DP (discrete Laplace)",
            "epsilon": worst * factor,
            "delta": 0.0,
        }
    if isinstance(plan, MN12Plan):
        out["rounds"] = plan.round_stats()
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return np.asarray(value).tolist()


def _arrays(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _arrays(v) for k, v in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [_arrays(v) for v in value]
    return np.asarray(value, dtype=float)


def load_structure(structure: dict[str, Any]) -> tuple[Support, Plan, Any]:
    """(support, plan, noisy) from a released structure; raises MechanismError if malformed."""
    if not isinstance(structure, dict) or structure.get("format") != STRUCTURE_FORMAT:
        raise MechanismError(
            f"structure is not a range-count structure (format must be {STRUCTURE_FORMAT!r})"
        )
    try:
        support = Support.from_dict(structure["support"])
        workload = normalize_queries(structure["workload"], support.dim)
        planned = answered_sets if structure.get("planned_sets") == "bounds" else incidence
        workload_bits = planned(support, workload)
        plan = PLAN_TYPES[structure["mechanism"]].from_dict(
            structure["plan"], workload_bits=workload_bits
        )
        return support, plan, _arrays(structure["noisy"])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, MechanismError):
            raise
        raise MechanismError(f"structure is damaged ({type(exc).__name__}: {exc})") from None


def answer_queries(
    structure: dict[str, Any], queries: list[dict[str, Any]], *, estimator: str | None = None
) -> tuple[AnyArray, AnyArray]:
    """(answers, predicted variances) of new ranges: `answer_intervals` without intervals."""
    answers = answer_intervals(structure, queries, estimator=estimator)
    return answers.estimate, answers.variance


def answer_intervals(
    structure: dict[str, Any], queries: list[dict[str, Any]], *, estimator: str | None = None
) -> QueryAnswers:
    """Answer new ranges from a released structure: post-processing, no privacy cost.

    Returns estimates, noise sds and 95% intervals covering noise plus grid rounding.
    Accuracy is guaranteed only for ranges close to the planned workload (mn12 anchors them
    at the nearest planned range).

    Privacy: post-processing of the released structure; spends nothing.
    """
    support, plan, noisy = load_structure(structure)
    estimator = estimator or structure.get("estimator", "chain")
    if estimator not in ESTIMATORS:
        raise MechanismError(f"estimator ({estimator!r}) must be one of {', '.join(ESTIMATORS)}")
    queries = normalize_queries(queries, support.dim)
    resolved = resolve_estimator(estimator, plan, len(queries))
    return answer_with_intervals(support, plan, noisy, queries, resolved)


# ---------------------------------------------------------------- release.py entry point


def support_from_schema(schema: Schema, columns: Sequence[str], params: dict[str, Any]) -> Support:
    """Support from the schema's public bounds plus a grid (params or schema bins) or points."""
    specs = [schema.column(c) for c in columns]
    bad = [s.name for s in specs if not hasattr(s, "lower")]
    if bad:
        raise MechanismError(f"range counting needs numeric columns; {bad[0]!r} is not numeric")
    # `bad` is empty here, so every spec is a NumericColumn (mypy cannot narrow via hasattr).
    bounds = [range_bounds(s) for s in cast(list[NumericColumn], specs)]
    if params.get("points") is not None:
        return point_support(columns, bounds, params["points"])
    grid = params.get("grid")
    if grid is None:
        shape = tuple(s.n_bins for s in cast(list[NumericColumn], specs))
    elif isinstance(grid, str):
        shape = parse_grid(grid, len(columns))
    else:
        shape = parse_grid("x".join(str(g) for g in grid), len(columns))
    return grid_support(columns, bounds, shape)


def range_bounds(spec: NumericColumn) -> tuple[float, float]:
    """The support's bounds: the schema's, half a unit wider for a whole-number column.

    Grid points then sit on the whole numbers, so a range [3, 5] counts 3, 4 and 5.
    """
    if spec.integer:
        return spec.lower - 0.5, spec.upper + 0.5
    return spec.lower, spec.upper


def workload_from_params(
    support: Support, params: dict[str, Any], rng: RandomSource
) -> list[dict[str, Any]]:
    """The public workload: given queries plus generated halfspaces, boxes or prefixes."""
    workload = params.get("workload") or []
    queries = (
        read_queries_file(workload, support.columns)
        if isinstance(workload, str)
        else list(workload)
    )
    if params.get("random_halfspaces"):
        queries += random_halfspaces(support, int(params["random_halfspaces"]), rng)
    if params.get("random_boxes"):
        queries += random_boxes(support, int(params["random_boxes"]), rng)
    if params.get("prefixes"):
        queries += all_prefixes(support)
    return normalize_queries(queries, support.dim)


def support_counts(
    support: Support,
    data: pd.DataFrame | ChunkedTable | EngineTable,
    columns: Sequence[str],
    schema: Schema,
) -> AnyArray:
    """Records per support point: the grid tally (`mechanisms.counting.tally.GridTally`).

    From a DataFrame or a ChunkedTable, one chunk at a time; from an EngineTable, computed by
    its engine where the table lives (only the counts per support point come back). The same
    code or SQL places each row on every engine. Rows with a missing value in any of `columns`
    are not counted (see `Support.counts`).
    """
    tally = grid_tally(support, schema)
    if list(columns) != tally.columns:
        raise MechanismError("the support's columns must be the release's columns")
    if isinstance(data, EngineTable):
        return data.tally(tally)
    return frames_tally(tally, (piece for _start, piece in table_chunks(data, CHUNK_ROWS)))


def range_count_release(
    inputs: MechanismInputs[pd.DataFrame | ChunkedTable | EngineTable],
) -> ReleaseOutput:
    """release.py entry: answers.csv and structure.json for a workload of range counts.

    Privacy: as `range_count`; unit one row, under the declared neighbouring relation.
    `data` is a DataFrame or a ChunkedTable (counted in one pass), or an EngineTable whose
    engine counts the grid where the table lives (`support_counts`): the noise is added here.
    """
    schema, columns, params = inputs.schema, inputs.columns, inputs.params
    support = support_from_schema(schema, columns, params)
    queries = workload_from_params(support, params, inputs.rng)
    counts = support_counts(support, inputs.data, columns, schema)
    result = range_count(
        counts,
        support,
        queries,
        epsilon=inputs.epsilon,
        delta=inputs.delta,
        neighbouring=inputs.neighbouring,
        mechanism=params.get("mechanism", "auto"),
        estimator=params.get("estimator", "auto"),
        quantile=float(params.get("quantile", QUANTILE)),
        n_min=int(params.get("n_min", N_MIN)),
        rng=inputs.rng,
        progress=inputs.progress,
    )
    public_params: dict[str, Any] = {
        k: params[k]
        for k in (
            "grid",
            "mechanism",
            "estimator",
            "quantile",
            "n_min",
            "random_halfspaces",
            "random_boxes",
            "prefixes",
        )
        if k in params
    }
    parameters: dict[str, Any] = {
        "columns": list(columns),
        **public_params,
        "chosen_mechanism": result.mechanism,
        "missing_values": MISSING_POLICY,
        "queries": len(queries),
    }
    files = {
        "answers.csv": answers_csv(queries, result.intervals, support).encode(),
        "structure.json": json_bytes(result.structure),
    }
    trace = {
        "predicted_mean_variance": result.predicted,
        "chosen": result.mechanism,
        "rounds": result.accounting.get("rounds", []),
    }
    return ReleaseOutput(
        files=files, manifest={"parameters": parameters}, trace=trace, spent=result.accounting
    )


def read_queries_file(path: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Queries from a JSON or CSV file (CSV when the name ends in .csv)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise MechanismError(f"query file ({path!r}) cannot be read: {reason}") from None
    return load_workload(text, tuple(columns), fmt="csv" if path.endswith(".csv") else "json")


def range_query_csv(structure_path: str, query_path: str, estimator: str | None = None) -> str:
    """Command line `range-query`: answers to new queries from a saved structure, as CSV text."""
    try:
        structure = parsed_json(Path(structure_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "msg", None) or type(exc).__name__
        raise MechanismError(
            f"structure file ({structure_path!r}) cannot be read as JSON: {reason}"
        ) from None
    support, _, _ = load_structure(structure)
    queries = normalize_queries(read_queries_file(query_path, support.columns), support.dim)
    answers = answer_intervals(structure, queries, estimator=estimator)
    return answers_csv(queries, answers, support)
