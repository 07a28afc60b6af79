"""No phantom blanks (issue 44, item 3): MWEM's "(missing)"/"(other)" cells follow the noise.

A complete column's structural cells hold no row; before the rule (mechanisms.mwem.structural)
the model gave them the mass of the measurement noise, and synthetic tables of complete
columns had blanks (15% of a census sample's rows at ε = .1). Each test runs the portal's
release (run_release, default plan) and has a broken twin: today's behaviour, the rule turned
into a no-op, which the same assertion catches.
"""

import io

import numpy as np
import pandas as pd
import pytest

from mechanisms import Schema, histogram
from mechanisms.accuracy import ZERO_LEVEL, zero_threshold
from mechanisms.catalogue import run_release
from mechanisms.mwem import mwem
from mechanisms.mwem import release as mwem_release
from mechanisms.mwem.structural import structural_cells, unsupported_cells
from mechanisms.noise import seeded_source
from mechanisms.workload import expand_workload, marginals_spec

N = 10_000
EPSILON = 0.1
RELEASES = 20
SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
        {"name": "region", "type": "categorical", "categories": ["N", "S", "E", "W"]},
        {"name": "income", "type": "numeric", "lower": 0, "upper": 1e5, "bins": 4},
    ]
}


def _table(missing_income: float) -> pd.DataFrame:
    gen = np.random.default_rng(44)
    income = gen.gamma(2.0, 15_000, N).clip(0, 99_999).round()
    frame = pd.DataFrame(
        {
            "age": gen.integers(18, 90, N),
            "sex": gen.choice(["F", "M"], N),
            "region": gen.choice(["N", "S", "E", "W"], N, p=[0.4, 0.3, 0.2, 0.1]),
            "income": income,
        }
    )
    frame.loc[gen.random(N) < missing_income, "income"] = np.nan
    return frame


def _blank_shares(frame: pd.DataFrame, column: str | None) -> list[float]:
    """Per release: the share of synthetic rows with a blank (in `column`, or any column)."""
    schema = Schema.from_dict(SCHEMA)
    shares = []
    for seed in range(RELEASES):
        out = run_release("mwem", frame, schema, epsilon=EPSILON, rng=seeded_source(seed))
        synthetic = pd.read_csv(io.BytesIO(out.files["synthetic.csv"]), dtype=str)
        blank = synthetic.isna() if column is None else synthetic[[column]].isna()
        shares.append(float(blank.any(axis=1).mean()))
    return shares


def _today(monkeypatch) -> None:
    """The broken twin: structural cells sampled as fitted (no rule)."""
    monkeypatch.setattr(mwem_release, "zero_cells", lambda model, cells: None)


@pytest.mark.parametrize("broken", [False, True])
def test_complete_columns_get_no_blanks_and_the_twin_does(monkeypatch, broken):
    """20 releases of 10,000 complete rows at ε = .1: at most 2 with any blank, mean share < 1%.

    Under the rule a structural cell of a complete column survives a release with probability
    at most ZERO_LEVEL = .001; the table has 6 (4 missing, 2 other), so a release has a blank
    with probability at most .006 and 3 or more of 20 with at most C(20,3)·.006³ < 3·10^-4:
    the false-alarm rate. Today's behaviour puts blanks in nearly every release.
    """
    if broken:
        _today(monkeypatch)
    shares = _blank_shares(_table(missing_income=0.0), None)
    passed = sum(share > 0 for share in shares) <= 2 and np.mean(shares) < 0.01
    assert passed != broken, shares


@pytest.mark.parametrize("broken", [False, True])
def test_real_missing_values_keep_their_rate_and_a_rule_dropping_them_is_caught(
    monkeypatch, broken
):
    """20% of incomes missing: the mean synthetic share over 20 releases is within 15-25%.

    The missing cell's noisy 1-way count (about 2,000 at a noise scale of at most 160 on the
    default plan) is far above its zero threshold, so the rule keeps it; the twin here is a
    rule that drops every structural cell, which the same bounds catch. Releases are seeded
    (deterministic); over random seeds the mean of 20 shares leaves the band with probability
    below 10^-6 (each share's spread is about 1.5 points at this ε).
    """
    if broken:
        monkeypatch.setattr(
            mwem_release,
            "unsupported_cells",
            lambda measurements, shape, cells: [
                (a, c) for a, found in cells.items() for c in found
            ],
        )
    shares = _blank_shares(_table(missing_income=0.2), "income")
    assert (0.15 <= np.mean(shares) <= 0.25) != broken, shares


