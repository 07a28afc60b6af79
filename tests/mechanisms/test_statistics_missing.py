"""Summary statistics over a numeric column that may hold missing values ("missing": "cell").

The statistics are computed over the present values, with the number of present values kept
private (a noisy count of them) under both neighbouring relations; the manifest names the
columns whose missing values were left out; a grouping column's missing values form the
"(missing)" group. Coverage audits as in test_statistics.py, on a table where 10% of x is
missing: the truth is the statistic of the clamped present values. Mean: N = 4,000 draws (sd
0.34%; 95% +- 1% is 2.9 sd, false alarm about 0.4%); sum: N = 10,000 (sd 0.22%); quantile
ends: N = 300, at least 94%. Twins the same checks must reject: half-widths x 0.7 (mean, sum);
for the mean, the count of ALL rows instead of the present ones (the bias that leaving values
out must not bring); for the quantile, a rank offset of the wrong sign.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from mechanisms import statistics
from mechanisms.catalogue import run_release
from mechanisms.noise import seeded_source
from mechanisms.release_request import PlanInputs
from mechanisms.schema import Schema
from mechanisms.statistics import Computer, parse_request, quantiles

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
            {"name": "g", "type": "categorical", "categories": ["a", "b"], "unknown": "reject"},
        ]
    }
)
_rs = np.random.default_rng(20261202)  # the fixed table (not a noise source)
X = 100 * _rs.beta(2, 5, 1200)
TABLE = pd.DataFrame(
    {
        # every 10th value missing: a mean dividing by all 1,200 rows is 10% off centre
        "x": np.where(np.arange(1200) % 10 == 0, np.nan, X),
        "g": np.where(np.arange(1200) % 7 == 0, None, _rs.choice(["a", "b"], 1200)),
    }
)
PRESENT = TABLE["x"].dropna().clip(0, 100)


def _release(params, neighbouring="add-remove", epsilon=1.0, seed=1):
    out = run_release(
        "statistics",
        TABLE,
        SCHEMA,
        epsilon=epsilon,
        neighbouring=neighbouring,
        columns=["x", "g"],
        params=params,
        rng=seeded_source(seed),
    )
    return out, pd.read_csv(io.BytesIO(out.files["statistics.csv"]), keep_default_na=False)


@pytest.mark.parametrize("neighbouring", ["add-remove", "replace-one"])
def test_statistics_run_over_the_present_values_and_say_so(neighbouring):
    stats = ["count", "sum:x", "mean:x", "std:x", "median:x"]
    out, table = _release({"stat": stats}, neighbouring=neighbouring, epsilon=50.0)
    assert out.manifest["parameters"]["missing_values_left_out"] == ["x"]
    assert "left out" in statistics.FILES["statistics.csv"]
    row = table.set_index("statistic")["estimate"].astype(float)
    assert row["mean"] == pytest.approx(PRESENT.mean(), abs=1.0)
    assert row["sum"] == pytest.approx(PRESENT.sum(), rel=0.02)
    assert row["median"] == pytest.approx(PRESENT.median(), abs=1.5)
    assert row["std"] == pytest.approx(PRESENT.std(ddof=0), abs=1.0)
    # the mean's count is noisy even under replace-one: the number of present values is private
    mean = table[table["statistic"] == "mean"].iloc[0]
    assert float(mean["ci_lower"]) < float(mean["estimate"]) < float(mean["ci_upper"])


def test_the_manifest_states_each_statistics_sensitivities():
    """Replace-one, no groups, x in [0, 100] may be missing: the count of present values moves
    by 1 (OpenDP's sized map) and the mean's sum of x - c (c = 50, the middle of the bounds) by
    upper - lower = 100 (the exact sums' bound, `measures.sum_grid`, widened to hold 0 for a
    value turned missing: at most 2^-28 of the bound above it for the noise grid's rounding,
    none here)."""
    out, _ = _release({"stat": ["count", "mean:x", "median:x"]}, neighbouring="replace-one")
    count, mean, median = out.manifest["parameters"]["sensitivities"]
    assert count["sensitivity"] == {}  # the row count is public: released exactly
    assert mean["sensitivity"]["count of present values"] == 1
    assert 100 <= mean["sensitivity"]["sum of x - c"] <= 100 * (1 + 2**-28)
    assert median["sensitivity"] == {"rank score per candidate": 1.0}
    assert "pure epsilon-DP" in mean["guarantee"]


def test_a_grouping_column_with_missing_values_has_a_missing_group():
    _, table = _release({"stat": ["count", "mean:x"], "by": ["g"]}, epsilon=50.0)
    assert list(table["g"]) == ["a", "b", "(missing)"] * 2
    counts = table[table["statistic"] == "count"].set_index("g")["estimate"].astype(float)
    assert counts["(missing)"] == pytest.approx(TABLE["g"].isna().sum(), abs=3)
    means = table[table["statistic"] == "mean"].set_index("g")["estimate"].astype(float)
    in_missing = TABLE.loc[TABLE["g"].isna(), "x"].dropna()
    assert means["(missing)"] == pytest.approx(in_missing.mean(), abs=3.0)


def test_the_plan_names_the_columns_whose_missing_values_are_left_out():
    plan = statistics.statistics_plan(
        PlanInputs(
            schema=SCHEMA,
            columns=["x"],
            params={"stat": ["mean:x"]},
            epsilon=1.0,
            delta=0.0,
            neighbouring="replace-one",
            n=1200,
        )
    )
    assert plan.details["missing_left_out"] == ["x"]
    assert plan.details["statistics"][0]["halfwidth"] > 0


# ---------------------------------------------------------------- coverage audits


def _all_rows_count(monkeypatch):
    """The twin: means divided by a noisy count of all rows, missing ones included."""
    real = Computer.noisy_counts
    monkeypatch.setattr(Computer, "noisy_counts", lambda self, e, column=None: real(self, e))


def _coverage(stat, draws, epsilon, neighbouring, truth, shrinks=(1.0, 0.7)):
    """Share of `draws` releases whose interval, scaled by each of `shrinks` about the
    estimate, holds `truth`: the honest interval (1.0) and its 0.7x-narrow twin are judged on
    the same draws."""
    request = parse_request(SCHEMA, {"stat": [stat]}, epsilon=epsilon, neighbouring=neighbouring)
    run = Computer(TABLE, SCHEMA, request, neighbouring, seeded_source(draws + len(stat)))
    hits = np.zeros(len(shrinks))
    for _ in range(draws):
        row = statistics.compute._run_one(run, request.statistics[0], request.shares[0])[0]
        for k, shrink in enumerate(shrinks):
            lower = row.estimate - shrink * (row.estimate - row.lower)
            upper = row.estimate + shrink * (row.upper - row.estimate)
            hits[k] += lower <= truth <= upper
    return hits / draws


@pytest.mark.audit
@pytest.mark.parametrize("neighbouring", ["add-remove", "replace-one"])
def test_mean_interval_covers_95_percent_with_missing_values(neighbouring, monkeypatch):
    honest, narrowed = _coverage("mean:x", 4_000, 0.2, neighbouring, PRESENT.mean())
    assert 0.94 <= honest <= 0.96, honest
    assert narrowed < 0.94, narrowed
    _all_rows_count(monkeypatch)
    (biased,) = _coverage("mean:x", 4_000, 0.2, neighbouring, PRESENT.mean(), shrinks=(1.0,))
    assert biased < 0.94, biased


@pytest.mark.audit
@pytest.mark.parametrize("neighbouring", ["add-remove", "replace-one"])
def test_sum_interval_covers_95_percent_with_missing_values(neighbouring):
    honest, narrowed = _coverage("sum:x", 10_000, 0.2, neighbouring, PRESENT.sum())
    assert 0.94 <= honest <= 0.96, honest
    assert narrowed < 0.94, narrowed


@pytest.mark.audit
@pytest.mark.parametrize("alpha", [0.5, 0.9])
def test_quantile_ends_cover_with_missing_values(alpha, monkeypatch):
    truth = float(np.quantile(PRESENT, alpha))

    def ends_coverage():
        request = parse_request(
            SCHEMA, {"stat": [f"q{alpha * 100:g}:x"]}, epsilon=10.0, neighbouring="replace-one"
        )
        run = Computer(TABLE, SCHEMA, request, "replace-one", seeded_source(int(alpha * 10)))
        values, spec = run.values("x")[0], SCHEMA.column("x")
        _, ends = statistics.quantile_shares(request.shares[0])
        picks = [run.ends(values, spec, alpha, ends) for _ in range(300)]
        return float(np.mean([lo <= truth <= hi for lo, hi in picks]))

    assert ends_coverage() >= 0.94
    real = quantiles.quantile_rank_margin
    monkeypatch.setattr(quantiles, "quantile_rank_margin", lambda *a: -real(*a))
    assert ends_coverage() < 0.94
