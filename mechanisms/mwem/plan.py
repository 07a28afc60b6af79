"""MWEM's plan: the budget split and the number of rounds, from public quantities only.

Pure functions of n (public under replace-one; under add-remove the default plan's noisy row
count, else the DP estimate from the noisy 1-way marginals), ε, the public domain shape and
the public workload: the share of ε for the 1-way start, the rounds, each round's selection and
measurement ε, their noise scales and the expected error of a measurement. ``plan_budget`` is
the one entry point; ``mwem`` spends exactly what it returns, so an accuracy preview can ask it
instead of rebuilding the split.
Touches no data. Also here: the checks of MWEM's arguments, before anything is spent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from mechanisms.accounting import check_epsilon, check_neighbouring, float_at_most, noise_scale
from mechanisms.errors import MechanismError
from mechanisms.mwem.measure import (
    BOX_SENSITIVITY,
    expected_abs_noise,
    marginal_sensitivity,
    selection_candidates,
)
from mechanisms.noise import check_count_noise
from mechanisms.workload import Query

MAX_DEFAULT_ROUNDS = 30
MIN_DEFAULT_ROUNDS = 3
SELECT_FRACTION = 0.15  # of each round's budget; the rest measures (measured best on Adult)
ADD_REMOVE_INIT_FRACTION = 0.2
SELECTION_GAP = 0.25  # default_rounds: the error (fraction of n) selection must be able to find
START_WEIGHT_CAP = 10  # init_share: the start weighs like at most 10/3 rounds
ROUND_NOISE = 0.3  # default_rounds: a round's expected L1 noise, at most this share of n
COUNT_FRACTION = 0.05  # add-remove default plan: the share of ε on the noisy row count
JOINT_MAX_CELLS = 4_000_000  # measures_joint: the full table's float64 model, at most 32 MB
JOINT_NOISE = 0.5  # measures_joint: the full table's expected L1 noise, at most this share of n
ANNEAL_FACTOR = 2  # RoundSchedule: a round after a noise-level one gets this many times its ε


@dataclass(frozen=True)
class MwemPlan:
    """Every share and scale of one MWEM run (public: made from public quantities only).

    ε is spent as ``eps_init`` on the d 1-way marginals together (noise scale ``init_scale``
    each cell; 0 when there is no 1-way start), then ``rounds`` × (``eps_select`` on one
    selection + ``eps_measure`` on one measurement). ``rounds`` 0 (init_fraction 1): the whole ε
    on the start, and ``marginal_scale`` is the start's scale. ``joint`` (``measures_joint``):
    no start and one round without selection (eps_select 0) that measures the full table with
    the whole ε. In exact arithmetic
    eps_init + rounds × (eps_select + eps_measure) <= epsilon, with ``eps_count`` added
    under the add-remove default plan, which first counts the rows (``counts_rows``) and plans
    for that noisy n; init_fraction is then a share of the ε left after the count.
    """

    n: int
    epsilon: float
    neighbouring: str
    init_fraction: float
    select_fraction: float
    rounds: int
    eps_init: float
    eps_select: float
    eps_measure: float
    eps_count: float  # the noisy row count's ε (0 unless counts_rows)
    marginal_l1: int  # L1 sensitivity of a marginal's cell vector (a box count: BOX_SENSITIVITY)
    init_scale: float
    marginal_scale: float  # discrete Laplace scale of each measured marginal cell
    box_scale: float  # and of a measured box count
    expected_cell_error: float  # E|noise| of one measured marginal cell, in rows
    joint: bool = False  # the one measurement is the full table (``measures_joint``)

    @property
    def budget(self) -> dict[str, Any]:
        """The split as MWEM's result and manifest state it (``budget_split``)."""
        return {
            "epsilon": self.epsilon,
            **({"row_count": self.eps_count} if self.eps_count else {}),
            "initial_one_way": self.eps_init,
            "per_round_select": self.eps_select,
            "per_round_measure": self.eps_measure,
            "rounds": self.rounds,
            **({"full_table": True} if self.joint else {}),
        }


