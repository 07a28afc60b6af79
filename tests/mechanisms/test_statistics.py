"""Summary statistics (mechanisms/statistics.py): requests, budget split, outputs, intervals.

Coverage audits run the real per-statistic code (`Computer`) N times on a fixed table with a
seeded source and count how often the 95% interval holds the true value (the statistic of the
clamped table). Exact and linearised intervals (count, sum, mean, variance) must cover
95% +- 1%: count and sum with N = 10,000 draws (sd 0.22%, an honest interval fails with
probability 4e-6), the means with N = 4,000 (sd 0.34%: about 0.4% per test, two-sided
2.9 sd; they cost 6 ms a draw), the variance as stated in its test. Quantile
intervals are conservative: their ends alone must cover at least 94% (N = 300; an honest 95%
interval fails with probability 18% were it exactly 95%, far less at the near-100% they
reach), and the released interval at least 95% by a one-sided binomial test (N = 1,000, false
alarm below 10^-4 per case), at epsilons where the interval is narrower than the range (the
estimate spends POINT_SHARE = 75% of epsilon, both ends together 25%), and on a grid of
group sizes (30, 300, 3,000 ages) and epsilons (0.1, 1, 10) likewise. Each audit has a broken
twin the same check must reject: half-widths x 0.7 for the exact/linearised intervals, and for
the quantiles a rank offset of the wrong sign (ends aimed inside), the bound candidates left
uncapped, a rank offset that ignores the selection's noise, or each end judged by the span of
ranks on its wrong side.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from mechanisms import statistics
from mechanisms.catalogue import run_release
from mechanisms.counting.sql import MAX_EDGES
from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource, permute_and_flip_chances, seeded_source
from mechanisms.release_request import PlanInputs
from mechanisms.schema import Schema
from mechanisms.statistics import Computer, aggregates, parse_request, quantiles, support

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
        "epsilon", "note",
    ]  # fmt: skip
    groups = [(g, h) for g in SCHEMA.axis_labels("g") for h in SCHEMA.axis_labels("h")]
    assert len(table) == 3 * len(groups)
    assert list(zip(table["g"], table["h"], strict=True))[: len(groups)] == groups  # declared
    assert set(table["statistic"]) == {"count", "mean", "median"}
    shown = table.dropna(subset=["estimate"])
    assert (shown["ci_lower"] <= shown["estimate"]).all()
    assert (shown["estimate"] <= shown["ci_upper"]).all()
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
    keep their pick (at epsilon 1.5 per statistic: groups within two rank margins of the median,
    about 225 rows, skip it); the manifest says which, recomputable from the released table.
    Without a count the median's own count of values bounds them (`support`: on 25% of its
    epsilon); under replace-one without groups n is public."""
    out, table = _release({"stat": ["median:x", "count"], "by": ["g"]}, epsilon=3.0)
    count, median = table[table["statistic"] == "count"], table[table["statistic"] == "median"]
    spec, share = SCHEMA.column("x"), 1.5
    skip = [quantiles.ends_skipped(spec, 0.5, share, "add-remove", u) for u in count["ci_upper"]]
    assert skip == [False, False, True]
    assert _picks(out) == {"median:x": ["declared range" if s else "picked" for s in skip]}
    point, _ = statistics.quantile_shares(share)
    for skipped, row in zip(skip, median.itertuples(), strict=True):
        scale = statistics.rank_scale(0.5, share if skipped else point, "add-remove")
        assert row.noise_scale == pytest.approx(scale)
        assert not skipped or (row.ci_lower, row.ci_upper) == (0, 100)
    alone, _ = _release(
        {"stat": ["median:x"], "by": ["g"]}, epsilon=3.0
    )  # bounded by its own count
    assert alone.manifest["parameters"]["published_where"]["median:x"].startswith("a noisy count")
    assert _picks(alone) == {"median:x": ["picked", "picked", "declared range"]}
    small, large = TABLE.iloc[:100], TABLE
    for data, expected in ((small, "declared range"), (large, "picked")):
        out, _ = _release({"stat": ["median:x"]}, 3.0, neighbouring="replace-one", data=data)
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
        PlanInputs(
            schema=SCHEMA,
            columns=["x", "g"],
            params={"stat": ["count", "mean:x", "median:x"], "by": ["g"]},
            epsilon=1.0,
            delta=0.0,
            neighbouring="add-remove",
            n=1200,
        )
    )
    rows = plan.details["statistics"]
    assert [r["statistic"] for r in rows] == ["count", "mean", "median"]
    assert all(r["halfwidth"] > 0 and r["epsilon"] > 0 for r in rows)
    groups = len(SCHEMA.axis_labels("g"))
    assert plan.outputs == 3 * groups and plan.support == groups
    # the preview's count half-width is the one the release uses
    assert rows[0]["halfwidth"] == statistics.discrete_laplace_halfwidth(rows[0]["noise_scale"])


