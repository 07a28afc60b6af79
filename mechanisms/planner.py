"""One planner for every release kind: the smallest ε whose release reaches a stated accuracy.

The promise
-----------
The planner plans for, and the portal's verdict judges, one statement (`Promise`):

    at least C of the <outputs> lie within ±T <unit> of the truth,

the share taken over the outputs and over the release's randomness (on one release the share
seen swings around it: `kept` allows for that). C is the confidence (default 95%) and T the
target. `accuracy_at` gives, for a release at ε, the smallest such T (the half-width H); the
planner (`plan_epsilon`) bisects on it. What an output and its truth are, per kind:

- perturbed_histogram: each noisy cell count (noisy_counts.csv) against the cell's count:
  the exact discrete Laplace half-width;
- smoothed_histogram: each cell's real-count estimate against the cell's count, from the
  exact binomial law of the synthetic rows, for the hardest spread of the rows over the cells
  of the form "K cells equally full, the others empty" (K = 1..m): whatever the table of that
  form, the expected share of cells within ±H is at least C (`smoothed_half_width`);
- mwem: each count MWEM measures in its rounds (measurements.json) against the true count of
  that cell of the measured table (exact discrete Laplace half-width at the round's scale);
  the synthetic rows' tables are not promised: the verdict measures them;
- range_count: each answer (answers.csv `estimate`) of the release's ranges against the true
  number of rows in the range as asked: noise plus grid rounding, the rounding bounded for
  cells a range cuts holding at most `crowding` times an even share of the rows
  (`range_count.promise`);
- statistics: each statistic of each group (statistics.csv `estimate`) against the statistic
  of the clamped values, in its own unit (rows; the column's unit; rows of rank for
  quantiles), for groups of at least `group_rows` rows of which at most `missing_share` lack
  the value (`statistics.promise`); one promise per statistic, each with its own target.

Person level (the schema names a person column): the release runs at the row-level budget
`persons.mechanism_budget`, and the truth is the table after bounding each person to k rows.

The search (`plan_epsilon`): bisection in log ε over [EPSILON_LOW, cap], on the accuracy
itself (every plan is the mechanism's own public plan, so it uses the split and the scales the
release will use). A setting a mechanism refuses at some ε (noise too large for 64-bit counts)
counts as not reaching the target there. No ε up to the cap: the answer names what the
accuracy is at the cap and the part of it no ε removes (`Promise.floor`: grid rounding, the
sampling of synthetic rows). A target at or above `Promise.typical` (the size of an average
output, when public) is refused: outputs that uncertain say nothing, and the verdict calls a
release whose promise is that wide not usable.

Public inputs only: the schema, the columns, the settings, n (the public row count; under
add-remove the custodian's own count) and the stated assumptions. No data is read and
nothing is spent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mechanisms import persons, plans
from mechanisms.accounting import DEFAULT_NEIGHBOURING, check_delta, check_neighbouring
from mechanisms.accuracy import binomial_tail_half_width, discrete_laplace_half_width
from mechanisms.errors import MechanismError
from mechanisms.release_request import PlanInputs
from mechanisms.schema import Schema

CONFIDENCE = 0.95
EPSILON_CAP = 10.0  # the default largest ε the planner proposes
EPSILON_LOW = 1e-4  # the smallest ε it considers
RATIO = 1.001  # the bisection stops when its bracket is this narrow
DEFAULT_CROWDING = 4.0  # range counts: cut cells at most 4 times as full as an even spread
FALSE_ALARM = 1e-3  # `kept`: chance of calling a kept promise broken, per check
RANGE_SAMPLE = 256  # range counts: answers the promise is computed on (spread over the ranges)
KINDS = ("perturbed_histogram", "smoothed_histogram", "mwem", "range_count", "statistics")


@dataclass(frozen=True)
class Assumptions:
    """The public statements a plan rests on, where the settings and n do not fix the accuracy.

    `crowding`: range counts, how many times an even share of the rows (n / cells) a cell a
    range cuts may hold (the grid rounding grows with it; DEFAULT_CROWDING from the public
    tables of benchmarks/range_crowding.py). `group_rows`:
    statistics, the fewest rows a group holds (None: n / groups, an even split).
    `missing_share`: statistics, the largest share of a group's rows without a value in a
    column that may hold missing values.
    """

    crowding: float = DEFAULT_CROWDING
    group_rows: float | None = None
    missing_share: float = 0.0

    def check(self) -> Assumptions:
        """These assumptions, or a MechanismError saying which is out of range."""
        if not (math.isfinite(self.crowding) and self.crowding >= 0):
            raise MechanismError(f"crowding ({self.crowding}) must be a number >= 0 (1: even)")
        if self.group_rows is not None and not self.group_rows >= 1:
            raise MechanismError(f"group rows ({self.group_rows}) must be at least 1")
        if not 0 <= self.missing_share < 1:
            raise MechanismError(
                f"missing share ({self.missing_share}) must be at least 0 and below 1"
            )
        return self


@dataclass(frozen=True)
class PlanRequest:
    """A release to plan: its kind, schema, columns, settings, n and privacy settings."""

    kind: str
    schema: Schema
    columns: tuple[str, ...]
    params: dict[str, Any]
    n: int
    delta: float = 0.0
    neighbouring: str = DEFAULT_NEIGHBOURING
    confidence: float = CONFIDENCE
    max_rows_per_person: int | None = None
    assumptions: Assumptions = field(default_factory=Assumptions)


@dataclass(frozen=True)
class Promise:
    """At least `confidence` of the `outputs` within ±`half_width` `unit` of the truth.

    `key`: which statistic (statistics; "" otherwise). `floor`: the part of the half-width no
    ε removes, and `floor_cause` what it is ("" when none). `typical`: the size of an average
    output when public (n / cells), else None. `assumption`: what it rests on, in words.
    `settings`: parameters the plan chose at this ε that the release must be given (the
    smoothed histogram's rows, a suggested range grid). `assumed_rows`, `assumed_missing`:
    statistics, the fewest rows per group the promise holds for (n where n is public) and the
    largest share of them missing a value (None and 0 for other kinds). A statistics promise
    is infinite when groups of that size are withheld too often (too few rows to publish) for
    any ±H to be kept.
    """

    outputs: str
    half_width: float
    unit: str
    confidence: float
    key: str = ""
    floor: float = 0.0
    floor_cause: str = ""
    typical: float | None = None
    assumption: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    assumed_rows: float | None = None
    assumed_missing: float = 0.0

    def sentence(self) -> str:
        """The promise in words, as the planner prints it and the verdict quotes it."""
        if not math.isfinite(self.half_width):
            text = (
                f"the {self.outputs}: groups this small are too often withheld (too few rows "
                "to publish) for any ± to be promised"
            )
            return f"{text} ({self.assumption})" if self.assumption else text
        text = (
            f"at least {self.confidence:.0%} of the {self.outputs} within "
            f"±{_number(self.half_width)} {self.unit} of the truth"
        )
        return f"{text} ({self.assumption})" if self.assumption else text

    def vacuous(self) -> bool:
        """Whether ±half_width is at least an average output: such outputs say nothing."""
        return self.typical is not None and self.half_width >= self.typical


@dataclass(frozen=True)
class Proposal:
    """The planner's answer: the ε (None: none up to `cap`), its promises, and why not."""

    epsilon: float | None
    promises: tuple[Promise, ...]
    reason: str
    cap: float

    def text(self) -> str:
        """One paragraph: the ε and what it promises, or why no ε reaches the target."""
        if self.epsilon is None:
            return self.reason
        kept = "; ".join(p.sentence() for p in self.promises)
        settings = {k: v for p in self.promises for k, v in p.settings.items()}
        given = ", ".join(f"{k} {v}" for k, v in settings.items())
        return (
            f"epsilon {_number(self.epsilon)}" + (f" with {given}" if given else "") + f": {kept}"
        )


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


# ---------------------------------------------------------------- the accuracy at one ε


def accuracy_at(request: PlanRequest, epsilon: float) -> tuple[Promise, ...]:
    """What a release at `epsilon` promises (module docstring), from public inputs only."""
    return _kind_planner(request)(epsilon)


Planner = Callable[[float], tuple[Promise, ...]]


def _kind_planner(request: PlanRequest) -> Planner:
    """The function ε -> promises for `request`, with its ε-free part worked out once."""
    request = _checked(request)
    person = persons.for_release(request.schema.person, request.max_rows_per_person)
    if person is not None:
        persons.check_person_level(request.kind, request.delta, request.params)
    build = {
        "perturbed_histogram": _perturbed,
        "smoothed_histogram": _smoothed,
        "mwem": _mwem,
        "range_count": _range_count,
        "statistics": _statistics,
    }[request.kind]
    kind = build(request)
    neighbouring, delta = request.neighbouring, request.delta

    def at(epsilon: float) -> tuple[Promise, ...]:
        budget = persons.mechanism_budget(person, epsilon, delta, neighbouring)
        promises = kind(*budget)
        if person is None:
            return promises
        bounded = f"the truth: each person's rows bounded to {person.max_rows}"
        return tuple(
            replace(p, assumption="; ".join(filter(None, (p.assumption, bounded))))
            for p in promises
        )

    return at


def _checked(request: PlanRequest) -> PlanRequest:
    if request.kind not in KINDS:
        raise MechanismError(
            f"kind ({request.kind!r}) is unknown; choose one of {', '.join(KINDS)}"
        )
    if not 0 < request.confidence < 1:
        raise MechanismError(f"confidence ({request.confidence}) must be between 0 and 1")
    if isinstance(request.n, bool) or not isinstance(request.n, int) or request.n < 0:
        raise MechanismError(f"row count ({request.n!r}) must be a whole number >= 0")
    columns = tuple(request.schema.resolve_columns(list(request.columns) or None))
    return replace(
        request,
        columns=columns,
        delta=check_delta(request.delta),
        neighbouring=check_neighbouring(request.neighbouring),
        assumptions=request.assumptions.check(),
    )


KindAt = Callable[[float, float, str], tuple[Promise, ...]]


def _mechanism_plan(
    request: PlanRequest,
    plan_of: Callable[..., plans.NoisePlan],
    epsilon: float,
    delta: float,
    neighbouring: str,
) -> plans.NoisePlan:
    """The mechanism's own public noise plan (`mechanisms.plans`) at this budget."""
    return plan_of(
        PlanInputs(
            schema=request.schema,
            columns=request.columns,
            params=request.params,
            epsilon=epsilon,
            delta=delta,
            neighbouring=neighbouring,
            n=request.n,
        )
    )


def _perturbed(request: PlanRequest) -> KindAt:
    def at(epsilon: float, delta: float, neighbouring: str) -> tuple[Promise, ...]:
        plan = _mechanism_plan(request, plans.perturbed_plan, epsilon, delta, neighbouring)
        half = discrete_laplace_half_width(plan.scale or 0.0, request.confidence)
        typical = request.n / plan.support
        return (_count_promise(request, "noisy cell counts", half, typical),)

    return at


def _count_promise(request: PlanRequest, outputs: str, half: float, typical: float) -> Promise:
    return Promise(outputs, float(half), "rows", request.confidence, typical=typical)


def _smoothed(request: PlanRequest) -> KindAt:
    def at(epsilon: float, delta: float, neighbouring: str) -> tuple[Promise, ...]:
        plan = _mechanism_plan(request, plans.smoothed_plan, epsilon, delta, neighbouring)
        rows, mix, cells = int(plan.details["rows"]), float(plan.details["mix"]), plan.support
        n, confidence = max(request.n, 1), request.confidence
        half = smoothed_half_width(rows, mix, cells, n, confidence)
        promise = _count_promise(request, "cells' real-count estimates", half, n / cells)
        floor = smoothed_half_width(rows, 0.0, cells, n, confidence)
        return (
            replace(
                promise,
                floor=floor,
                floor_cause=f"the sampling of the {rows:,} synthetic rows",
                assumption="however the rows fill the cells, K cells equally full",
                settings={} if request.params.get("rows") else {"rows": rows},
            ),
        )

    return at


def smoothed_half_width(rows: int, mix: float, cells: int, n: int, confidence: float) -> float:
    """H for the smoothed histogram's real-count estimates, for the hardest even spread.

    A cell's estimate moves n / (rows (1 - mix)) per synthetic row; its synthetic count is
    Binomial(rows, q), q = (1 - mix) h + mix / m. For the tables with K cells equally full (h
    = 1/K) and the others empty, the expected share of cells whose count strays more than d
    from its mean is exact (binomial tails); d is the smallest reaching `confidence` for every
    K (`accuracy.binomial_tail_half_width`). mix = 1 or no rows: the estimate is blind, H = n.
    """
    if rows <= 0 or mix >= 1:
        return float(n)
    spread = binomial_tail_half_width(rows, mix, cells, confidence)
    return n * spread / (rows * (1 - mix))


def _mwem(request: PlanRequest) -> KindAt:
    def at(epsilon: float, delta: float, neighbouring: str) -> tuple[Promise, ...]:
        plan = _mechanism_plan(request, plans.mwem_plan, epsilon, delta, neighbouring)
        half = discrete_laplace_half_width(plan.scale or 0.0, request.confidence)
        measured = "counts MWEM measures" if plan.outputs else "one-way counts MWEM measures"
        typical = request.n / plan.details["median_cells"]
        return (_count_promise(request, measured, half, typical),)

    return at


def _range_count(request: PlanRequest) -> KindAt:
    from mechanisms.range_count.core import privacy_target
    from mechanisms.range_count.promise import answer_noise, share_half_width

    setting = _range_setting(request)
    method = request.params.get("mechanism", "auto")

    def at(epsilon: float, delta: float, neighbouring: str) -> tuple[Promise, ...]:
        support, queries, sample_bits, offsets, typical = setting(epsilon, delta, neighbouring)
        target = privacy_target(epsilon=epsilon, delta=delta, neighbouring=neighbouring)
        sd, kurtosis = answer_noise(
            method, support, queries, sample_bits, target, plans.PREVIEW_WORK
        )
        half = share_half_width(sd, kurtosis, offsets, request.confidence)
        floor = share_half_width(np.zeros_like(sd), kurtosis, offsets, request.confidence)
        return (
            Promise(
                "range answers",
                half,
                "rows",
                request.confidence,
                floor=floor,
                floor_cause="grid rounding" if floor > 0 else "",
                typical=typical,
                assumption=_crowding_words(request.assumptions.crowding, support),
                settings=_suggested(request, support),
            ),
        )

    return at


def _suggested(request: PlanRequest, support: Any) -> dict[str, Any]:
    """The grid chosen at this ε when the request lets the planner suggest one."""
    if request.params.get("grid") != "suggested" or support.grid_shape is None:
        return {}
    return {"grid": "x".join(str(g) for g in support.grid_shape)}


def _crowding_words(crowding: float, support: Any) -> str:
    if support.grid_shape is None:
        return "rows snapped to the nearest point; that rounding is not included"
    return (
        f"grid rounding for cells a range cuts holding at most {crowding:g}× an even share of "
        "the rows"
    )


RangeAt = Callable[[float, float, str], tuple[Any, list[dict[str, Any]], Any, Any, float]]


def _range_setting(request: PlanRequest) -> RangeAt:
    """ε -> (support, ranges, sampled answers' cells, their planned rounding, typical answer).

    Cached per grid; the sample is RANGE_SAMPLE answers spread over the ranges, and the
    typical answer is the average over them for rows spread evenly (`even_count`).

    The ranges are drawn once (random boxes and halfspaces are public draws), so every ε is
    planned on the same ones. A workload of random ranges only is planned (its noise plan)
    on a draw of as many as the release will draw, and its promise computed on RANGE_SAMPLE
    ranges spread like such draws, the same every time (`promise.typical_ranges`): the promise
    is about the release's random ranges, whichever it draws. With "grid": "suggested" the grid
    is the one `grid_choice.suggest_grid` gives at each ε (the portal's form does that when no
    grid is typed), so the plan follows it.
    """
    from mechanisms.noise import secure_source
    from mechanisms.range_count import api
    from mechanisms.range_count.inputs import incidence
    from mechanisms.range_count.promise import even_count, rounding_bound

    rng, crowding, n = secure_source(), request.assumptions.crowding, request.n
    cache: dict[Any, Any] = {}

    def at(epsilon: float, delta: float, neighbouring: str) -> Any:
        params = _range_params(request, epsilon, delta, neighbouring)
        key = repr(params.get("grid"))
        if key not in cache:
            support = api.support_from_schema(request.schema, request.columns, params)
            queries = api.workload_from_params(support, params, rng)
            if not queries:
                raise MechanismError(
                    "range counts: no ranges to plan for; give a workload, random boxes, "
                    "random halfspaces or prefixes"
                )
            sample = _range_sample(support, params, queries)
            offsets = crowding * rounding_bound(support, sample, n)
            typical = even_count(support, sample, n)
            cache[key] = (support, queries, incidence(support, sample), offsets, typical)
        return cache[key]

    return at


RANDOM_RANGES = ("random_boxes", "random_halfspaces")


def _range_sample(
    support: Any, params: dict[str, Any], queries: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The ranges a range-count promise is computed on (see `_range_setting`)."""
    from mechanisms.range_count.promise import spread_sample, typical_ranges

    drawn = {k: int(params[k]) for k in RANDOM_RANGES if params.get(k)}
    if not drawn or params.get("workload") or params.get("prefixes"):
        return [queries[i] for i in spread_sample(len(queries), RANGE_SAMPLE)]
    share = RANGE_SAMPLE / sum(drawn.values())
    boxes, halfspaces = (round(drawn.get(k, 0) * share) for k in RANDOM_RANGES)
    return typical_ranges(support, boxes, halfspaces)


def _range_params(
    request: PlanRequest, epsilon: float, delta: float, neighbouring: str
) -> dict[str, Any]:
    """The range-count settings at ε: a "suggested" grid chosen for that ε."""
    from mechanisms.range_count.api import range_bounds
    from mechanisms.range_count.grid_choice import suggest_grid
    from mechanisms.schema import NumericColumn

    params = dict(request.params)
    if params.get("grid") != "suggested":
        return params
    specs = [request.schema.column(c) for c in request.columns]
    if not all(isinstance(s, NumericColumn) for s in specs):
        return {k: v for k, v in params.items() if k != "grid"}  # the release refuses it
    bounds = tuple(range_bounds(s) for s in specs if isinstance(s, NumericColumn))
    limit = int(params.pop("max_grid_points", 2**20))
    size = suggest_grid(bounds, epsilon, delta, neighbouring, max(request.n, 1), limit)
    return {**params, "grid": [size] * len(specs)}


def _statistics(request: PlanRequest) -> KindAt:
    from mechanisms.statistics.compute import selected_request
    from mechanisms.statistics.promise import GroupAssumption, statistic_half_width, unit

    def at(epsilon: float, delta: float, neighbouring: str) -> tuple[Promise, ...]:
        stats = selected_request(
            request.schema,
            request.params,
            request.columns,
            epsilon=epsilon,
            neighbouring=neighbouring,
        )
        groups = len(stats.groups)
        public_n = request.n if neighbouring == "replace-one" and not stats.by else None
        rows = request.assumptions.group_rows or max(request.n / groups, 1.0)
        group = GroupAssumption(rows, request.assumptions.missing_share)
        words = _group_words(groups, rows, group.missing, public_n)
        return tuple(
            Promise(
                f"groups' {stat.text} estimates" if stats.by else f"{stat.text} estimates",
                statistic_half_width(
                    stats,
                    index,
                    request.schema,
                    neighbouring,
                    public_n,
                    group,
                    request.confidence,
                ),
                unit(stat),
                request.confidence,
                key=stat.text,
                assumption=words,
                assumed_rows=rows,
                assumed_missing=group.missing,
            )
            for index, stat in enumerate(stats.statistics)
        )

    return at


def _group_words(groups: int, rows: float, missing: float, public_n: int | None) -> str:
    if public_n is not None:
        size = f"the public {public_n:,} rows"
    else:
        size = f"{'each group holding ' if groups > 1 else ''}at least {rows:,.0f} rows"
    return size + (f", at most {missing:.0%} missing" if missing else "")


# ---------------------------------------------------------------- the search


def plan_epsilon(
    request: PlanRequest,
    target: float | Mapping[str, float],
    *,
    cap: float = EPSILON_CAP,
) -> Proposal:
    """The smallest ε (3 significant digits, rounded up) whose promises meet `target`.

    `target`: T for every promise (each in its own unit), or per statistic {"mean:age": 2,
    ...} (statistics; a statistic not named gets the entry "*" if given, else is not held to
    any). Bisection in log ε over [EPSILON_LOW, cap] (module docstring); ε is None, with the
    reason, when even `cap` falls short or a target is at least an average output.
    """
    if not (math.isfinite(cap) and cap > EPSILON_LOW):
        raise MechanismError(f"the ε cap ({cap}) must be a number above {EPSILON_LOW:g}")
    at = _kind_planner(request)
    targets = _targets(target)
    at_cap = at(cap)  # a setting refused at every ε is reported here, as it is
    unknown = sorted(set(targets) - {"*"} - {p.key for p in at_cap})
    if unknown:
        named = ", ".join(p.key for p in at_cap if p.key) or "none: give one number"
        raise MechanismError(
            f"target names {', '.join(unknown)}, which this release does not compute; "
            f"its statistics: {named}"
        )
    if vague := [p for p in at_cap if _vacuous_target(p, targets)]:
        return Proposal(None, at_cap, _vacuous_reason(vague[0], targets), cap)

    def meets(epsilon: float) -> bool:
        try:
            promises = at(epsilon)
        except (MechanismError, ArithmeticError):  # refused at this ε (too little: no use)
            return False
        return all(_reached(p, targets) for p in promises)

    if not all(_reached(p, targets) for p in at_cap):
        return Proposal(None, at_cap, _short_reason(at_cap, targets, cap), cap)
    epsilon = _bisect(meets, cap)
    return Proposal(epsilon, at(epsilon), "", cap)


def _bisect(meets: Callable[[float], bool], cap: float) -> float:
    """The rounded-up crossing of `meets` in [EPSILON_LOW, cap] (meets(cap) holds)."""
    low, high = EPSILON_LOW, cap
    if meets(low):
        return low
    while high / low > RATIO:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if meets(middle) else (middle, high)
    proposal = min(_round_up(high), cap)
    while not meets(proposal):  # past a plan that is not monotone in ε, step on to the cap
        proposal = min(_round_up(proposal * 1.01), cap)
    return proposal


def _round_up(value: float, digits: int = 3) -> float:
    """`value` rounded up to `digits` significant digits."""
    step = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return float(f"{math.ceil(value / step - 1e-9) * step:.{digits}g}")


def _targets(target: float | Mapping[str, float]) -> dict[str, float]:
    values = dict(target) if isinstance(target, Mapping) else {"*": target}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise MechanismError(f"target ({key}: {value!r}) must be a number > 0")
        if not math.isfinite(value):
            raise MechanismError(f"target ({key}: {value!r}) must be finite")
    return {k: float(v) for k, v in values.items()}


def _target_for(targets: Mapping[str, float], key: str) -> float | None:
    return targets.get(key, targets.get("*"))


def _reached(promise: Promise, targets: Mapping[str, float]) -> bool:
    wanted = _target_for(targets, promise.key)
    return wanted is None or promise.half_width <= wanted


def _vacuous_target(promise: Promise, targets: Mapping[str, float]) -> bool:
    wanted = _target_for(targets, promise.key)
    return wanted is not None and promise.typical is not None and wanted >= promise.typical


def _vacuous_reason(promise: Promise, targets: Mapping[str, float]) -> str:
    wanted = _target_for(targets, promise.key)
    assert wanted is not None and promise.typical is not None
    return (
        f"±{_number(wanted)} {promise.unit} is at least the size of an average output "
        f"({_number(promise.typical)} {promise.unit} in an average of the {promise.outputs}): "
        "outputs that uncertain say nothing; ask for a smaller ±"
    )


def _short_reason(promises: tuple[Promise, ...], targets: Mapping[str, float], cap: float) -> str:
    """Why no ε up to `cap` reaches the target: the accuracy at the cap and its floor."""
    short = next(p for p in promises if not _reached(p, targets))
    wanted = _target_for(targets, short.key)
    assert wanted is not None
    if not math.isfinite(short.half_width):
        return f"no ε up to {cap:g} reaches ±{_number(wanted)} {short.unit}: at ε {cap:g}, " + (
            short.sentence()
        )
    reason = (
        f"no ε up to {cap:g} reaches ±{_number(wanted)} {short.unit}: at ε {cap:g} the "
        f"{short.outputs} are within ±{_number(short.half_width)} {short.unit}"
    )
    if short.floor_cause and short.floor > wanted / 2:
        reason += f", of which {short.floor_cause} alone errs ±{_number(short.floor)}"
        reason += "; no ε removes it" + _floor_advice(short)
    return reason


def _floor_advice(promise: Promise) -> str:
    if promise.floor_cause == "grid rounding":
        return ": use a finer grid"
    if promise.floor_cause.startswith("the sampling"):
        return ": draw more synthetic rows, or use the noisy histogram"
    return ""


def kept(within: int, outputs: int, confidence: float) -> bool:
    """Whether `within` of `outputs` independent outputs is consistent with the promise.

    False only when a release keeping it (each output within with probability >= confidence)
    would show so few within with probability below FALSE_ALARM (the exact binomial tail).
    """
    from scipy import stats  # here: importing scipy.stats takes half a second

    if outputs <= 0:
        return True
    return float(stats.binom.cdf(within, outputs, confidence)) >= FALSE_ALARM