def plan_budget(
    n: int,
    epsilon: float,
    shape: tuple[int, ...],
    workload: list[Query],
    neighbouring: str,
    *,
    rounds: int | None = None,
    init_fraction: float | None = None,
    select_fraction: float = SELECT_FRACTION,
) -> MwemPlan:
    """MWEM's budget split and rounds for ``n`` rows: what ``mwem`` itself spends.

    ``n`` is the public row count under replace-one; under add-remove pass a public or DP
    estimate (``mwem`` passes its noisy row count under the default plan, ``counts_rows``, else
    its estimate from the noisy 1-way marginals). With neither ``rounds`` nor ``init_fraction``
    given, both come from ``default_plan`` (the rounds its rule accepts, none when none pays);
    with one given, the other defaults as in ``mwem`` (``initial_fraction``, ``default_rounds``:
    at least MIN_DEFAULT_ROUNDS). The rules read the queries MWEM selects from
    (``selection_candidates``: the workload and the pairs inside its larger marginals).
    Post-processing of public values only: it spends nothing.
    """
    check_epsilon(epsilon)
    check_neighbouring(neighbouring)
    check_counts(n, rounds=rounds)
    workload = selection_candidates(workload)
    eps_count = count_epsilon(epsilon, neighbouring, rounds, init_fraction)
    rest = epsilon_left(epsilon, eps_count)  # what the start and the rounds share
    if measures_joint(n, rest, shape, workload, neighbouring, rounds, init_fraction):
        return _joint_plan(n, epsilon, neighbouring, eps_count, rest)
    marginal_l1 = marginal_sensitivity(neighbouring)
    if init_fraction is None and rounds is None:  # the default plan: both from the signal
        init_fraction, rounds = default_plan(n, rest, shape, workload, marginal_l1)
    init_fraction = initial_fraction(
        n, rest, shape, workload, neighbouring, init_fraction, rounds, bool(eps_count)
    )
    _check_fractions(init_fraction, select_fraction, rounds)
    eps_init = epsilon_share(rest, init_fraction)
    if rounds is None:
        rounds = (
            0
            if init_fraction == 1
            else default_rounds(
                n, rest, shape, workload, init_fraction, select_fraction, marginal_l1
            )
        )
    eps_select, eps_measure = round_split(rest, eps_init, rounds, select_fraction)
    init_scale = noise_scale(marginal_l1 * len(shape), eps_init) if eps_init > 0 else 0.0
    # no rounds: the only measured marginals are the 1-way start's, at its scale
    marginal_scale = noise_scale(marginal_l1, eps_measure) if rounds else init_scale
    return MwemPlan(
        n=n,
        epsilon=epsilon,
        neighbouring=neighbouring,
        init_fraction=init_fraction,
        select_fraction=select_fraction,
        rounds=rounds,
        eps_init=eps_init,
        eps_select=eps_select,
        eps_measure=eps_measure,
        eps_count=eps_count,
        marginal_l1=marginal_l1,
        init_scale=init_scale,
        marginal_scale=marginal_scale,
        box_scale=noise_scale(BOX_SENSITIVITY, eps_measure) if rounds else 0.0,
        expected_cell_error=expected_abs_noise(marginal_scale),
    )


