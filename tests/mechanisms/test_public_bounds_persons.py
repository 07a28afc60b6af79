"""Issue 41 item 1: "estimate for me" at person level, run as the portal runs it: the catalogue
row SCHEMA_ESTIMATE through `run_release` (its run, its group budget, its guarantee).

The audit's attack, reproduced: one person holds 400 rows of a category no one else has, and an
income of 7e9 in each. At row level that category was released, and the upper bound lifted to
1e10, in 300 of 300 runs with the person and (almost) never without. Here D holds the person and
D' does not (add-remove: the person removed; replace-one: the person replaced by an ordinary
one), and the event test (docs/testing-privacy.md section 1, `audit_neighbours`) checks
P[event | D] <= e^epsilon P[event | D'] + delta at the REQUESTED epsilon and delta.

Sizes: n = 4,000 estimates per side; family-wise false-alarm rate alpha = 10^-6 per test. The
broken twin is the code before the fix (the same estimate at row level: no bounding per person,
row sensitivity); the same test must reject it (there the event has rate 1 with the person).
"""

import json
import math

import numpy as np
import pandas as pd
import pytest

from mechanisms.catalogue import SCHEMA_ESTIMATE, run_release
from mechanisms.noise import RecordingSource, seeded_source
from mechanisms.persons import PersonLevel, approx_group_budget
from mechanisms.public_bounds import ESTIMATE_RESULTS, category_threshold
from mechanisms.schema import IgnoredColumn, Schema
from tests.mechanisms.privacy_audit import audit_neighbours

N_PER_SIDE = 4_000
ALPHA = 1e-6
EPSILON, DELTA = 1.0, 0.01  # the estimate's requested budget
PERSON = PersonLevel("pid", 2)
RARE, OUTLIER = "rare-canary", 7e9


def _people(count=300, seed=3) -> pd.DataFrame:
    """`count` ordinary people with 1 to 3 rows each: incomes around 22,000, groups a or b."""
    rng = np.random.default_rng(seed)
    ids = np.repeat(np.arange(count), rng.integers(1, 4, count))
    return pd.DataFrame(
        {
            "pid": ids,
            "income": rng.lognormal(10, 1, len(ids)),
            "group": rng.choice(["a", "b"], len(ids)),
        }
    )


def _with(base: pd.DataFrame, rows: int, income: float, group: str) -> pd.DataFrame:
    person = pd.DataFrame({"pid": [-1] * rows, "income": [income] * rows, "group": [group] * rows})
    return pd.concat([base, person], ignore_index=True)