def test_the_linearised_interval_matches_exact_single_noise_quantiles():
    k = statistics.discrete_laplace_halfwidth(20.0)
    a = math.exp(-1 / 20)
    assert 2 * a ** (k + 1) / (1 + a) <= 0.05 < 2 * a**k / (1 + a)  # smallest such k
    # a sum grid's scales: the smallest k, the tail computed as e^(-(k+1)/s) (twin: the tail
    # from a^(k+1), a = e^(-1/s), whose k at 10^9 is 83 above the smallest)
    for scale in (1e9, 2.0**31 * 20):
        wide, spread = statistics.discrete_laplace_halfwidth(scale), 1 + math.exp(-1 / scale)
        tails = [2 * math.exp(-(j + 1) / scale) / spread for j in (wide, wide - 1)]
        assert tails[0] <= 0.05 < tails[1]
    assert statistics.linear_halfwidth([(1.0, 20.0)]) == k
    assert statistics.linear_halfwidth([(1.0, 20.0), (1.0, 1e-9)]) == pytest.approx(k, rel=0.02)
    # a sum's noise: a discrete Laplace on a grid far finer than its scale, Laplace's b ln 20
    fine = statistics.linear_halfwidth([(2.0**-30, 2.0**31), (1.0, 1e-9)])
    assert fine == pytest.approx(2 * math.log(20), rel=0.02)


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
        row = statistics.compute._run_one(run, request.statistics[0], request.shares[0])[0]
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


SMALL, EIGHT = TABLE.iloc[:60], TABLE.iloc[:8]


@pytest.mark.audit
@pytest.mark.parametrize(
    "alpha, data, neighbouring, twin, epsilon",
    [
        (0.5, TABLE, "add-remove", _flipped_margin, 10.0),
        (0.9, TABLE, "add-remove", _flipped_margin, 10.0),
        (0.5, TIED, "add-remove", _flipped_margin, 10.0),
        (0.5, SMALL, "add-remove", _flipped_margin, 10.0),
        (0.5, EIGHT, "add-remove", _uncapped_bounds, 1.0),
    ],
)
def test_quantile_intervals_are_conservative_and_a_broken_twin_is_caught(
    alpha, data, neighbouring, twin, epsilon, monkeypatch
):
    """The interval's ends alone (`Computer.ends`), N_QUANTILE = 300 picks, also on tables of
    heavy ties (x rounded to multiples of 2.3) and on 60 and 8 values, where they still hold (their
    argument needs no assumption on the data). Twins: the rank offset M with the wrong sign (ends
    aimed inside), or the bound candidates' scores left uncapped (it shows where no candidate's span
    of ranks reaches the target, so that nothing bounds the best score: 8 values)."""
    honest = _ends_coverage(alpha, data, neighbouring, epsilon)
    assert honest >= 0.94, honest
    twin(monkeypatch)
    broken = _ends_coverage(alpha, data, neighbouring, epsilon)
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


N_COVER = 1_000  # whole-quantile releases per case
# An interval covering exactly 95% misses more than MISSES_AT_MOST of N_COVER times with
# probability below 10^-4 (binomial upper tail), and less often when it covers more.
MISSES_AT_MOST = int(binom.ppf(1 - 1e-4, N_COVER, 0.05))


def _ignoring_the_noise(monkeypatch):
    """The twin: the ends aim at the ranks just outside the quantile (M = 2), as if their
    selection had no noise (M leaves out its bound m + o)."""
    monkeypatch.setattr(quantiles, "quantile_rank_margin", lambda *a: 2.0)


def _misses(alpha, data, neighbouring, epsilon):
    """How many of N_COVER released intervals (the real `Computer.quantile`, its ends and its
    estimate) miss the true quantile of the clamped values."""
    request = parse_request(
        SCHEMA, {"stat": [f"q{alpha * 100:g}:x"]}, epsilon=epsilon, neighbouring=neighbouring
    )
    run = Computer(data, SCHEMA, request, neighbouring, seeded_source(len(data)))
    truth = _truth("quantile", alpha, data)
    rows = [run.quantile("x", alpha, epsilon)[0] for _ in range(N_COVER)]
    return sum(not row.lower <= truth <= row.upper for row in rows)


@pytest.mark.audit
@pytest.mark.parametrize(
    "alpha, data, neighbouring, epsilon",
    [
        (0.5, TABLE, "add-remove", 1.0),
        (0.9, TABLE, "replace-one", 2.0),
        (0.5, TIED, "add-remove", 2.0),
        (0.9, ZEROS, "add-remove", 4.0),
        (0.5, SMALL, "add-remove", 3.0),
    ],
)
def test_quantile_intervals_cover_at_least_95_percent_and_a_twin_ignoring_the_noise_is_caught(
    alpha, data, neighbouring, epsilon, monkeypatch
):
    """Issue 44 item 4. Coverage of the released interval, N_COVER = 1,000 releases per case,
    one-sided binomial test: more than MISSES_AT_MOST (76) misses rejects "covers at least
    95%" (false alarm below 10^-4 per case). Cases: 1,200 skewed values, heavy ties on the
    candidates, over half tied at the lower bound, and 60 values (where the noise is most of
    the interval), at epsilons where the interval is narrower than the range. Twin: ends aimed
    at a rank offset that ignores the selection's noise (`_ignoring_the_noise`)."""
    assert _misses(alpha, data, neighbouring, epsilon) <= MISSES_AT_MOST
    _ignoring_the_noise(monkeypatch)
    assert _misses(alpha, data, neighbouring, epsilon) > MISSES_AT_MOST