class RoundSchedule:
    """Each round's (ε_select, ε_measure): the plan's split, or annealed in the default plan.

    Fixed (``anneals`` False: rounds or init_fraction given, or ε infinite): ``plan.rounds``
    rounds, each at the plan's split. Annealed: the plan's split is where it starts, and
    ``plan.rounds`` the most rounds; after a round whose measurement moved the model by less
    than its own expected noise (``release._noise_level``), every later round gets
    ANNEAL_FACTOR times the ε, and a round after which less than one more round's ε would be
    left takes all that is left and is the last. At low signal that trades rounds whose
    measurements are noise for fewer, sharper ones (AIM's budget annealing, McKenna et al.
    2022); where every round moves the model by more than its noise the rounds are the
    plan's. Measured on both halves of benchmarks/heldout.py (docs/mwem.md, "Budget
    annealing").
    Privacy: each round's ε is a function of the public plan and of earlier DP outputs only,
    and the rounds together spend at most ε − eps_count − eps_init in exact arithmetic (the
    last takes the rest, rounded down): pure ε-DP by sequential composition with adaptively
    chosen shares under a fixed total (a privacy filter, exact for pure DP).
    """

    def __init__(self, plan: MwemPlan, anneals: bool):
        self.rounds_left = plan.rounds
        self.anneals = anneals and not math.isinf(plan.epsilon) and plan.rounds > 0
        self.select_fraction = plan.select_fraction
        self.eps_select, self.eps_measure = plan.eps_select, plan.eps_measure
        if self.anneals:  # exactly what the start and the count left
            rest = epsilon_left(plan.epsilon, plan.eps_count)
            self.left = Fraction(rest) - Fraction(plan.eps_init)

    def next_round(self) -> tuple[float, float, bool]:
        """(ε_select, ε_measure, last) of the next round; only as many calls as rounds."""
        last = self.rounds_left == 1
        if self.anneals:
            last = last or self.left < 2 * (Fraction(self.eps_select) + Fraction(self.eps_measure))
            if last:
                self._split(float_at_most(self.left))
            self.left -= Fraction(self.eps_select) + Fraction(self.eps_measure)
        self.rounds_left -= 1
        return self.eps_select, self.eps_measure, last

    def noise_level_round(self) -> None:
        """The round just made was noise-level: later rounds get ANNEAL_FACTOR × its ε."""
        if self.anneals:
            round_eps = Fraction(self.eps_select) + Fraction(self.eps_measure)
            self._split(float_at_most(ANNEAL_FACTOR * round_eps))

    def _split(self, per_round: float) -> None:
        self.eps_select = epsilon_share(per_round, self.select_fraction)
        self.eps_measure = float_at_most(Fraction(per_round) - Fraction(self.eps_select))


def measures_joint(
    n: int,
    epsilon: float,
    shape: tuple[int, ...],
    workload: list[Query],
    neighbouring: str,
    rounds: int | None,
    init_fraction: float | None,
) -> bool:
    """Whether the default plan measures the full table with the whole ε instead of rounds.

    When the workload asks for the full table itself (a marginal on every attribute: 3 columns
    with 3-way marginals) and that table is small against n·ε, one measurement of every cell
    beats rounds: each marginal is then a sum of measured cells, and no start, selection or
    round takes budget from the others. It pays when the table's expected L1 noise, cells · E|Z|
    at scale Δ/ε, is at most JOINT_NOISE · n, and the table has at most JOINT_MAX_CELLS cells.
    Measured on 3-column tables (benchmarks/mwem_peers.py's tables and 3-column parts of them,
    docs/mwem.md): the full table won on 2- and 3-way TVD wherever that noise was at most
    0.8 n and lost from 1.1 n up; on 4 columns, where the full table is not asked for, it lost
    2-way TVD even at 0.15 n (randhie). Only in the default plan (neither ``rounds`` nor
    ``init_fraction`` given). Public values only: n (replace-one; under add-remove the noisy
    row count), ε (after that count), the shape and the workload.
    """
    if rounds is not None or init_fraction is not None:
        return False
    everything = tuple(range(len(shape)))
    if not any(q.box is None and q.attrs == everything for q in workload):
        return False
    cells = math.prod(shape)
    if cells > JOINT_MAX_CELLS:
        return False
    if math.isinf(epsilon):
        return True
    scale = marginal_sensitivity(neighbouring) / epsilon
    return cells * expected_abs_noise(scale) <= JOINT_NOISE * n


