"""The risk of a release in words (mechanisms.risk) and `dp-release risk` (issue 46 item 2).

Every expected number is computed here from the formula p1 = e^eps p0 / (1 - p0 + e^eps p0),
written independently of the module (exact Decimal arithmetic with a 60-digit exponential), never
taken from the code under test.
"""

from __future__ import annotations

import math
import subprocess
import sys
from decimal import Decimal, localcontext

import pytest

from mechanisms.__main__ import main
from mechanisms.errors import MechanismError
from mechanisms.risk import (
    PRIORS,
    percent,
    posterior_bound,
    release_risk,
    risk_sentences,
    risk_table,
    total_risk,
)

EPSILONS = (0, 0.1, 1, 2.5, 10, 50, 1000)


def expected_posterior(epsilon: float, prior: float) -> Decimal:
    """The formula as the issue writes it, in 60-digit decimals (no float overflow)."""
    with localcontext() as ctx:
        ctx.prec = 60
        grow = Decimal(epsilon).exp()
        p0 = Decimal(str(prior))  # the exact decimal prior, not its float
        return grow * p0 / (1 - p0 + grow * p0)


def expected_percent(probability: Decimal) -> str:
    """The percentage with one decimal, rounded up (as a bound must be)."""
    tenths = (probability * 1000).to_integral_value(rounding="ROUND_CEILING")
    return f"{tenths / 10:.1f}%"


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_posterior_matches_the_formula(epsilon):
    rows = risk_table(epsilon)
    assert [r.prior for r in rows] == [0.01, 0.1, 0.5]
    for row in rows:
        assert math.isfinite(row.posterior)
        assert row.posterior == pytest.approx(float(expected_posterior(epsilon, row.prior)), 1e-12)


def test_known_values():
    # e^1 * 0.5 / (0.5 + e^1 * 0.5) = e / (1 + e) = 0.7310585786...
    assert posterior_bound(1, 0.5) == pytest.approx(math.e / (1 + math.e), abs=1e-15)
    assert posterior_bound(0, 0.1) == pytest.approx(0.1, abs=1e-15)
    assert posterior_bound(1000, 0.01) == 1.0  # no OverflowError, no NaN
    assert posterior_bound(float("inf"), 0.5) == 1.0


@pytest.mark.parametrize("prior", PRIORS)
def test_posterior_is_at_least_the_prior_and_grows_with_epsilon(prior):
    grid = [0, 1e-6, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 100, 1000]
    posteriors = [posterior_bound(e, prior) for e in grid]
    assert all(p >= prior - 1e-15 for p in posteriors)
    assert posteriors == sorted(posteriors)
    assert posteriors[1] > posteriors[0] and posteriors[-1] == 1.0


def test_percent_rounds_up_but_not_float_noise():
    assert percent(0.026723630989395224) == "2.7%"
    assert percent(0.0261) == "2.7%"  # up, never down
    assert percent(0.1 + 0.2 - 0.2) == "10.0%"  # float noise does not push 10% to 10.1%
    assert percent(0.027 * (1 + 1e-10)) == "2.8%"  # a true excess is rounded up
    assert percent(0.9995915675173919) == "100.0%"


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("delta", [0, 1e-6])
def test_sentences_state_the_formula_numbers_and_delta(epsilon, delta):
    sentences = risk_sentences(epsilon, delta, "row", "add-remove")
    for prior, sentence in zip(PRIORS, sentences, strict=False):
        p1 = expected_percent(expected_posterior(epsilon, prior))
        assert sentence == (
            f"Someone who was {expected_percent(Decimal(str(prior)))} sure, before this release, "
            f"that a given row is in the table is at most {p1} sure after it."
        )
    if delta:
        assert (
            "With a probability of at most delta = 0.000001 these bounds may not hold"
            in (sentences[-1])
        )
    else:
        assert "always hold (delta = 0)" in sentences[-1]