def _spans_swapped(monkeypatch):
    """The twin: each end judged by the span of ranks on its wrong side (lo by [r_lo(c-),
    r_lo(c)], hi by [r_hi(c), r_hi(c+)]), so the pick lands one candidate inside the target:
    it shows where the candidates, not the noise, set the interval (large groups, large
    epsilon)."""

    def swapped(r_lo, r_hi, margin, cap):
        below = np.insert(r_lo[:-1], 0, -np.inf)
        above = np.append(r_hi[1:], np.inf)
        low = np.maximum(0.0, np.maximum(below + margin, -margin - r_lo))
        high = np.maximum(0.0, np.maximum(margin - above, r_hi - margin))
        return quantiles.cap_bounds(low, high, cap)

    monkeypatch.setattr(quantiles, "end_scores", swapped)


N_GRID = 600  # releases per case of the grid below
GRID_MISSES_AT_MOST = int(binom.ppf(1 - 1e-4, N_GRID, 0.05))  # 52: false alarm below 10^-4


def _age_misses(n, epsilon):
    """Misses of the true median among N_GRID released intervals (`Computer.quantile`, the
    production permute-and-flip on a seeded source) on `_ages(n, whole=False)`."""
    data = _ages(n, whole=False)
    request = parse_request(SCHEMA, {"stat": ["median:x"]}, epsilon=epsilon,
                            neighbouring="add-remove")  # fmt: skip
    run = Computer(data, SCHEMA, request, "add-remove", seeded_source(n + int(10 * epsilon)))
    truth = float(np.quantile(data["x"], 0.5))
    rows = [run.quantile("x", 0.5, epsilon)[0] for _ in range(N_GRID)]
    return sum(not row.lower <= truth <= row.upper for row in rows)


@pytest.mark.audit
@pytest.mark.parametrize(
    "n, epsilon, twin",
    [
        (30, 0.1, _ignoring_the_noise),
        (30, 1.0, _ignoring_the_noise),
        (30, 10.0, _flipped_margin),
        (300, 0.1, _ignoring_the_noise),
        (300, 1.0, _ignoring_the_noise),
        (300, 10.0, _flipped_margin),
        (3_000, 0.1, _ignoring_the_noise),
        (3_000, 1.0, _flipped_margin),
        (3_000, 10.0, _spans_swapped),
    ],
)
def test_median_intervals_cover_95_percent_at_every_group_size_and_epsilon(
    n, epsilon, twin, monkeypatch
):
    """Issue 44 item 4: groups of 30, 300 and 3,000 ages, epsilon 0.1, 1 and 10 for the median,
    no count to skip the ends' pick (so the pick runs even where it is mostly noise). Each
    case: N_GRID = 600 releases, more than GRID_MISSES_AT_MOST misses rejects "covers at least
    95%" (one-sided binomial, false alarm below 10^-4 per case, 10^-3 over the 9 honest
    checks; the twins miss about a third of the releases or more). Twin per case, each
    caught: ends with no margin for the selection's noise (M = 2)
    where that noise sets the interval; where it is small (epsilon 10, or 3,000 ages at
    epsilon 1) M = 2 still covers, as the candidates' spacing does the work, so there the ends
    aim inside (M of the wrong sign, `_flipped_margin`), and on 3,000 ages at epsilon 10, where
    M is below one candidate's span of ranks and even that covers, they take the span on the
    wrong side (`_spans_swapped`)."""
    assert _age_misses(n, epsilon) <= GRID_MISSES_AT_MOST
    twin(monkeypatch)
    assert _age_misses(n, epsilon) > GRID_MISSES_AT_MOST


def _mean_width(data, epsilon, releases=40):
    """Mean width of the released median interval of column x, as a share of its range."""
    request = parse_request(SCHEMA, {"stat": ["median:x"]}, epsilon=epsilon,
                            neighbouring="add-remove")  # fmt: skip
    run = Computer(data, SCHEMA, request, "add-remove", seeded_source(3))
    rows = [run.quantile("x", 0.5, epsilon)[0] for _ in range(releases)]
    return float(np.mean([row.upper - row.lower for row in rows])) / 100


def _ages(n, whole=True):
    """n ages, whole numbers (ties at every candidate) or not."""
    ages = np.random.default_rng(n).normal(40, 12, n).clip(0, 100)
    return pd.DataFrame({"x": ages.round() if whole else ages, "y": 0.0, "g": "a", "h": "u"})


def test_quantile_interval_width_shrinks_with_epsilon_and_group_size():
    """Issue 44 item 4: the median interval of ages (with decimals) narrows as epsilon grows
    (4,000 ages: epsilon 0.25, 1, 4) and as the group grows (epsilon 1: 1,000, 4,000, 16,000
    ages), each step at most 0.8 times the width before (mean over 40 releases); at epsilon 1
    and 1,000 rows or more it is within 6% of the declared range (the ages spread over 12% of
    it: one standard deviation), and so is it on 4,000 whole-
    number ages (tied at every candidate: the interval stops at the ages next to the median).
    Before, the pair of bounds won on tied data, more often as epsilon grew: on those ages the
    whole range at epsilon 1."""
    by_epsilon = [_mean_width(_ages(4_000, whole=False), e) for e in (0.25, 1.0, 4.0)]
    by_size = [_mean_width(_ages(n, whole=False), 1.0) for n in (1_000, 4_000, 16_000)]
    for widths in (by_epsilon, by_size):
        assert all(b <= 0.8 * a for a, b in zip(widths, widths[1:])), widths
    tied = _mean_width(_ages(4_000), 1.0)
    assert max(*by_size, tied) <= 0.06, (by_size, tied)
    assert _mean_width(_ages(16_000), 1.0) <= 0.002