def _joint_plan(
    n: int, epsilon: float, neighbouring: str, eps_count: float, rest: float
) -> MwemPlan:
    """The plan of ``measures_joint``: ``rest`` (ε after the row count) on the full table."""
    marginal_l1 = marginal_sensitivity(neighbouring)
    scale = noise_scale(marginal_l1, rest)
    return MwemPlan(
        n=n,
        epsilon=epsilon,
        neighbouring=neighbouring,
        init_fraction=0.0,
        select_fraction=0.0,
        rounds=1,
        eps_init=0.0,
        eps_select=0.0,
        eps_measure=rest,
        eps_count=eps_count,
        marginal_l1=marginal_l1,
        init_scale=0.0,
        marginal_scale=scale,
        box_scale=0.0,
        expected_cell_error=expected_abs_noise(scale),
        joint=True,
    )


def counts_rows(neighbouring: str, rounds: int | None, init_fraction: float | None) -> bool:
    """Whether the plan first counts the rows: the add-remove default plan.

    n is private there, and the plan (how many rounds pay, ``default_plan``) needs it. Explicit
    rounds or init_fraction keep the fixed add-remove plan (ADD_REMOVE_INIT_FRACTION, n from the
    noisy 1-way marginals).
    """
    return neighbouring == "add-remove" and rounds is None and init_fraction is None


def count_epsilon(
    epsilon: float, neighbouring: str, rounds: int | None, init_fraction: float | None
) -> float:
    """ε of the noisy row count: COUNT_FRACTION·ε when ``counts_rows``, else 0."""
    if not counts_rows(neighbouring, rounds, init_fraction):
        return 0.0
    return epsilon_share(epsilon, COUNT_FRACTION)


def initial_fraction(
    n: int | None,
    epsilon: float,
    shape: tuple[int, ...],
    workload: Any,
    neighbouring: str,
    init_fraction: float | None = None,
    rounds: int | None = None,
    counted: bool = False,
) -> float:
    """``init_fraction`` if given, else the default share of ε for the 1-way start.

    replace-one: ``init_share`` of the given rounds, else ``default_plan``'s share for the
    public n. add-remove: ``default_plan``'s share for the noisy row count n when ``counted``
    (``counts_rows``; ε is then what the count left), else the fixed ADD_REMOVE_INIT_FRACTION
    (n is not public and not used: pass None).
    """
    if init_fraction is not None:
        return init_fraction
    if neighbouring == "replace-one" and n is not None:
        if rounds is not None:
            return init_share(rounds, len(shape))
        return default_plan(n, epsilon, shape, workload)[0]
    if counted and n is not None:
        return default_plan(n, epsilon, shape, workload, marginal_sensitivity(neighbouring))[0]
    return ADD_REMOVE_INIT_FRACTION


def default_plan(
    n: int, epsilon: float, shape: tuple[int, ...], workload: Any, marginal_l1: int = 2
) -> tuple[float, int]:
    """(init_fraction, rounds): the most rounds that still pay, else none.

    T rounds leave ``init_share(T)`` of ε to the 1-way start; the plan takes the largest T
    (up to the cap of ``default_rounds``) whose rounds ``default_rounds`` accepts with that
    start, and when not even one round pays, puts the whole ε on the 1-way marginals (1, 0):
    the independent release, never beaten by rounds whose noise drowns what they measure.
    The 1-way start is 0 only beside rounds that pay while the start itself would not
    (``_start_pays``: 1,000 binary attributes, benchmarks/mwem_scaling.py, where a noisy
    start costs more than the uniform one). Public: n (replace-one; under add-remove the noisy
    row count, with ``marginal_l1`` 1), ε, the shape, the workload.
    """
    cap = _round_cap(workload, shape)
    for rounds in range(cap, 0, -1):
        fraction = init_share(rounds, len(shape))
        if not _start_pays(n, epsilon * fraction, shape, marginal_l1):
            fraction = 0.0  # hundreds of attributes: the start would be noise; rounds are not
        accepted = default_rounds(
            n, epsilon, shape, workload, fraction, SELECT_FRACTION, marginal_l1, minimum=0
        )
        if accepted >= rounds:
            return fraction, rounds
    return 1.0, 0