def test_the_manifest_states_the_rule_and_names_the_zeroed_cells():
    schema = Schema.from_dict(SCHEMA)
    out = run_release("mwem", _table(0.0), schema, epsilon=EPSILON, rng=seeded_source(1))
    stated = out.manifest["parameters"]["structural_cells"]
    assert "zero mass" in stated["rule"] and f"{1 - ZERO_LEVEL:.1%}" in stated["rule"]
    assert "region: (other)" in stated["zeroed"] and "age: (missing)" in stated["zeroed"]


@pytest.mark.parametrize("terms", [1, 30])
def test_the_zero_threshold_is_exceeded_by_noise_alone_at_about_its_level(terms):
    """200,000 sums of `terms` discrete Laplace counts of scale 7 at a true count of 0: the share
    above zero_threshold(level = .01) is at most .0125 (its standard error at .01 is .00022,
    so a correct threshold fails with probability below 10^-20)."""
    gen = np.random.default_rng(7)
    p = np.exp(-1 / 7)
    noise = gen.geometric(1 - p, (200_000, terms)) - gen.geometric(1 - p, (200_000, terms))
    share = float((noise.sum(axis=1) > zero_threshold(7.0, terms, 0.01)).mean())
    assert share <= 0.0125, share


@pytest.mark.parametrize("broken", [False, True])
def test_the_perturbed_histogram_follows_the_same_rule_and_its_twin_does_not(monkeypatch, broken):
    """The perturbed histogram samples rows from its noisy counts clipped at 0: before the rule
    the positive noise of every empty cell of a complete column's "(missing)" or "(other)"
    slice became rows (about 10% of them here). 20 releases of 10,000 complete rows, 3 columns
    (144 cells, 104 in a structural slice) at ε = .1: at most 2 with any such row and a mean
    share below 1%. Each of the 5 structural slices is kept by noise alone with probability
    about .001 (normal approximation of its 24-36 noisy counts), so 3 or more of 20 releases
    with a phantom row happen with probability below 10^-4. The twin samples the clipped
    counts as they were."""
    if broken:
        monkeypatch.setattr(histogram, "_supported", lambda noisy, *args: (noisy, []))
    schema = Schema.from_dict({"columns": SCHEMA["columns"][:3]})
    frame = _table(missing_income=0.0)[["age", "sex", "region"]]
    shares = []
    for seed in range(RELEASES):
        out = run_release(
            "perturbed_histogram", frame, schema, epsilon=EPSILON, rng=seeded_source(seed)
        )
        synthetic = pd.read_csv(io.BytesIO(out.files["synthetic.csv"]), dtype=str)
        phantom = synthetic.isna() | (synthetic == "(other)")
        shares.append(float(phantom.any(axis=1).mean()))
    passed = sum(share > 0 for share in shares) <= 2 and np.mean(shares) < 0.01
    assert passed != broken, shares


def test_without_noise_the_full_table_plan_zeroes_exactly_the_empty_structural_cells():
    """ε = ∞ (scale 0) under the full-table plan (3 columns, all 3-way marginals): the rule read
    the slice sums with a normal approximation whose spread divided by the scale and failed
    (ZeroDivisionError); now a slice of true count 0 is zeroed, every other kept."""
    schema = Schema.from_dict({"columns": SCHEMA["columns"][:3]})
    columns = ["age", "sex", "region"]
    frame = _table(missing_income=0.0)[columns]
    shape = schema.domain_shape(columns)
    workload = expand_workload(marginals_spec(3), columns, shape, {"age"})
    codes = schema.encode(frame, columns)
    cells = structural_cells(schema, columns)
    result = mwem(
        codes, shape, workload, epsilon=float("inf"), rng=seeded_source(3), structural=cells
    )
    assert [m["query"].attrs for m in result.measurements] == [(0, 1, 2)]  # the full table
    zeroed = unsupported_cells(result.measurements, shape, cells)
    # age: 5 bins + (missing); sex: F, M, (other), (missing); region: N S E W, (other), (missing)
    assert sorted(zeroed) == [(0, 5), (1, 2), (1, 3), (2, 4), (2, 5)]
    # mwem itself empties them under this plan too, and says which
    assert sorted(result.zeroed) == sorted(zeroed)
    for a, cell in zeroed:
        assert result.distribution.marginal((a,))[cell] == 0