PRICES = Schema.from_dict(
    {"columns": [{"name": "price", "type": "numeric", "lower": 0, "upper": 20_000,
                  "integer": True, "missing": "reject"}]}
)  # fmt: skip


def _price_median_error(releases=40):
    """Mean absolute error of the released median of 20,000 whole-number prices (lognormal
    around 2,000) at epsilon 1."""
    prices = np.random.default_rng(44).lognormal(np.log(2_000), 0.8, 20_000).round()
    data = pd.DataFrame({"price": prices.clip(0, 20_000)})
    request = parse_request(PRICES, {"stat": ["median:price"]}, epsilon=1.0,
                            neighbouring="add-remove")  # fmt: skip
    run = Computer(data, PRICES, request, "add-remove", seeded_source(44))
    truth = float(np.quantile(data["price"], 0.5))
    rows = [run.quantile("price", 0.5, 1.0)[0] for _ in range(releases)]
    return float(np.mean([abs(row.estimate - truth) for row in rows]))


def test_a_median_inside_a_narrow_interval_is_picked_finer_than_the_declared_ranges_grid(
    monkeypatch,
):
    """Issue 44 item 4 (a 21,551-row group's median price off by 10 at epsilon 1): inside its
    released interval the estimate is picked among at least INNER_CANDIDATES round numbers
    (`quantiles.inner`), so on 20,000 whole-number prices in 0-20,000 the median is off by at
    most 2 on average over 40 releases, where the 1,025 candidates of the declared range (a
    step of 20) leave about 5. Twin: the declared range's grid inside the interval (the
    earlier rule), caught."""
    assert _price_median_error() <= 2.0
    monkeypatch.setattr(quantiles, "INNER_CANDIDATES", 2)
    assert _price_median_error() > 2.0


def test_a_second_pass_counts_each_group_at_the_finer_candidates_of_its_released_interval():
    """The estimate's finer candidates inside a narrow released interval are not all among the
    candidates the first pass counts (`quantile_grid`): `finer_counts` counts each group's
    values around its own (`aggregates.inner_tallies`, equal on every engine: test_engine_kinds),
    and #(x < c), #(x <= c) read from them equal the values' own at every candidate, groups
    without a released interval keeping the first pass's counts. Twin: the first pass's counts
    at those candidates, refused. Passes: as many as keep each query at MAX_EDGES candidates."""
    schema = Schema.from_dict(
        {"columns": [PRICES.to_dict()["columns"][0],
                     {"name": "g", "type": "categorical", "categories": ["a", "b"],
                      "unknown": "other"}]}
    )  # fmt: skip
    prices = np.random.default_rng(7).lognormal(np.log(2_000), 0.8, 600).round()
    data = pd.DataFrame({"price": prices, "g": ["a", "b", "c"] * 200})
    request = parse_request(schema, {"stat": ["median:price"], "by": ["g"]}, epsilon=1.0,
                            neighbouring="add-remove")  # fmt: skip
    run = Computer(data, schema, request, "add-remove", seeded_source(5))
    spec, counts = schema.column("price"), run.aggregates.rank_counts("price")
    within = [(1_700.0, 1_780.0), None, (0.0, 20_000.0), None][: len(counts)]
    finer = run.finer_counts("price", counts, within)
    for values, got, first, ends in zip(run.values("price"), finer, counts, within, strict=True):
        grid = np.asarray(quantiles.inner(spec, *ends) if ends else first.grid)
        assert (got is first) is (ends != within[0])  # the second pass: the narrow one only
        want = quantiles.ranks(np.sort(values.clip(0, 20_000)), grid)
        assert all(np.array_equal(a, b) for a, b in zip(quantiles.ranks(got, grid), want))
    assert len(quantiles.inner(spec, *within[0])) == 81  # 1,700 to 1,780 by 1, not by 20
    with pytest.raises(MechanismError, match="outside the counted grid"):
        quantiles.ranks(counts[0], np.asarray(quantiles.inner(spec, *within[0])))
    grids = [quantiles.inner(spec, *within[0])] * 100
    passes = statistics.aggregates.inner_tallies(schema, ("g",), "price", grids)
    assert [sum(map(len, t.grids)) <= MAX_EDGES for t in passes] == [True] * len(passes)
    assert sum(bool(grid) for t in passes for grid in t.grids) == 100


