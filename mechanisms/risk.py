"""The risk of a release in words: how sure an onlooker can become about one row or person.

A release is (epsilon, delta)-differentially private. Whatever an onlooker knows, the pure
epsilon part bounds the ratio of the likelihoods of any output on two neighbouring tables by
e^epsilon. By Bayes' rule, someone whose prior belief in a claim about one unit (a row, or a
person with all their rows) was p0 then holds at most the posterior

    p1 = e^epsilon p0 / (1 - p0 + e^epsilon p0)  =  p0 / (p0 + (1 - p0) e^-epsilon)

after seeing the release (the second form is the one computed: e^-epsilon never overflows, so
any epsilon, however large, gives p1 <= 1 and p1 -> 1). Assumptions: the likelihood-ratio bound
e^epsilon holds for this output; delta is the probability, at most, that it does not (the usual
reading of (epsilon, delta)-DP as "epsilon-DP except with probability delta"), so the bound holds
with probability at least 1 - delta. A bound on a dataset's total uses its spent epsilon and
delta, which add up over releases (basic composition).

The claim depends on the neighbouring relation: under add-remove, neighbouring tables differ by
the presence of one unit, so the claim is "the unit is in the table"; under replace-one they
differ in one unit's values (the number of rows is public), so the claim is "the unit has a
property", and presence in the table is not what is protected.

Inputs are public (epsilon, delta, unit, relation): nothing here reads data; it costs no budget.
Percentages are rounded UP (`percent`), so a shown bound is never below the true one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mechanisms.accounting import check_neighbouring
from mechanisms.errors import MechanismError

PRIORS = (0.01, 0.1, 0.5)
UNITS = ("row", "person")
_PERCENT_DIGITS = 1  # decimals shown after the percent point


@dataclass(frozen=True)
class RiskRow:
    """One prior p0 and the largest posterior p1 the release allows."""

    prior: float
    posterior: float


def check_risk_epsilon(epsilon: Any) -> float:
    """Epsilon as a float if it is a number >= 0 (0: the release says nothing), else raise."""
    try:
        value = float(Decimal(epsilon) if isinstance(epsilon, str) else epsilon)
    except (TypeError, ValueError, ArithmeticError):
        raise MechanismError(f"epsilon ({epsilon!r}) must be a number >= 0, e.g. 1") from None
    if not value >= 0:  # also refuses NaN
        raise MechanismError(f"epsilon ({epsilon!r}) must be >= 0, e.g. 1")
    return value


def check_risk_delta(delta: Any) -> float:
    """Delta as a float if it is a number in [0, 1), else raise."""
    try:
        value = float(Decimal(delta) if isinstance(delta, str) else delta)
    except (TypeError, ValueError, ArithmeticError):
        raise MechanismError(f"delta ({delta!r}) must be a number in [0, 1), e.g. 1e-6") from None
    if not 0 <= value < 1:  # also refuses NaN
        raise MechanismError(f"delta ({delta!r}) must be in [0, 1), e.g. 1e-6")
    return value


def posterior_bound(epsilon: float, prior: float) -> float:
    """The most p1 a prior belief `prior` can become after an epsilon-DP release (see module)."""
    if not 0 <= prior <= 1:
        raise MechanismError(f"prior ({prior!r}) must be a probability in [0, 1]")
    if prior == 0:
        return 0.0
    return prior / (prior + (1 - prior) * math.exp(-check_risk_epsilon(epsilon)))


def risk_table(epsilon: float) -> list[RiskRow]:
    """The posterior bound for each prior of PRIORS (1%, 10%, 50%)."""
    return [RiskRow(p0, posterior_bound(epsilon, p0)) for p0 in PRIORS]


def percent(probability: float) -> str:
    """A probability as a percentage with one decimal, rounded UP (never understates risk).

    A relative tolerance of 1e-12 (a few thousand float steps, far below the 0.1% shown) keeps
    float noise (0.1 computed as 0.10000000000000003) from rounding a prior up by a step.
    """
    scale = 100 * 10**_PERCENT_DIGITS
    steps = math.ceil(probability * scale * (1 - 1e-12))
    return f"{steps / 10**_PERCENT_DIGITS:.{_PERCENT_DIGITS}f}%"


def unit_of(guarantee: dict[str, Any]) -> str:
    """The unit, "person" or "row": person when a guarantee bounds the rows per person."""
    return "person" if guarantee.get("max_rows_per_person") is not None else "row"


def claim(unit: str, neighbouring: str) -> str:
    """What the onlooker believes about the unit, as the relation protects it."""
    if unit not in UNITS:
        raise MechanismError(f"unit ({unit!r}) must be one of {', '.join(UNITS)}")
    check_neighbouring(neighbouring)
    if neighbouring == "add-remove":
        return f"a given {unit} is in the table"
    if unit == "person":
        return "a given person's rows have some property (a value in one of their columns)"
    return "a given row has some property (a value in one of its columns)"


def risk_sentences(
    epsilon: Any,
    delta: Any,
    unit: str,
    neighbouring: str,
    *,
    event: str = "this release",
) -> list[str]:
    """The risk of `event` in words: one sentence per prior, then what delta means."""
    eps = check_risk_epsilon(epsilon)
    about = claim(unit, neighbouring)
    sentences = [
        f"Someone who was {percent(row.prior)} sure, before {event}, that {about} is at most "
        f"{percent(row.posterior)} sure after it."
        for row in risk_table(eps)
    ]
    if neighbouring == "replace-one":
        sentences.append(
            f"Whether a {unit} is in the table is not what is protected: under replace-one "
            f"the number of {'people' if unit == 'person' else 'rows'} is public."
        )
    return [*sentences, delta_sentence(delta)]


def delta_sentence(delta: Any) -> str:
    """What delta means for these bounds, in plain words."""
    value = check_risk_delta(delta)
    if value == 0:
        return "These bounds always hold (delta = 0), whatever else the onlooker knows."
    return (
        f"With a probability of at most delta = {Decimal(repr(value)).normalize():f} these "
        "bounds may not hold; otherwise they hold whatever else the onlooker knows."
    )


def release_risk(guarantee: dict[str, Any]) -> list[str]:
    """The risk sentences of a release, from its manifest's public guarantee."""
    return risk_sentences(
        guarantee.get("epsilon", 0),
        guarantee.get("delta") or 0,
        unit_of(guarantee),
        str(guarantee.get("neighbouring", "")),
    )


def total_risk(epsilon_spent: Any, delta_spent: Any, unit: str, neighbouring: str) -> list[str]:
    """The risk sentences of every release of a dataset together (its spent epsilon and delta)."""
    return risk_sentences(
        epsilon_spent,
        delta_spent,
        unit,
        neighbouring,
        event="all releases of this dataset together",
    )


def risk_report(epsilon: Any, delta: Any, unit: str, neighbouring: str) -> str:
    """The command line's table: each prior and its posterior bound, then the sentences."""
    eps = check_risk_epsilon(epsilon)
    sentences = risk_sentences(eps, delta, unit, neighbouring)  # checks every input first
    lines = [
        f"Risk of a release with epsilon = {epsilon}, delta = {delta}, unit: one {unit}, "
        f"neighbouring: {neighbouring}",
        f"{'before (p0)':>12}  {'after, at most (p1)':>20}",
        *(f"{percent(r.prior):>12}  {percent(r.posterior):>20}" for r in risk_table(eps)),
        "",
        *sentences,
    ]
    return "\n".join(lines) + "\n"