def init_share(rounds: int, d: int) -> float:
    """The 1-way start's share of ε with T rounds: w / (w + 3T), at least 0.1.

    w = min(d, START_WEIGHT_CAP) for d attributes. The d 1-way marginals measured together
    weigh like w/3 rounds: their joint sensitivity
    grows with d, and every 2-/3-way marginal depends on them while a round fixes one. (Tuned
    on anes96, sftemps and fair, issue 16: 1 / (1 + T) left 9 attributes' start too noisy at
    small n·ε, and 1 / (1 + T/3) starved the rounds of 3 attributes.) Capped: with hundreds
    of attributes the start is noise at any share, and w = d would starve every round
    (benchmarks/mwem_scaling.py, 1,000 binary attributes).
    """
    weight = min(d, START_WEIGHT_CAP)
    return max(0.1, weight / (weight + 3 * rounds))


def _start_pays(n: int, eps_init: float, shape: tuple[int, ...], marginal_l1: int = 2) -> bool:
    """The 1-way start's expected L1 noise on a median attribute is within ROUND_NOISE·n.

    The d marginals together have L1 sensitivity d·``marginal_l1``: that over eps_init per cell.
    """
    if math.isinf(eps_init):
        return True
    cells = float(np.median(shape))
    return cells * expected_abs_noise(marginal_l1 * len(shape) / eps_init) <= ROUND_NOISE * n


def _round_cap(workload: Any, shape: tuple[int, ...]) -> int:
    """min(|W|, MAX_DEFAULT_ROUNDS), and 2d for a workload of marginals alone.

    Beyond about two marginals per attribute, the noise that more rounds add outweighs what
    further marginals explain (Adult, 8 columns, ε = 10: 2-/3-way TVD .0060/.0199 at T = 16,
    .0065/.0206 at 24, .0069/.0223 at 30). Box queries are single numbers: the larger cap.
    """
    cap = min(len(workload), MAX_DEFAULT_ROUNDS)
    if all(q.box is None for q in workload):
        cap = min(cap, 2 * len(shape))
    return cap


def default_rounds(
    n: int,
    epsilon: float,
    shape: tuple[int, ...],
    workload: Any,
    init_fraction: float,
    select_fraction: float,
    marginal_l1: int,
    minimum: int = MIN_DEFAULT_ROUNDS,
) -> int:
    """The largest T (``minimum`` to ``_round_cap``) whose rounds keep two things useful.

    Measuring: a round measures at ε_m = ε·(1 − init_fraction)·(1 − select_fraction)/T; the
    expected L1 size of its noise on a query with c cells is c·E|Z| at scale Δ/ε_m, and it must
    stay within ROUND_NOISE·n for c the median cells of the workload's lowest-order queries
    (the ones worth measuring at low signal). Selecting: the exponential mechanism at ε_s
    (score sensitivity 1, scores in units of Δ) must tell apart a query whose error is
    SELECTION_GAP·n from the rest of |W|: ε_s·SELECTION_GAP·n / (2·Δ) ≥ ln|W|.
    ``minimum`` > 0 (add-remove, or an explicit init_fraction): even rounds that cannot measure
    well let the exponential mechanism pick the queries worth measuring.
    Uses only public values (n is public under replace-one; under add-remove it is the DP
    estimate).
    """
    cap = _round_cap(workload, shape)
    if math.isinf(epsilon):
        return cap
    cells = _low_order_cells(workload, shape)
    spend = epsilon * (1 - init_fraction)
    selecting = (
        spend
        * select_fraction
        * SELECTION_GAP
        * n
        / (2 * marginal_l1 * math.log(max(len(workload), 2)))
    )
    best = 0
    for rounds in range(1, cap + 1):
        eps_measure = spend * (1 - select_fraction) / rounds
        noise = cells * expected_abs_noise(marginal_l1 / eps_measure) if eps_measure else math.inf
        if noise > ROUND_NOISE * n or rounds > selecting:
            break
        best = rounds
    return max(min(cap, minimum), best)


def _low_order_cells(workload: Any, shape: tuple[int, ...]) -> float:
    """Median cells of the workload's queries on the fewest attributes."""
    fewest = min(len(q.attrs) for q in workload)
    return float(np.median([q.cells(shape) for q in workload if len(q.attrs) == fewest]))