def test_the_preview_states_the_rank_margin_the_released_ends_keep():
    """The preview's half-width of a median (`statistics_plan`, rows of rank) is the margin M
    the release's ends aim at: on 1,000 ages with decimals at epsilon 1 (a quarter of it on the
    median's own count of values, `support`, as no count is asked for), each end of 40 released
    intervals lies at least 2 rows of rank from the median (valid), and their median distance
    is between M - 2 and M + 40 (M about 108; the grid's step is about 17 rows here, the ends
    land on the first candidate past M, or short of it by less than the noise)."""
    data = _ages(1_000, whole=False)
    params = {"stat": ["median:x"]}
    plan = statistics.statistics_plan(
        PlanInputs(
            schema=SCHEMA,
            columns=["x"],
            params=params,
            epsilon=1.0,
            delta=0.0,
            neighbouring="add-remove",
            n=len(data),
        )
    )
    margin = plan.details["statistics"][0]["halfwidth"]
    request = parse_request(SCHEMA, {"stat": ["median:x"]}, epsilon=1.0,
                            neighbouring="add-remove")  # fmt: skip
    run = Computer(data, SCHEMA, request, "add-remove", seeded_source(5))
    x = np.sort(data["x"].to_numpy())
    offsets = []
    for _ in range(40):
        row = run.quantile("x", 0.5, 1.0, own_count=True)[0]
        below_lo = np.searchsorted(x, row.lower, side="left")
        up_to_hi = np.searchsorted(x, row.upper, side="right")
        offsets += [x.size / 2 - below_lo, up_to_hi - x.size / 2]
    assert 105 < margin < 111, margin
    assert min(offsets) >= 2 and margin - 2 <= np.median(offsets) <= margin + 40, (margin, offsets)


def _outscored(rows, spec, epsilon, neighbouring):
    """Whether a pair narrower than the declared range can outscore it on `rows` values placed
    where a narrow pair scores best (all tied at one point between two candidates, or at the
    median of the candidates): `end_scores` exactly, no sampling."""
    part = statistics.quantile_shares(epsilon)[1]
    grid = np.asarray(statistics.candidates(spec, quantiles.END_CANDIDATES))
    margin = quantiles.quantile_rank_margin(0.5, part, neighbouring, grid.size)
    cap = quantiles.bound_score(quantiles.rank_scale(0.5, part, neighbouring))
    first, second = np.triu_indices(grid.size)
    declared = (first == 0) & (second == grid.size - 1)
    for value in (50.05, 50.0):
        r_lo, r_hi = quantiles.end_ranks(np.full(rows, value), grid, 0.5)
        low, high = quantiles.end_scores(r_lo, r_hi, margin, cap)
        scores = np.maximum(low[first], high[second])
        if scores[~declared].min() < scores[declared][0]:
            return True
    return False


@pytest.mark.parametrize("epsilon", [0.2, 1.0, 10.0])
@pytest.mark.parametrize("neighbouring", ["add-remove", "replace-one"])
@pytest.mark.parametrize("margins, honest", [(2.0, True), (0.5, False)])
def test_every_group_whose_pick_could_not_narrow_is_skipped(
    epsilon, neighbouring, margins, honest, monkeypatch
):
    """`quantiles.ends_skipped` skips groups within SKIP_MARGINS = 2 rank margins M of the
    median, which includes every group where the pick could only narrow by noise: on the
    largest group where no pair narrower than the declared range can outscore it (`_outscored`,
    exactly), the pick is skipped, and on twice as many values (where a narrower pair wins) too
    (the rule reaches past it: max(alpha, 1 - alpha) n <= 2 M). Twin: SKIP_MARGINS = 0.5, which
    picks ends on groups where they could not narrow, caught."""
    monkeypatch.setattr(quantiles, "SKIP_MARGINS", margins)
    spec = SCHEMA.column("x")
    low, high = 1, 1
    while not _outscored(high, spec, epsilon, neighbouring):
        low, high = high, 2 * high
    while high - low > 1:  # the largest group that cannot be narrowed: low
        middle = (low + high) // 2
        low, high = (
            (middle, high) if not _outscored(middle, spec, epsilon, neighbouring) else (low, middle)
        )
    assert _outscored(2 * low, spec, epsilon, neighbouring)
    skipped = [quantiles.ends_skipped(spec, 0.5, epsilon, neighbouring, n) for n in (low, 2 * low)]
    assert all(skipped) is honest, (low, skipped)


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


