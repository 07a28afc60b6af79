"""Summary statistics (mechanisms/statistics.py): requests, budget split, outputs, intervals.

Coverage audits run the real per-statistic code (`Computer`) N times on a fixed table with a
seeded source and count how often the 95% interval holds the true value (the statistic of the
clamped table). Exact and linearised intervals (count, sum, mean, variance) must cover
95% +- 1%: count and sum with N = 10,000 draws (sd 0.22%, an honest interval fails with
probability 4e-6), the means with N = 4,000 (sd 0.34%: about 0.4% per test, two-sided
2.9 sd; they cost 6 ms a draw), the variance as stated in its test. Quantile
intervals are conservative: they must cover at least 94% (N = 300; an honest 95% interval
fails with probability 18% were it exactly 95%, far less at the near-100% they reach), at
epsilon 10 per quantile so that the 5% shares of the interval ends leave it narrower than the
range (the estimate spends POINT_SHARE = 95% of epsilon, both ends together 5%). Each audit
has a broken twin the same check must reject: half-widths x 0.7 for the exact/linearised
intervals, and for the quantiles a rank offset of the wrong sign (ends aimed inside) or the
bound candidates left uncapped.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from mechanisms import statistics
from mechanisms.catalogue import run_release
from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource, seeded_source
from mechanisms.schema import Schema
from mechanisms.statistics import Computer, parse_request, quantiles

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {
                "name": "x",
                "type": "numeric",
                "lower": 0,
                "upper": 100,
                "bins": 10,
                "missing": "reject",
            },
            {
                "name": "y",
                "type": "numeric",
                "lower": -50,
                "upper": 50,
                "bins": 4,
                "missing": "reject",
            },
            {
                "name": "g",
                "type": "categorical",
                "categories": ["a", "b"],
                "unknown": "other",
                "missing": "reject",
            },
            {
                "name": "h",
                "type": "categorical",
                "categories": ["u", "v"],
                "unknown": "reject",
                "missing": "reject",
            },
        ]
    }
)
_rs = np.random.default_rng(20261201)  # the fixed table (not a noise source)
TABLE = pd.DataFrame(
    {
        "x": 100 * _rs.beta(2, 5, 1200),
        "y": _rs.normal(0, 20, 1200),
        "g": _rs.choice(["a", "b", "c"], 1200, p=[0.5, 0.4, 0.1]),
        "h": _rs.choice(["u", "v"], 1200),
    }
)
CLAMPED_X = TABLE["x"].clip(0, 100)


def _release(params, epsilon=1.0, neighbouring="add-remove", seed=1, data=TABLE):
    out = run_release(
        "statistics",
        data,
        SCHEMA,
        epsilon=epsilon,
        neighbouring=neighbouring,
        columns=["x", "y", "g", "h"],
        params=params,
        rng=seeded_source(seed),
    )
    return out, pd.read_csv(pd.io.common.BytesIO(out.files["statistics.csv"]))


def test_it_writes_one_row_per_statistic_and_group_with_the_declared_columns():
    out, table = _release({"stat": ["count", "mean:x", "median:y"], "by": ["g", "h"]})
    assert list(table.columns) == [
        "statistic", "column", "g", "h", "estimate", "ci_lower", "ci_upper", "noise_scale",
        "epsilon",
    ]  # fmt: skip
    groups = [(g, h) for g in SCHEMA.axis_labels("g") for h in SCHEMA.axis_labels("h")]
    assert len(table) == 3 * len(groups)
    assert list(zip(table["g"], table["h"], strict=True))[: len(groups)] == groups  # declared
    assert set(table["statistic"]) == {"count", "mean", "median"}
    assert (table["ci_lower"] <= table["estimate"]).all()
    assert (table["estimate"] <= table["ci_upper"]).all()
    assert out.spent["epsilon"] <= 1.0
    assert out.manifest["parameters"]["stat"] == ["count", "mean:x", "median:y"]


def test_groups_come_from_the_declared_categories_only():
    only_a = TABLE[TABLE["g"] == "a"]
    _, table = _release({"stat": ["count"], "by": ["g"]}, data=only_a)
    assert list(table["g"]) == SCHEMA.axis_labels("g")  # b, (other), (missing): empty, released


def test_the_budget_is_split_evenly_or_by_weights_and_never_overspent():
    request = parse_request(
        SCHEMA, {"stat": ["mean:x", "sum:y", "q90:x"]}, epsilon=1.0, neighbouring="add-remove"
    )
    assert sum(Fraction(s) for s in request.shares) <= 1
    assert request.shares[0] == pytest.approx(1 / 3)
    weighted = parse_request(
        SCHEMA,
        {"stat": ["mean:x", "sum:y"], "weights": "3, 1"},
        epsilon=0.7,
        neighbouring="add-remove",
    )
    assert weighted.shares == pytest.approx((0.525, 0.175))
    assert sum(Fraction(s) for s in weighted.shares) <= Fraction(0.7)
    out, table = _release({"stat": ["mean:x", "sum:y", "q90:x"], "by": "g"}, epsilon=0.3)
    assert Fraction(out.spent["epsilon"]) <= Fraction(0.3)
    assert table.groupby("statistic")["epsilon"].first().sum() == pytest.approx(0.3)


def test_under_replace_one_the_ungrouped_count_is_public_and_free():
    request = parse_request(
        SCHEMA, {"stat": ["count", "mean:x"]}, epsilon=1.0, neighbouring="replace-one"
    )
    assert request.shares == (0.0, 1.0)
    _, table = _release({"stat": ["count", "mean:x"]}, neighbouring="replace-one")
    count = table[table["statistic"] == "count"].iloc[0]
    assert count["estimate"] == count["ci_lower"] == count["ci_upper"] == len(TABLE)


def _picks(out):
    return out.manifest["parameters"]["quantile_interval_picks"]


def test_a_released_count_or_a_public_n_can_spare_a_quantiles_interval_pick():
    """`quantiles.ends_skipped` on the released count's 95% upper end (computed first, even
    when listed after the quantile): the small group "(other)" (about 120 rows) gets the
    declared range and an estimate at the whole epsilon, groups a and b (about 600 and 480)
    keep their pick; the manifest says which, recomputable from the released table. Without
    a count nothing is skipped; under replace-one without groups n is public."""
    out, table = _release({"stat": ["median:x", "count"], "by": ["g"]})
    count, median = table[table["statistic"] == "count"], table[table["statistic"] == "median"]
    spec, share = SCHEMA.column("x"), 0.5
    skip = [quantiles.ends_skipped(spec, 0.5, share, "add-remove", u) for u in count["ci_upper"]]
    assert skip == [False, False, True]
    assert _picks(out) == {"median:x": ["declared range" if s else "picked" for s in skip]}
    point, _ = statistics.quantile_shares(share)
    for skipped, row in zip(skip, median.itertuples(), strict=True):
        scale = statistics.rank_scale(0.5, share if skipped else point, "add-remove")
        assert row.noise_scale == pytest.approx(scale)
        assert not skipped or (row.ci_lower, row.ci_upper) == (0, 100)
    assert _picks(_release({"stat": ["median:x"], "by": ["g"]})[0]) == {"median:x": ["picked"] * 3}
    small, large = TABLE.iloc[:100], TABLE
    for data, expected in ((small, "declared range"), (large, "picked")):
        out, _ = _release({"stat": ["median:x"]}, neighbouring="replace-one", data=data)
        assert _picks(out) == {"median:x": [expected]}


@pytest.mark.parametrize(
    "params, message",
    [
        ({}, "name at least one"),
        ({"stat": ["average:x"]}, "is unknown"),
        ({"stat": ["mean:g"]}, "categorical"),
        ({"stat": ["mean"]}, "needs a column"),
        ({"stat": ["q100:x"]}, "between 0 and 100"),
        ({"stat": ["mean:x"], "by": ["x"]}, "group by categorical"),
        ({"stat": ["mean:x"], "by": ["g", "h", "g"]}, "at most two"),
        ({"stat": ["mean:x", "sum:x"], "weights": "1"}, "one per statistic"),
        ({"stat": ["mean:x"], "weights": "-1"}, "positive"),
        ({"stat": ["mean:nope"]}, "not in the schema"),
    ],
)
def test_bad_requests_get_a_clear_message(params, message):
    with pytest.raises(MechanismError, match=message):
        _release(params)


def test_the_plan_previews_every_statistic_before_spending():
    plan = statistics.statistics_plan(
        SCHEMA,
        ["x", "g"],
        {"stat": ["count", "mean:x", "median:x"], "by": ["g"]},
        epsilon=1.0,
        delta=0.0,
        neighbouring="add-remove",
        n=1200,
    )
    rows = plan.details["statistics"]
    assert [r["statistic"] for r in rows] == ["count", "mean", "median"]
    assert all(r["halfwidth"] > 0 and r["epsilon"] > 0 for r in rows)
    groups = len(SCHEMA.axis_labels("g"))
    assert plan.outputs == 3 * groups and plan.support == groups
    # the preview's count half-width is the one the release uses
    assert rows[0]["halfwidth"] == statistics.discrete_laplace_halfwidth(rows[0]["noise_scale"])


def test_the_linearised_interval_matches_exact_single_noise_quantiles():
    assert statistics.linear_halfwidth([(1.0, "laplace", 2.0)]) == pytest.approx(2 * math.log(20))
    combined = statistics.linear_halfwidth([(1.0, "laplace", 2.0), (1.0, "laplace", 1e-9)])
    assert combined == pytest.approx(2 * math.log(20), rel=0.02)
    k = statistics.discrete_laplace_halfwidth(20.0)
    a = math.exp(-1 / 20)
    assert 2 * a ** (k + 1) / (1 + a) <= 0.05 < 2 * a**k / (1 + a)  # smallest such k


def test_the_command_line_takes_repeated_statistics(tmp_path):
    from mechanisms.__main__ import main

    data, schema = tmp_path / "d.csv", tmp_path / "s.json"
    TABLE.to_csv(data, index=False)
    schema.write_text(json.dumps(SCHEMA.to_dict()))
    argv = ["statistics", "--input", str(data), "--schema", str(schema), "--epsilon", "1"]
    argv += ["--stat", "mean:x", "--stat", "median:y", "--by", "g", "--seed", "3"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    table = pd.read_csv(tmp_path / "o" / "statistics.csv")
    groups = len(SCHEMA.axis_labels("g"))
    assert list(table["statistic"]) == ["mean"] * groups + ["median"] * groups


# ---------------------------------------------------------------- coverage audits

N_CHEAP, N_EXACT, N_QUANTILE = 10_000, 4_000, 300


TIED = TABLE.assign(x=(TABLE["x"] / 2.3).round() * 23 / 10)  # heavy ties, on the candidates
ZEROS = TABLE.assign(x=TABLE["x"].where(TABLE["x"] >= 30, 0.0))  # over half tied at the bound 0


def _truth(kind, alpha=None, data=TABLE):
    x = data["x"].clip(0, 100)
    return {
        "count": len(x),
        "sum": x.sum(),
        "mean": x.mean(),
        "variance": x.var(ddof=0),
        "std": x.std(ddof=0),
        "quantile": None if alpha is None else float(np.quantile(x, alpha)),
    }[kind]


def _coverage(kind, draws, epsilon=1.0, neighbouring="add-remove", alpha=None, data=TABLE):
    """Shares of `draws` releases whose 95% interval holds the truth: (honest, twin), the twin
    being the same intervals with half-widths x 0.7, on the same draws."""
    stat = f"q{alpha * 100:g}:x" if alpha else ("count" if kind == "count" else f"{kind}:x")
    request = parse_request(SCHEMA, {"stat": [stat]}, epsilon=epsilon, neighbouring=neighbouring)
    run = Computer(data, SCHEMA, request, neighbouring, seeded_source(len(stat) + draws))
    truth, hits = _truth(kind, alpha, data), np.zeros(2)
    for _ in range(draws):
        row = statistics._run_one(run, request.statistics[0], request.shares[0])[0]
        for i, shrink in enumerate((1.0, 0.7)):
            lower = row.estimate - shrink * (row.estimate - row.lower)
            upper = row.estimate + shrink * (row.upper - row.estimate)
            hits[i] += lower <= truth <= upper
    return hits / draws


@pytest.mark.audit
@pytest.mark.parametrize(
    "kind, epsilon, draws",
    [("count", 0.05, N_CHEAP), ("sum", 0.2, N_CHEAP), ("mean", 0.2, N_EXACT)],
)
def test_intervals_cover_95_percent_and_a_narrowed_twin_is_caught(kind, epsilon, draws):
    # count at epsilon 0.05: scale 20, so the discrete interval's exact level is 95.1%
    honest, twin = _coverage(kind, draws, epsilon=epsilon)
    assert 0.94 <= honest <= 0.96, (kind, honest)
    assert not 0.94 <= twin <= 0.96, (kind, twin)


@pytest.mark.audit
def test_variance_interval_covers_95_percent_and_a_narrowed_twin_is_caught():
    """N = 1,500 per commit: sd 0.56%, tolerance +-1.6% (2.9 sd, false alarm about 0.4%).
    The standard deviation's interval is the square root of this one's ends (same coverage)."""
    honest, twin = _coverage("variance", 1_500, epsilon=0.5)
    assert 0.934 <= honest <= 0.966, honest
    assert twin < 0.934, twin


@pytest.mark.audit
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["variance", "std"])
def test_variance_and_std_cover_95_plus_minus_1_percent_long(kind):
    honest, twin = _coverage(kind, N_EXACT, epsilon=0.5)
    assert 0.94 <= honest <= 0.96, honest
    assert twin < 0.94, twin


@pytest.mark.audit
def test_public_n_mean_interval_is_exact_under_replace_one():
    honest, twin = _coverage("mean", N_EXACT, epsilon=0.1, neighbouring="replace-one")
    assert 0.94 <= honest <= 0.96, honest
    assert twin < 0.94, twin


def _flipped_margin(monkeypatch):
    real = quantiles.quantile_rank_margin
    monkeypatch.setattr(quantiles, "quantile_rank_margin", lambda *a: -real(*a))


def _uncapped_bounds(monkeypatch):
    monkeypatch.setattr(quantiles, "cap_bounds", lambda low, high, cap: (low, high))


@pytest.mark.audit
@pytest.mark.parametrize(
    "alpha, data, neighbouring, twin",
    [
        (0.5, TABLE, "add-remove", _flipped_margin),
        (0.9, TABLE, "add-remove", _flipped_margin),
        (0.5, TIED, "add-remove", _uncapped_bounds),
        (0.25, TIED, "replace-one", _flipped_margin),
        (0.5, ZEROS, "add-remove", _uncapped_bounds),
        (0.9, ZEROS, "replace-one", _flipped_margin),
    ],
)
def test_quantile_intervals_are_conservative_and_a_broken_twin_is_caught(
    alpha, data, neighbouring, twin, monkeypatch
):
    """Also on tables of heavy ties (x rounded to multiples of 2.3, which are candidates; over
    half the values tied at the lower bound 0), where the interval still holds
    (`Computer.ends`: its argument needs no assumption on the data). Twins: the rank offset M
    with the wrong sign (ends aimed inside), or the bound candidates' scores left uncapped
    (where the first twin cannot show: a median between two tied values with nothing between
    them, or tied at the bound, where only the lower bound is a valid lower end)."""
    honest = _ends_coverage(alpha, data, neighbouring)
    assert honest >= 0.94, honest
    twin(monkeypatch)
    broken = _ends_coverage(alpha, data, neighbouring)
    assert broken < 0.94, broken


def _ends_coverage(alpha, data, neighbouring, epsilon=10.0):
    """Share of N_QUANTILE picks of the interval's ends (lo, hi) that hold the true quantile.

    The ends alone: the released interval also holds the estimate (it is [min(lo, estimate),
    max(hi, estimate)]), which can only raise its coverage, and would hide a broken twin where
    the estimate is exact (a quantile on a tied candidate)."""
    request = parse_request(
        SCHEMA, {"stat": [f"q{alpha * 100:g}:x"]}, epsilon=epsilon, neighbouring=neighbouring
    )
    run = Computer(data, SCHEMA, request, neighbouring, seeded_source(int(alpha * 100)))
    values, spec = run.values("x")[0], SCHEMA.column("x")
    _, ends = statistics.quantile_shares(request.shares[0])
    truth = _truth("quantile", alpha, data)
    picks = [run.ends(values, spec, alpha, ends) for _ in range(N_QUANTILE)]
    return float(np.mean([lo <= truth <= hi for lo, hi in picks]))


@pytest.mark.audit
@pytest.mark.parametrize("rows, honest", [(90, True), (0, False)])
def test_the_narrowing_bound_holds_on_a_worst_case_table(rows, honest):
    """`quantiles.narrowing_chance`, which decides whether the ends' pick is skipped, bounds
    how often the pick returns anything narrower than the declared range: 90 values tied at
    50.5 (between two candidates, half the pairs at the best score a non-bound pair can reach),
    median at epsilon 1 (ends: 5%). The bound is about 0.43 and the pick narrows about 17% of
    N = 1,000 times (sd 1.2%; the check allows 3 sd above the bound: false alarm below 0.2%).
    Twin: the bound for an empty group (rows = 0, about 0.05), which ignores the group's
    rows and must be exceeded."""
    data = pd.DataFrame({"x": [50.5] * 90, "y": 0.0, "g": "a", "h": "u"})
    request = parse_request(SCHEMA, {"stat": ["median:x"]}, epsilon=1.0, neighbouring="add-remove")
    run = Computer(data, SCHEMA, request, "add-remove", seeded_source(90))
    spec, (_, part) = SCHEMA.column("x"), statistics.quantile_shares(1.0)
    picks = [run.ends(run.values("x")[0], spec, 0.5, part) for _ in range(1_000)]
    narrowed = float(np.mean([lo > 0 or hi < 100 for lo, hi in picks]))
    size = len(statistics.candidates(spec, quantiles.END_CANDIDATES))
    bound = quantiles.narrowing_chance(0.5, part, "add-remove", size, rows)
    assert (narrowed <= bound + 3 * math.sqrt(bound * (1 - bound) / 1_000)) is honest, (
        narrowed,
        bound,
    )


def test_tied_whole_number_median_is_the_likeliest_pick():
    """A 0-7 whole-number column, 10 values below 3, 50 tied at 3, 40 above (median 3): the
    tie-aware score puts the true median at distance 0, and its exact expected error at
    epsilon 1 is below that of OpenDP's tie convention (ties on neither side; the twin),
    which scores 4 better than 3 here. Exact (no sampling)."""
    from mechanisms.statistics import quantiles as q

    values = np.array([1.0] * 10 + [3.0] * 50 + [5.0] * 40)
    grid = np.arange(8.0)
    tied = q.rank_distances(values, grid, 0.5)
    below = (values[:, None] < grid).sum(0)
    above = (values[:, None] > grid).sum(0)
    neither = np.abs(0.5 * below - 0.5 * above)  # the twin: OpenDP's convention, in rows
    assert int(np.argmin(tied)) == 3 and tied[3] == 0
    assert int(np.argmin(neither)) != 3

    def error(score):
        weight = np.exp(-(score - score.min()) / q.rank_scale(0.5, 1.0, "add-remove"))
        return float(np.sum(weight * np.abs(grid - 3.0)) / weight.sum())

    assert error(tied) < error(neither)


class _NoiseOf(RandomSource):
    """Every discrete-Laplace draw is `value` (an edge case no seeded run reaches on demand)."""

    def __init__(self, value):
        self.value = value

    def discrete_laplace(self, scale, size):
        return np.full(size, self.value, dtype=np.int64)


@pytest.mark.parametrize("noise", [-100, -1, 0, 100])
def test_a_count_interval_holds_its_estimate_even_when_the_noise_is_far_below_zero(noise):
    """A count's estimate is cut at 0 (no group has fewer rows); its interval is cut there too,
    so ci_lower <= estimate <= ci_upper always (a group of "other" with no rows, noise -100,
    once gave the estimate 0 and the interval [0, -44])."""
    data = TABLE[TABLE["g"] != "c"]  # the "other" group is empty
    request = parse_request(
        SCHEMA, {"stat": ["count"], "by": ["g"]}, epsilon=0.3, neighbouring="add-remove"
    )
    rows = Computer(data, SCHEMA, request, "add-remove", _NoiseOf(noise)).count(0.3)
    assert [row.lower <= row.estimate <= row.upper for row in rows] == [True] * 3
    assert rows[2].estimate == max(noise, 0) and rows[2].upper >= 0