def epsilon_share(epsilon: float, fraction: float) -> float:
    """fraction·ε rounded down (0 when fraction is 0, also at ε = inf)."""
    if fraction == 0 or math.isinf(epsilon):
        return 0.0 if fraction == 0 else math.inf
    return float_at_most(Fraction(epsilon) * Fraction(fraction))


def epsilon_left(epsilon: float, spent: float) -> float:
    """ε − spent rounded down (ε itself when nothing was spent)."""
    if spent == 0 or math.isinf(epsilon):
        return epsilon
    return float_at_most(Fraction(epsilon) - Fraction(spent))


def round_split(
    epsilon: float, eps_init: float, rounds: int, select_fraction: float
) -> tuple[float, float]:
    """(ε_select, ε_measure) per round, each rounded down; (0, 0) when there are no rounds.

    In exact arithmetic eps_init + rounds × (ε_select + ε_measure) <= ε.
    """
    if rounds == 0:
        return 0.0, 0.0
    if math.isinf(epsilon):
        return math.inf, math.inf
    per_round = float_at_most((Fraction(epsilon) - Fraction(eps_init)) / rounds)
    eps_select = epsilon_share(per_round, select_fraction)
    return eps_select, float_at_most(Fraction(per_round) - Fraction(eps_select))


def check_noise_fits(
    epsilon: float, eps_init: float, d: int, marginal_l1: int, eps_measure: float
) -> None:
    """Refuse an ε whose count noise 64-bit integers cannot carry (see noise.check_count_noise).

    ``eps_measure`` 0: no rounds (the whole ε on the 1-way marginals).
    """
    if eps_init > 0:
        check_count_noise(noise_scale(marginal_l1 * d, eps_init), epsilon)
    if eps_measure > 0:
        check_count_noise(noise_scale(marginal_l1, eps_measure), epsilon)


def check_options(
    neighbouring: str,
    init_fraction: float,
    select_fraction: float,
    output: str,
    update: str,
    workload: Any,
    rounds: int | None = None,
) -> None:
    """MWEM's options other than ε (checked before the split, which divides by ε)."""
    check_neighbouring(neighbouring)
    _check_fractions(init_fraction, select_fraction, rounds)
    if output not in ("last", "average"):
        raise MechanismError(f"output ({output!r}) must be 'last' or 'average'")
    if update not in ("damped", "paper"):
        raise MechanismError(f"update ({update!r}) must be 'damped' or 'paper'")
    if not workload:
        raise MechanismError("workload (empty) must hold at least one query")


def _check_fractions(
    init_fraction: float, select_fraction: float, rounds: int | None = None
) -> None:
    """init_fraction in [0, 1] (1: the whole ε on the 1-way marginals, no rounds)."""
    if not 0 <= init_fraction <= 1:
        raise MechanismError(f"init_fraction ({init_fraction!r}) must be in [0, 1]")
    if init_fraction == 1 and rounds:
        raise MechanismError(
            f"init_fraction (1) leaves nothing for rounds ({rounds}); lower it or omit rounds"
        )
    if not 0 < select_fraction < 1:
        raise MechanismError(f"select_fraction ({select_fraction!r}) must be in (0, 1)")


def check_counts(n: int, **counts: int | None) -> None:
    """Refuse data without rows, and counts (rounds, passes, cells) that are not whole >= 1."""
    if n < 1:
        raise MechanismError("data (0 rows) must have at least one row for MWEM")
    for name, value in counts.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise MechanismError(f"{name} ({value!r}) must be a whole number >= 1")


def check_dense_fits(shape: tuple[int, ...], memory_cells: int | None) -> bool:
    """Refuse output 'average' when the dense domain exceeds memory_cells; True otherwise."""
    cells = math.prod(shape)
    if memory_cells is not None and cells > memory_cells:
        raise MechanismError(
            f"output 'average' needs the dense domain ({cells} cells) within memory_cells "
            f"({memory_cells}); use output 'last' or raise memory_cells"
        )
    return True