def _opendp_sum_map(low, high):
    """OpenDP's sensitivity of its clamp-and-sum over [low, high], a row added or removed."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    clamped = dp.t.make_clamp(domain, dp.symmetric_distance(), bounds=(float(low), float(high)))
    return float((clamped >> dp.t.then_sum()).map(1))


def _spread_over_opendp(spec, c, opendp_sensitivity=False):
    """max over true means m in [lower, upper] of (S^2 + (m - c)^2) / (S_0^2 + m^2): the mean's
    error variance (sum noise and count noise at epsilon / 2 each) summed around c, against
    OpenDP's pipeline (summed around 0); S our sum's sensitivity over [lower - c, upper - c]
    (`sum_grid`, or with `opendp_sensitivity` OpenDP's map of those bounds), S_0 OpenDP's map
    of [lower, upper]."""
    low, high = spec.lower - c, spec.upper - c
    if opendp_sensitivity:
        ours = _opendp_sum_map(low, high)
    else:
        ours = statistics.measures.sum_grid(low, high, "add-remove", None).sensitivity
    theirs = _opendp_sum_map(spec.lower, spec.upper)
    means = np.linspace(spec.lower, spec.upper, 201)
    return float(np.max((ours**2 + (means - c) ** 2) / (theirs**2 + means**2)))


@pytest.mark.parametrize(
    "lower, upper",
    [(0, 1), (0, 100), (-5, 5), (-400, 1000), (18, 95), (0.3, 1.9999), (-1e6, 3), (2**40, 2**41)],
)
def test_a_sums_sensitivity_is_at_or_below_opendps(lower, upper):
    """Issue 44 item 5: the sums' noise sits on a grid of the exact fixed-point sum
    (`measures.sum_grid`), whose rounding costs at most 2^-28 of the bound, within OpenDP's own
    allowance for its float sum (2^-26.7), so the sensitivity is at most OpenDP's map of the
    same bounds (below it where the bounds hold 0: one row adds at most max(|lower|, |upper|),
    where OpenDP's map is upper - lower). Twin: the allowance before, one unit in the last
    place of a float sum of 2^32 rows at the bound (2^-19 of it), is above OpenDP's map."""
    grid = statistics.measures.sum_grid(float(lower), float(upper), "add-remove", None)
    opendp = _opendp_sum_map(lower, upper)
    bound = max(abs(lower), abs(upper))
    assert bound <= grid.sensitivity <= bound * (1 + 2.0**-28) and grid.sensitivity <= opendp
    assert bound + math.ulp(2.0**33 * bound) > opendp or lower < 0 < upper


@pytest.mark.parametrize(
    "lower, upper",
    [(0, 100), (0, 20_000), (-400, 1000), (-600, 1600), (18, 95), (40, 160), (-90, -10)],
)
def test_a_means_centre_keeps_its_error_at_or_below_opendps_on_any_data(lower, upper):
    """Issue 44 item 5: the mean sums x - c around the middle of the bounds (`measures.centre`),
    so its error's spread (sum and count noise, equal budgets) is at most OpenDP's pipeline's
    for every true mean in the bounds (our sum's exact bound against OpenDP's own map), and at
    most 3/4 of it on these bounds. Twin: the same centre with OpenDP's map of the centred
    bounds as the sum's sensitivity (d12f55f), which loses where the mean sits near 0 in bounds
    around or starting at 0 (wages 0-20,000 with a mean of 600: 1.29 times OpenDP's error
    measured)."""
    spec = Schema.from_dict(
        {"columns": [{"name": "v", "type": "numeric", "lower": lower, "upper": upper, "bins": 4}]}
    ).column("v")
    middle, _ = statistics.measures.centre(spec)
    assert _spread_over_opendp(spec, middle) <= 0.75
    twin = _spread_over_opendp(spec, middle, opendp_sensitivity=True)
    assert (twin > 1) is (lower <= 0 <= upper)


def _opendp_error(values, spec, epsilon):
    """OpenDP's median (`make_private_quantile`'s score and permute-and-flip under max
    divergence, at the whole epsilon, on the declared range's candidates): its exact expected
    absolute error on the clamped values."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    grid = [float(c) for c in statistics.candidates(spec, quantiles.CANDIDATES)]
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
    score = dp.t.make_clamp(*space, bounds=(spec.lower, spec.upper))
    score = score >> dp.t.then_quantile_score_candidates(grid, 0.5)
    chances = permute_and_flip_chances(
        -np.asarray(score(values), float), epsilon=epsilon, sensitivity=float(score.map(1))
    )
    return float(chances @ np.abs(np.asarray(grid) - np.median(values)))


def _our_error(values, spec, epsilon, monkeypatch, draws=20):
    """Our median's expected absolute error: the real `Computer.interval` (seeded, `draws`
    times; the group's size public) and `Computer.estimate`, whose selection is replaced by its
    exact expectation (the real candidates, `quantiles.rank_offsets` and `rank_scale`)."""
    errors = []

    def exact(self, values, spec, alpha, epsilon, within=None):
        grid = np.asarray(
            statistics.candidates(spec, quantiles.CANDIDATES)
            if within is None
            else quantiles.inner(spec, *within)
        )
        scores = -quantiles.rank_offsets(values, grid, alpha)
        sensitivity = quantiles.rank_sensitivity(alpha, "add-remove")
        chances = permute_and_flip_chances(scores, epsilon=epsilon, sensitivity=sensitivity)
        errors.append(float(chances @ np.abs(grid - np.median(values))))
        return float(grid[np.argmax(chances)])

    monkeypatch.setattr(Computer, "select", exact)
    request = parse_request(SCHEMA, {"stat": ["median:x"]}, epsilon=epsilon,
                            neighbouring="add-remove")  # fmt: skip
    run = Computer(pd.DataFrame({"x": values}), SCHEMA, request, "add-remove", seeded_source(9))
    for _ in range(draws):
        within = run.interval(values, SCHEMA.column("x"), 0.5, epsilon, float(values.size))
        run.estimate(values, SCHEMA.column("x"), 0.5, epsilon, within)
    return float(np.mean(errors))


def _peaked_whole_numbers(n):
    """n whole numbers 20-60, counts proportional to exp(-|k - 40| / 8) (median 40, the mode)."""
    k = np.arange(20, 61)
    counts = np.round(n * np.exp(-np.abs(k - 40) / 8) / np.exp(-np.abs(k - 40) / 8).sum())
    return np.repeat(k, counts.astype(int)).astype(float)


def _skipped_only_where_no_pair_could_narrow(spec, alpha, epsilon, neighbouring, rows):
    """The skip rule before (d6143c5e..3383e7bf): max(alpha, 1 - alpha) rows <= M - o."""
    part = statistics.quantile_shares(epsilon)[1]
    size = len(statistics.candidates(spec, quantiles.END_CANDIDATES))
    margin = quantiles.quantile_rank_margin(alpha, part, neighbouring, size)
    cap = quantiles.bound_score(quantiles.rank_scale(alpha, part, neighbouring))
    return max(alpha, 1 - alpha) * rows <= margin - cap


SIGNED_OFFSETS = quantiles.rank_offsets


def _floored(values, candidates, alpha):
    """The estimate's score before: the rank offset floored at 0 (`rank_distances`)."""
    return np.maximum(0.0, SIGNED_OFFSETS(values, candidates, alpha))


@pytest.mark.parametrize(
    "data, twin",
    [
        ("ages", None),
        ("ages", "old skip rule"),
        ("whole", None),
        ("whole", "floored score"),
    ],
)
def test_a_medians_error_is_at_or_below_opendps_where_noise_sets_it(data, twin, monkeypatch):
    """Issue 44 item 4: at epsilon 0.1, 1,500 values (public n), the median's expected
    absolute error is at most OpenDP's median at the same epsilon, bounds and candidates
    (exact expectations of both selections: `noise.permute_and_flip_chances`; ours over 20
    seeded draws of the interval where one is picked, so the test is deterministic: no false
    alarm). Ages with
    decimals that are never candidates (no ties: our score is OpenDP's, so equal), and peaked
    whole numbers (ties at every candidate: the signed offset puts the median's neighbours
    further behind than OpenDP's score, so below). Here the ends would aim about 814 rows of
    rank from the median, more than half-way to the group's ends: the pick is skipped and the
    estimate gets the whole epsilon. Twins, each caught (above OpenDP's): the skip rule before
    (the pick made wherever a narrower pair could win, the estimate on 75% of epsilon: about
    1.3 times OpenDP's error on the ages), and the rank distance floored at 0 (the score
    before) on the whole numbers."""
    rng = np.random.default_rng(44)
    ages = np.round(rng.normal(40, 12, 1_500).clip(0, 99), 1) + 0.05
    values = np.sort(ages if data == "ages" else _peaked_whole_numbers(1_500))
    spec = SCHEMA.column("x")
    assert quantiles.ends_skipped(spec, 0.5, 0.1, "add-remove", values.size)
    if twin == "old skip rule":
        monkeypatch.setattr(quantiles, "ends_skipped", _skipped_only_where_no_pair_could_narrow)
    if twin == "floored score":
        monkeypatch.setattr(quantiles, "rank_offsets", _floored)
    ours, theirs = _our_error(values, spec, 0.1, monkeypatch), _opendp_error(values, spec, 0.1)
    assert (ours <= theirs * (1 + 1e-9)) is (twin is None), (ours, theirs)


def _far_tied(values, candidates, alpha):
    """A broken score: the signed offset plus 1.5 times the values tied at the candidate."""
    below, up_to, _ = quantiles.ranks(values, candidates)
    return SIGNED_OFFSETS(values, candidates, alpha) + 1.5 * (up_to - below)


@pytest.mark.parametrize("score, honest", [(SIGNED_OFFSETS, True), (_far_tied, False)])
def test_the_signed_rank_offset_moves_by_at_most_the_rank_sensitivity(score, honest):
    """`quantiles.rank_offsets`' sensitivity, exactly: over every table of at most 4 values in
    {0, 25, 50, 75, 100} (ties at candidates and between them), candidates 0, 12.5, ..., 100,
    alpha 0.5, 0.25 and 0.9, a value added (add/remove) or one replaced (replace-one, within the
    group), no candidate's score moves by more than `rank_sensitivity` (up to float rounding).
    Twin: the offset plus 1.5 times the ties at the candidate (a row added there moves it by
    twice the sensitivity), caught."""
    import itertools

    points, grid = (0.0, 25.0, 50.0, 75.0, 100.0), np.arange(0.0, 100.1, 12.5)
    tables = [
        list(t) for size in range(5) for t in itertools.combinations_with_replacement(points, size)
    ]
    moved = {"add-remove": 0.0, "replace-one": 0.0}
    for alpha in (0.5, 0.25, 0.9):
        for table in tables:
            base = score(np.array(table), grid, alpha)
            for value in points:
                added = score(np.array(sorted([*table, value])), grid, alpha)
                change = np.abs(added - base).max() / quantiles.rank_sensitivity(
                    alpha, "add-remove"
                )
                moved["add-remove"] = max(moved["add-remove"], change)
                for index in range(len(table)):
                    other = sorted([*table[:index], value, *table[index + 1 :]])
                    change = np.abs(score(np.array(other), grid, alpha) - base).max()
                    change /= quantiles.rank_sensitivity(alpha, "replace-one")
                    moved["replace-one"] = max(moved["replace-one"], change)
    assert bool(max(moved.values()) <= 1 + 1e-12) is honest, moved


MEAN_SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "v", "type": "numeric", "lower": 10, "upper": 110, "bins": 4},
            {"name": "g", "type": "categorical", "categories": ["a", "b", "c", "d"]},
        ]
    }
)


