"""Summary statistics publish a group's estimate only where a noisy count shows rows there.

`mechanisms.statistics.support`: the groups are every declared category plus "(other)" and
"(missing)", held by the data or not; a group's estimate is published only where its deciding
noisy count is above the one-sided 99.9% quantile of that count's noise at a true count of 0
(`accuracy.told_from_zero`, the rule of MWEM's and the histograms' structural cells).

The main audit runs N = 200 seeded releases of a small table (300 rows, groups a and b only,
ε = 0.5 split over four statistics) and counts how often the two groups the data does not hold
get an estimate: 200 releases × 4 statistics × 2 groups = 1,600 decisions, each published with
probability at most 0.001 under the rule, so at most 9 publications are allowed (a correct rule
fails with probability P(Binomial(1600, 0.001) >= 10) = 7e-6). Its broken twin is the rule the
release had before (a mean or a variance published from a count above its 95% half-width), about
2.5% per decision: expected 40, caught. The same releases must publish groups a and b in most
releases (the rule is not simply "never").
"""

from __future__ import annotations

import io
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from mechanisms import statistics
from mechanisms.accuracy import zero_threshold
from mechanisms.catalogue import run_release
from mechanisms.noise import seeded_source
from mechanisms.release_request import PlanInputs
from mechanisms.schema import Schema
from mechanisms.statistics import Computer, parse_request, support
from mechanisms.statistics.measures import discrete_laplace_halfwidth

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 500_000, "bins": 10,
             "missing": "reject"},
            {"name": "y", "type": "numeric", "lower": 0, "upper": 100, "bins": 10,
             "missing": "cell"},
            {"name": "g", "type": "categorical", "categories": ["a", "b"], "unknown": "other",
             "missing": "cell"},
        ]
    }
)  # fmt: skip
_rs = np.random.default_rng(20261206)  # the fixed table (not a noise source)
SMALL = pd.DataFrame(
    {
        "x": _rs.gamma(2.0, 15_000, 300),
        "y": _rs.uniform(0, 100, 300),
        "g": _rs.choice(["a", "b"], 300),
    }
)
ABSENT = ("(other)", "(missing)")
STATS = ["mean:x", "median:x", "sum:x", "std:x"]
RELEASES, ALLOWED = 200, 9


def _table(params, seed, epsilon=0.5, neighbouring="add-remove", data=SMALL):
    out = run_release(
        "statistics",
        data,
        SCHEMA,
        epsilon=epsilon,
        neighbouring=neighbouring,
        columns=["x", "y", "g"],
        params=params,
        rng=seeded_source(seed),
    )
    return out, pd.read_csv(io.BytesIO(out.files["statistics.csv"]), keep_default_na=False)


def _published(releases):
    """(estimates published for absent groups, share of a/b rows published) over releases."""
    absent = present = present_published = 0
    for seed in range(releases):
        _, table = _table({"stat": STATS, "by": ["g"]}, seed)
        shown = table["estimate"] != ""
        absent += int((shown & table["g"].isin(ABSENT)).sum())
        present += int((~table["g"].isin(ABSENT)).sum())
        present_published += int((shown & ~table["g"].isin(ABSENT)).sum())
    return absent, present_published / present


def _old_rule(count, scale):
    """The broken twin: published where the count is above its 95% half-width."""
    return count is None or count > discrete_laplace_halfwidth(scale)


@pytest.mark.audit
@pytest.mark.parametrize("twin", [False, True])
def test_groups_the_data_does_not_hold_get_no_estimate_on_a_small_table(twin, monkeypatch):
    if twin:
        monkeypatch.setattr(support, "publishable", _old_rule)
    absent, present_share = _published(RELEASES)
    assert (absent <= ALLOWED) is not twin, absent
    assert present_share > 0.8  # groups of about 150 rows: mostly published


def test_a_withheld_group_says_so_with_an_empty_estimate_and_interval():
    _, table = _table({"stat": ["count", *STATS], "by": ["g"]}, seed=3, epsilon=4.0)
    other = table[table["g"] == "(other)"].set_index("statistic")
    for name in ("mean", "median", "sum", "std"):
        assert other.loc[name, "note"] == "too few rows to publish"
        assert other.loc[name, ["estimate", "ci_lower", "ci_upper"]].tolist() == ["", "", ""]
    assert other.loc["count", "estimate"] != ""  # a count is always published...
    assert other.loc["count", "note"].startswith("the group may hold no rows")  # ...and marked
    held = table[table["g"] == "a"]
    assert (held["note"] == "").all() and (held["estimate"] != "").all()