def _neighbours(neighbouring: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """D with the attacked person (400 rows); D' without them (add-remove) or with an ordinary
    person in their place (replace-one, one row)."""
    base = _people()
    d = _with(base, 400, OUTLIER, RARE)
    d2 = base if neighbouring == "add-remove" else _with(base, 1, 20_000.0, "a")
    return d, d2


def estimate(data, column, kind, *, person, epsilon, delta, neighbouring, rng):
    """One estimate of `column` through the catalogue row: (its result, the manifest)."""
    out = run_release(
        SCHEMA_ESTIMATE,
        data[[column, *([person.column] if person else [])]],
        Schema([IgnoredColumn(column)], person),
        epsilon=epsilon,
        delta=delta,
        neighbouring=neighbouring,
        columns=[column],
        params={"kind": kind},
        rng=rng,
    )
    return json.loads(out.files[ESTIMATE_RESULTS])[column], out.manifest


def _events(data, kind, neighbouring, person, seed) -> np.ndarray:
    """1 where the attack succeeds: the rare category is released, or the upper bound is 1e10
    or more; 0 elsewhere. One estimate per draw."""
    rng = seeded_source(seed)
    delta = DELTA if kind == "categorical" else 0.0
    out = np.empty(N_PER_SIDE, dtype=np.int64)
    column = "group" if kind == "categorical" else "income"
    for i in range(N_PER_SIDE):
        found, _manifest = estimate(
            data,
            column,
            kind,
            person=person,
            epsilon=EPSILON,
            delta=delta,
            neighbouring=neighbouring,
            rng=rng,
        )
        if kind == "categorical":
            out[i] = RARE in found["categories"]
        else:
            out[i] = found["upper"] is None or found["upper"] >= 1e10
    return out


@pytest.mark.audit
@pytest.mark.parametrize(
    "kind, neighbouring", [("categorical", "replace-one"), ("numeric", "add-remove")]
)
@pytest.mark.parametrize("person, honest", [(PERSON, True), (None, False)])
def test_the_audit_attack_is_within_the_requested_epsilon_delta(kind, neighbouring, person, honest):
    """Honest: per person (k = 2). Twin (person=None): the row-level estimate the portal ran."""
    d, d2 = _neighbours(neighbouring)
    delta = DELTA if kind == "categorical" else 0.0
    with_person = _events(d, kind, neighbouring, person, seed=41)
    without = _events(d2, kind, neighbouring, person, seed=42)
    result = audit_neighbours(
        with_person, without, epsilon=EPSILON, delta=delta, thresholds=np.arange(2), alpha=ALPHA
    )
    rates = f"rate with {with_person.mean():.4f}, without {without.mean():.4f}"
    print(("honest" if honest else "twin at row level"), kind, rates, result.summary())
    assert result.passed == honest, rates
    if not honest:  # the audit's figure: released (or the bound lifted) in (almost) every run
        assert with_person.mean() >= 0.999


@pytest.mark.parametrize("neighbouring, group", [("replace-one", 4), ("add-remove", 2)])
def test_the_noise_is_the_person_sensitivity_over_the_requested_epsilon(neighbouring, group):
    """Categories: one noise call at scale g / epsilon (g = 2k or k). Bounds: the recorded scales
    spend at most epsilon / g for one row (permute-and-flip 2 / scale, then the larger of the two
    scans' 1 / threshold scale + 1 / count scale: they read disjoint rows), so g rows spend at
    most the requested epsilon, not a value from the code under test; the manifest states the
    unit, k and the sensitivity g."""
    d, _ = _neighbours(neighbouring)
    for kind in ("numeric", "categorical"):
        recorder = RecordingSource(seeded_source(0))
        _found, manifest = estimate(
            d,
            "income" if kind == "numeric" else "group",
            kind,
            person=PERSON,
            epsilon=0.5,
            delta=1e-6,
            neighbouring=neighbouring,
            rng=recorder,
        )
        scales = [c.scale for c in recorder.noise_calls()]
        if kind == "numeric":
            scans = [1 / scales[i] + 1 / scales[i + 1] for i in (1, 3)]
            row_epsilon = 2 / scales[0] + max(scans)
            assert len(scales) == 5 and 0.999 * 0.5 / group < row_epsilon <= 0.5 / group
        else:
            assert scales == [pytest.approx(group / 0.5, rel=1e-12)]
            assert scales[0] >= group / 0.5  # never less noise than the group needs
        guarantee = manifest["guarantee"]
        assert guarantee["unit"] == PERSON.unit() and guarantee["sensitivity"] == group
        assert guarantee["neighbouring"] == neighbouring and guarantee["max_rows_per_person"] == 2


@pytest.mark.parametrize("neighbouring", ["replace-one", "add-remove"])
@pytest.mark.parametrize("epsilon, delta", [(0.01, 1e-6), (0.1, 1e-9), (1.0, 1e-5)])
def test_a_category_held_by_one_person_stays_within_delta_however_many_rows(
    neighbouring, epsilon, delta
):
    """Exact discrete Laplace tails, computed here: one person keeps at most k rows of a value
    no one else holds; P[released] times the relation's factor (1 + e^epsilon replace-one,
    e^epsilon add-remove, as for one row) stays within the requested delta for k = 1, 2, 5, 10."""
    for k in (1, 2, 5, 10):
        group = k if neighbouring == "add-remove" else 2 * k
        row_epsilon, row_delta = approx_group_budget(epsilon, delta, group)
        assert group * row_epsilon <= epsilon
        assert row_delta * math.fsum(math.exp(i * row_epsilon) for i in range(group)) <= delta
        scale = 1 / row_epsilon
        tau = category_threshold(scale, row_epsilon, row_delta, "add-remove")
        a = math.exp(-1 / scale)
        released = a ** (tau - k) / (1 + a)  # P(k + Z >= tau): all k kept rows hold the value
        factor = 1 + math.exp(epsilon) if neighbouring == "replace-one" else math.exp(epsilon)
        assert factor * released <= delta, (k, released)