def _exact_mean_errors(run, epsilon, share=0.5):
    """Per group (n, exact expected error over published releases, P(published)) of the mean
    of v (`measures.mean_expected_error`), from the scales the release used; `share`: the part
    of epsilon the exact computation gives the sum (the release's: 1/2; the twin's: 3/4)."""
    rows = run.mean("v", epsilon)
    sum_scale = rows[0].scale / (2 * share)
    count_scale = rows[0].count_scale / (2 * (1 - share))
    spec = run.numeric("v")
    c, bounds = statistics.measures.centre(spec)[0], aggregates.sum_bounds(spec, "centred")
    n, sums = run.aggregates.present("v"), run.aggregates.sums("v", "centred")
    truth = [float(np.mean(np.clip(v, 10, 110))) if v.size else math.nan for v in run.values("v")]
    return [
        (int(k), *statistics.measures.mean_expected_error(
            s, int(k), m - c, bounds, sum_scale, count_scale, support.threshold(count_scale)))
        for k, s, m in zip(n, sums, truth, strict=True)
    ], truth  # fmt: skip


def test_a_means_exact_expected_error_matches_the_release_and_catches_a_wrong_split():
    """Issue 44 item 5: `measures.mean_expected_error` (the mean's exact expected error over
    the releases that publish the group, as benchmarks/quantile_intervals.py --exact compares
    it with OpenDP's) agrees with 1,000 seeded releases of `Computer.mean` on groups of 1, 4,
    40 and 400 values near the lower bound (clipped often; the smaller ones withheld mostly,
    published only on positive count noise): within 4 standard errors in each group published
    200 times or more (false alarm about 6e-5 per group, normal approximation). Twin: the same
    computation with 3/4 of epsilon on the sum, which the same releases reject."""
    sizes = {"a": 1, "b": 4, "c": 40, "d": 400}
    gen = np.random.default_rng(5)
    frame = pd.DataFrame(
        {
            "v": np.concatenate([gen.uniform(5, 30, k) for k in sizes.values()]),
            "g": np.repeat(list(sizes), list(sizes.values())),
        }
    )
    request = parse_request(
        MEAN_SCHEMA, {"stat": ["mean:v"], "by": ["g"]}, epsilon=0.5, neighbouring="add-remove"
    )
    run = Computer(frame, MEAN_SCHEMA, request, "add-remove", seeded_source(44))
    drawn = np.array([[row.estimate for row in run.mean("v", 0.5)] for _ in range(1000)])
    exact, truth = _exact_mean_errors(run, 0.5)
    twin, _ = _exact_mean_errors(run, 0.5, share=0.75)
    z, z_twin = [], []
    for g, ((n, error, published), (_, wrong, _)) in enumerate(zip(exact, twin, strict=True)):
        errors = np.abs(drawn[:, g] - truth[g])
        errors = errors[~np.isnan(errors)]
        assert errors.size / len(drawn) == pytest.approx(published, abs=0.04)
        if errors.size >= 200:
            se = errors.std(ddof=1) / math.sqrt(errors.size)
            z.append((errors.mean() - error) / se)
            z_twin.append((errors.mean() - wrong) / se)
    assert len(z) >= 2
    assert max(abs(v) for v in z) < 4
    assert max(abs(v) for v in z_twin) >= 4