def test_replace_one_speaks_of_a_property_add_remove_of_presence():
    person_replace = " ".join(risk_sentences(1, 0, "person", "replace-one"))
    assert "a given person's rows have some property" in person_replace
    assert "is in the table is not what is protected" in person_replace
    assert "number of people is public" in person_replace
    row_replace = " ".join(risk_sentences(1, 0, "row", "replace-one"))
    assert "a given row has some property" in row_replace
    assert "number of rows is public" in row_replace
    person_add = " ".join(risk_sentences(1, 0, "person", "add-remove"))
    assert "a given person is in the table" in person_add
    assert "property" not in person_add


def test_a_manifest_guarantee_and_a_dataset_total():
    guarantee = {
        "epsilon": 1.0,
        "delta": 0.0,
        "neighbouring": "add-remove",
        "max_rows_per_person": 3,
    }
    assert "a given person is in the table is at most 2.7% sure" in release_risk(guarantee)[0]
    total = total_risk("2.5", "0.000002", "row", "replace-one")
    p1 = expected_percent(expected_posterior(2.5, 0.5))
    assert total[2].endswith(
        f"before all releases of this dataset together, that a given row "
        f"has some property (a value in one of its columns) is at most "
        f"{p1} sure after it."
    )
    assert "delta = 0.000002" in total[-1]


@pytest.mark.parametrize(
    ("epsilon", "delta", "message"),
    [
        (-1, 0, "epsilon (-1) must be >= 0"),
        ("x", 0, "epsilon ('x') must be a number >= 0"),
        (float("nan"), 0, "epsilon (nan) must be >= 0"),
        (1, 1, "delta (1) must be in [0, 1)"),
        (1, -0.1, "delta (-0.1) must be in [0, 1)"),
        (1, "much", "delta ('much') must be a number in [0, 1)"),
    ],
)
def test_bad_values_are_refused_by_name(epsilon, delta, message):
    with pytest.raises(MechanismError) as refused:
        risk_sentences(epsilon, delta, "row", "add-remove")
    assert message in str(refused.value)


def test_the_command_prints_the_table(capsys):
    argv = "risk --epsilon 1 --delta 1e-6 --unit person --neighbouring add-remove".split()
    status = main(argv)
    out = capsys.readouterr().out
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == (
        "Risk of a release with epsilon = 1, delta = 1e-6, unit: one person, "
        "neighbouring: add-remove"
    )
    table = [line.split() for line in lines[2:5]]
    expected = [
        [expected_percent(Decimal(str(p))), expected_percent(expected_posterior(1, p))]
        for p in PRIORS
    ]
    assert table == expected  # [["1.0%", "2.7%"], ["10.0%", "23.2%"], ["50.0%", "73.2%"]]
    assert "a given person is in the table is at most 23.2% sure after it." in out
    assert "With a probability of at most delta = 0.000001" in out


def test_the_command_handles_a_huge_epsilon(capsys):
    assert main(["risk", "--epsilon", "1000"]) == 0
    out = capsys.readouterr().out
    assert out.count("100.0%") == 6  # three in the table, three in the sentences


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--epsilon", "-0.5"], "error: epsilon ('-0.5') must be >= 0"),
        (["--epsilon", "one"], "error: epsilon ('one') must be a number >= 0"),
        (["--epsilon", "1", "--delta", "1"], "error: delta ('1') must be in [0, 1)"),
        (["--epsilon", "1", "--delta", "a lot"], "error: delta ('a lot') must be a number"),
        (["--epsilon", "1", "--unit", "group"], "invalid choice: 'group'"),
        (["--delta", "0"], "the following arguments are required: --epsilon"),
    ],
)
def test_the_command_refuses_bad_input_with_status_2(capsys, argv, message):
    assert exit_status(["risk", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def exit_status(argv: list[str]) -> int:
    """main's status, or the status argparse exits with on a usage error."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def test_the_module_runs_without_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "mechanisms", "risk", "--epsilon", "-3"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == "error: epsilon ('-3') must be >= 0, e.g. 1\n"
