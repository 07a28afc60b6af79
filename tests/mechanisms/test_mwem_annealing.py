"""MWEM's budget annealing (issue 44, item 1): the default plan's rounds get more ε after a
noise-level round, and never spend more than the requested ε.

Accounting is checked as in T4b (tests/mechanisms/test_budget_split.py, `recorded_loss`): the
loss of every recorded noise call, from its recorded scale and the sensitivity MWEM declares,
summed as exact fractions against the requested ε as an exact number. Deterministic, so no
false alarms; the runs are at low signal (uniform codes, 5,000 rows), where rounds do anneal,
which the tests check first. The twin (a schedule whose last round does not stop at what is
left) is caught.
"""

import importlib
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from mechanisms.accounting import float_at_most
from mechanisms.mwem import FactoredDistribution, mwem, plan_budget
from mechanisms.noise import RecordingSource, seeded_source
from mechanisms.workload import Query
from tests.mechanisms.test_budget_split import recorded_loss

plan_module = importlib.import_module("mechanisms.mwem.plan")
release_module = importlib.import_module("mechanisms.mwem.release")
SHAPE = (3, 4, 3, 2)
PAIRS = [Query((a, b)) for a in range(4) for b in range(a + 1, 4)]
LOW_SIGNAL = np.random.default_rng(21).integers(0, 2, size=(5000, 4))
TEXTS = ["0.3", "0.7", "1", "1.5"] + [
    f"{x:.6f}" for x in np.random.default_rng(6).uniform(0.3, 2, 16)
]


def _run(epsilon, neighbouring="replace-one", **options):
    source = RecordingSource(seeded_source(31))
    result = mwem(
        LOW_SIGNAL,
        SHAPE,
        PAIRS,
        epsilon=epsilon,
        neighbouring=neighbouring,
        mw_passes=2,
        rng=source,
        **options,
    )
    return result, source.noise_calls()


def _overspent(neighbouring) -> list:
    over = []
    for text in TEXTS:
        requested = Fraction(Decimal(text))
        result, calls = _run(float_at_most(requested), neighbouring)
        if recorded_loss(calls, neighbouring) > requested:
            over.append(text)
    return over


def test_low_signal_rounds_anneal():
    """The runs the accounting tests use anneal: fewer rounds than planned, later ones sharper."""
    annealed = 0
    for text in TEXTS:
        epsilon = float(text)
        result, calls = _run(epsilon)
        plan = plan_budget(5000, epsilon, SHAPE, PAIRS, "replace-one")
        measures = result.budget["per_round_measure"]
        assert measures[0] == plan.eps_measure and result.rounds <= plan.rounds
        assert measures == sorted(measures) and len(measures) == result.rounds
        annealed += result.rounds < plan.rounds
    assert annealed >= len(TEXTS) // 2, annealed


@pytest.mark.parametrize("neighbouring", ["replace-one", "add-remove"])
def test_annealed_rounds_never_spend_more_than_epsilon(neighbouring):
    assert _overspent(neighbouring) == []


def test_the_annealed_rounds_spend_all_of_epsilon_as_the_budget_says():
    """The last round takes what is left: the noise calls spend ε to within float rounding,
    and the budget record lists each round's shares (what the release's manifest states)."""
    for text in TEXTS[:6]:
        epsilon = float(text)
        result, calls = _run(epsilon)
        spent = recorded_loss(calls, "replace-one")
        assert spent <= Fraction(epsilon) and float(spent) == pytest.approx(epsilon, rel=1e-12)
        stated = release_module.spent_by(result.budget)["epsilon"]
        assert stated == pytest.approx(epsilon, rel=1e-12) and stated >= float(spent)


def test_its_twin_a_last_round_that_does_not_stop_at_what_is_left_overspends(monkeypatch):
    """Twin: the round budget doubles without the last round taking only what is left."""

    def greedy_next_round(self):
        if self.anneals:
            self.left -= Fraction(self.eps_select) + Fraction(self.eps_measure)
        self.rounds_left -= 1
        return self.eps_select, self.eps_measure, self.rounds_left == 0

    monkeypatch.setattr(plan_module.RoundSchedule, "next_round", greedy_next_round)
    over = _overspent("replace-one")
    print(f"\nFIGURE annealing twin: {len(over)} of {len(TEXTS)} epsilons overspent")
    assert over


def test_given_rounds_do_not_anneal():
    for options in ({"rounds": 6}, {"init_fraction": 0.3}):
        result, calls = _run(0.5, **options)
        plan = plan_budget(5000, 0.5, SHAPE, PAIRS, "replace-one", **options)
        assert result.rounds == plan.rounds
        assert set(result.budget["per_round_measure"]) == {plan.eps_measure}
        assert set(result.budget["per_round_select"]) == {plan.eps_select}


def _schedule(epsilon=1.0, anneals=True):
    plan = plan_budget(5000, epsilon, SHAPE, PAIRS, "replace-one", rounds=8, init_fraction=0.2)
    return plan, plan_module.RoundSchedule(plan, anneals=anneals)


def test_a_noise_level_round_doubles_the_next_and_the_last_takes_the_rest():
    plan, schedule = _schedule()
    first = schedule.next_round()
    assert first == (plan.eps_select, plan.eps_measure, False)
    schedule.noise_level_round()
    select, measure, last = schedule.next_round()
    per_round = Fraction(plan.eps_select) + Fraction(plan.eps_measure)
    assert Fraction(select) + Fraction(measure) == pytest.approx(2 * per_round, rel=1e-12)
    rounds = [first, (select, measure, last)]
    while not rounds[-1][2]:
        rounds.append(schedule.next_round())
    total = Fraction(plan.eps_init) + sum(Fraction(s) + Fraction(m) for s, m, _ in rounds)
    assert total <= Fraction(1.0) and float(total) == pytest.approx(1.0, rel=1e-12)
    assert len(rounds) < plan.rounds


def test_a_schedule_that_does_not_anneal_runs_the_plan():
    plan, schedule = _schedule(anneals=False)
    rounds = []
    for _ in range(plan.rounds):
        schedule.noise_level_round()
        rounds.append(schedule.next_round())
    assert rounds == [(plan.eps_select, plan.eps_measure, False)] * (plan.rounds - 1) + [
        (plan.eps_select, plan.eps_measure, True)
    ]
    assert not plan_module.RoundSchedule(
        plan_budget(5000, np.inf, SHAPE, PAIRS, "replace-one"), True
    ).anneals


def test_only_a_round_that_moved_the_model_by_less_than_its_noise_is_noise_level():
    query = Query((0, 1))
    model = FactoredDistribution.independent([np.ones(2), np.ones(2)])
    predicted = np.full(4, 0.25)
    noise = 0.02  # the measurement's noise level, as a total variation (``_error_before``)
    noise_level = release_module._noise_level
    assert not noise_level(query, predicted, model, noise)  # not moved at all
    assert noise_level(query, predicted + [0.005, -0.005, 0, 0], model, noise)  # moved .005
    assert not noise_level(query, predicted + [0.05, -0.05, 0, 0], model, noise)  # moved .05