def test_the_rule_is_the_structural_cells_rule_at_the_scale_of_each_deciding_count():
    """The mean's own count of values decides its groups: the threshold is that count's 99.9%
    one-sided noise quantile at a true count of 0, and a count just above it is published."""
    request = parse_request(SCHEMA, {"stat": ["mean:x"], "by": ["g"]}, epsilon=0.5,
                            neighbouring="add-remove")  # fmt: skip
    scale = 1 / 0.25  # the mean's count of values gets half of its 0.5, one row per change
    assert support.source_scale(SCHEMA, request, "add-remove", 0, None) == scale
    threshold = support.threshold(scale)
    assert threshold == zero_threshold(scale)
    a = math.exp(-1 / scale)  # P(Z > t) = a^(t+1) / (1 + a) for discrete Laplace
    assert a ** (threshold + 1) / (1 + a) <= 0.001 < a**threshold / (1 + a)
    assert not support.publishable(threshold, scale) and support.publishable(threshold + 1, scale)


@pytest.mark.parametrize(
    "stats, neighbouring, expected",
    [
        (["sum:x"], "replace-one", ["the public number of rows"]),
        (["sum:y"], "replace-one", ["a noisy count of present values on 25% of its epsilon"]),
        (["mean:x", "median:x"], "add-remove",
         ["its own noisy count", "the noisy count of present values of x released with mean:x"]),
        (["count", "median:x"], "add-remove",
         ["its own noisy count", "the noisy count of rows released with count"]),
        (["count", "median:y"], "add-remove",  # y may miss values: rows do not count values
         ["its own noisy count", "a noisy count of present values on 25% of its epsilon"]),
        (["count", "std:x", "q90:x"], "add-remove",  # the count has the largest epsilon
         ["its own noisy count", "its own noisy count",
          "the noisy count of rows released with count"]),
    ],
)  # fmt: skip
def test_each_statistic_reads_the_count_its_docstring_names(stats, neighbouring, expected):
    by = [] if neighbouring == "replace-one" else ["g"]
    out, _ = _table({"stat": stats, "by": by}, seed=1, neighbouring=neighbouring)
    assert list(out.manifest["parameters"]["published_where"].values()) == expected
    assert "99.9% quantile" in out.manifest["parameters"]["publication_rule"]


def test_an_own_count_takes_a_quarter_of_the_share_and_the_spend_adds_up():
    params = {"stat": ["median:x", "sum:y"], "by": ["g"], "weights": "2, 1"}
    request = parse_request(SCHEMA, params, epsilon=0.3, neighbouring="add-remove")
    run = Computer(SMALL, SCHEMA, request, "add-remove", seeded_source(5))
    statistics.compute.run_all(run)
    shares = [Fraction(s) for s in request.shares]
    pieces = [Fraction(e) for e in run.spent]
    assert sum(pieces) <= Fraction(0.3)
    assert pieces[0] == Fraction(support.own_shares(request.shares[0])[0])
    assert pieces[0] <= shares[0] / 4 and pieces[0] > shares[0] / 4 * Fraction(999, 1000)
    out, table = _table(params, seed=5, epsilon=0.3)
    pieces = out.manifest["parameters"]["sensitivities"]
    assert pieces[0]["sensitivity"]["own count of present values (25% of its epsilon)"] == 1
    assert Fraction(out.spent["epsilon"]) <= Fraction(0.3)
    assert table.groupby("statistic")["epsilon"].first().astype(float).sum() == pytest.approx(0.3)


def test_the_plan_states_the_threshold_and_how_often_each_size_is_published():
    """The plan's threshold is the one the release applies; its published share of a group of
    each size matches 20,000 simulated noisy counts within 4 standard errors."""
    params = {"stat": ["mean:x"], "by": ["g"]}
    plan = statistics.statistics_plan(
        PlanInputs(
            schema=SCHEMA,
            columns=["x", "g"],
            params=params,
            epsilon=0.5,
            delta=0.0,
            neighbouring="add-remove",
            n=300,
        )
    )
    row = plan.details["statistics"][0]
    assert row["threshold"] == support.threshold(4.0)
    assert plan.details["sizes"] == sorted(s["size"] for s in row["by_size"])
    assert 75 in plan.details["sizes"]  # the average: 300 rows over a, b, (other), (missing)
    noise = seeded_source(9).discrete_laplace(4.0, 20_000)
    for entry in row["by_size"]:
        simulated = float(np.mean(entry["size"] + noise > row["threshold"]))
        error = math.sqrt(max(simulated * (1 - simulated), 1e-4) / 20_000)
        assert abs(entry["published"] - simulated) <= 4 * error, entry
    small = next(e for e in row["by_size"] if e["size"] == 10)
    assert small["published"] < 0.02 and small["halfwidth"] > row["halfwidth"]