@pytest.mark.parametrize(
    ("stat", "by", "neighbouring", "x_sums"),
    [
        (["count", "median:x"], [], "add-remove", ()),
        (["sum:x"], [], "add-remove", ("raw",)),
        (["mean:x"], [], "add-remove", ("centred",)),
        (["mean:x"], [], "replace-one", ("centred",)),  # x's number of values is public
        (["mean:x"], ["c"], "replace-one", ("centred",)),  # not with groups
        (["variance:x", "std:x"], [], "add-remove", ("centred", "square")),
        (["sum:x", "mean:x", "variance:x"], [], "add-remove", ("raw", "centred", "square")),
    ],
)
def test_the_groups_tally_sums_what_its_statistics_read(stat, by, neighbouring, x_sums):
    """`aggregates.needed_sums`: each statistic's sums, and no other (a sum not asked for is
    not computed), whatever the relation; y, which may miss values, too."""
    numeric = {"type": "numeric", "lower": 0, "upper": 10, "bins": 5}
    x, y = {"name": "x", **numeric, "missing": "reject"}, {"name": "y", **numeric}
    categories = {"name": "c", "type": "categorical", "categories": ["a", "b"]}
    schema = Schema.from_dict({"columns": [x, y, categories]})
    params = {"stat": [*stat, "mean:y"], "by": by}
    request = parse_request(schema, params, epsilon=1.0, neighbouring=neighbouring)
    groups, _ = aggregates.tallies(schema, request)
    assert groups.terms("x") == x_sums
    assert groups.terms("y") == ("centred",)


def test_a_sum_not_asked_for_is_refused_not_read_as_zero():
    """The aggregates refuse a sum their tally did not compute (it would read 0): a statistic
    whose sums `needed_sums` left out fails in words instead of releasing a wrong estimate."""
    from mechanisms.statistics.compute import read_aggregates

    schema = Schema.from_dict(
        {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 10, "bins": 5}]}
    )
    request = parse_request(schema, {"stat": ["mean:x"]}, epsilon=1.0, neighbouring="add-remove")
    values = np.array([1.0, 2.0])
    table = read_aggregates(pd.DataFrame({"x": values}), schema, request)
    centred = aggregates.clamped_terms(values, schema.column("x"))["centred"]
    assert table.sums("x", "centred").tolist() == [centred.sum()]
    with pytest.raises(MechanismError, match="square sums of column 'x' were not read"):
        table.sums("x", "square")
