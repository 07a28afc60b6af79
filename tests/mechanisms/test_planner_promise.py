"""A release at the planner's ε keeps the planner's promise, on tables of several shapes (issue 43).

For every case of tests/mechanisms/planner_cases.py (every catalogue kind, and person level,
on the Adult sample, loglinear6, cars, seattle_weather, co2 and two made-up tables): plan the
ε for the case's target, check every promise at that ε is within its target, then release at
that ε N times (N = `case.releases`, secure source) and measure per release the share of the
outputs the promise covers within ±T of the truth (statistics: the groups holding at least the
values the planner assumed, a withheld estimate counting as outside). The promise is an
expected share of at least C = 95%, so the check is one-sided on the mean of the N per-release
shares (independent across releases): it fails when mean + Z·(standard error) < C, Z = 4.265,
a false alarm of 1e-5 per check under the normal approximation to that mean (about 30 checks:
below 3e-4 for the file).

Broken twins (`planner_cases.twin_targets`): the promise a defective planner would make at the
same ε, measured on the same releases, must fail the same check: noise halved (histograms,
MWEM, statistics with a public n), the smoothed histogram planned for an average cell only
(on a table whose rows fill 8 of 16 cells), range counts without grid rounding (on off-grid
intervals and boxes where rounding matters), statistics without group sizes, a sum that is
given the share of its own noisy count too, and person level without the bound k (on the
noisy histogram). Cases without a twin (adult smoothed, halfspaces, statistics at person
level) keep a margin no tested defect removes; they check the promise only.

Sample sizes: N is at least 30 (for the normal approximation), and for a case with a twin
the N at which the twin escapes with probability at most 1e-5, N >= ((Z + Z) s / (C - m))^2
(m, s: the twin's mean share and its per-release spread, measured by
`benchmarks/planner_promise.py`, at 200 releases and at the test's N), with a margin of a
quarter or more over the largest of those estimates: from 30 (twins far below C) to 800 (the
smoothed histogram's average-cell twin, 2 to 3 points below C).

`benchmarks/planner_promise.py` prints the same figures as a table.
"""

import pytest

from mechanisms import planner
from mechanisms.noise import secure_source
from tests.mechanisms import planner_cases as cases

pytestmark = pytest.mark.audit  # Monte-Carlo checks of many releases


@pytest.mark.parametrize("case", cases.cases(), ids=str)
def test_a_release_at_the_planned_epsilon_keeps_the_promise(case):
    request = cases.request(case)
    proposal = planner.plan_epsilon(request, case.target)
    assert proposal.epsilon is not None, proposal.reason
    targets = cases.targets(case, proposal.promises)
    assert all(p.half_width <= targets[p.key] for p in proposal.promises)
    within = {"planned": targets}
    if case.twin:
        twin = cases.twin_targets(case, proposal.epsilon)[case.twin_key]
        assert twin < targets[case.twin_key]  # the twin promises more than the planner
        within["twin"] = {case.twin_key: twin}
    params = cases.release_params(case, proposal)
    measured = cases.shares(case, proposal.epsilon, params, within, secure_source())
    for key, shares in measured["planned"].items():
        mean, error = cases.summary(shares)
        assert mean + cases.Z * error >= request.confidence, (key, mean, error)
    if case.twin:
        mean, error = cases.summary(measured["twin"][case.twin_key])
        assert mean + cases.Z * error < request.confidence, (case.twin, mean, error)
