"""The one planner (`mechanisms.planner`, issue 43 item 3): its search, its answers and its CLI.

The statistical check that a release at the planned ε keeps the promise, for every kind on
several tables, is tests/mechanisms/test_planner_promise.py. Here: the perturbed histogram's
ε is the exact one (worked out from the pmf); the search never fails at large ε (the old
search overflowed on range counts and gave up); statistics get an ε (the old planner had no
expected error for them); a target no ε reaches names the floor ε cannot beat (grid
rounding) and the advice; person level uses k; and the command line prints the same.
"""

import json
import math

import pytest

from mechanisms import histogram, planner
from mechanisms.__main__ import main
from mechanisms.errors import MechanismError
from mechanisms.schema import Schema
from mechanisms.statistics.measures import count_sensitivity

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "a", "type": "categorical", "categories": list("uvwxyz"), "missing": "reject",
             "unknown": "reject"},
            {"name": "b", "type": "categorical", "categories": list("pqrst"), "missing": "reject",
             "unknown": "reject"},
            {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
            {"name": "y", "type": "numeric", "lower": 0, "upper": 10, "bins": 10},
        ]
    }
)  # fmt: skip
N = 3000


def request(kind, columns, params=None, **options):
    return planner.PlanRequest(kind, SCHEMA, tuple(columns), params or {}, N, **options)


def test_the_perturbed_epsilon_is_the_exact_one():
    """For ±50 rows the proposal is within 1% above the smallest ε whose scale 2/ε has
    P(|Z| <= 50) >= 95%, worked out here from the discrete Laplace pmf."""
    proposed = planner.plan_epsilon(request("perturbed_histogram", ["a"]), 50).epsilon
    low, high = 1.0, 100.0  # smallest scale s with 2 a^51 / (1 + a) <= 0.05, a = exp(-1/s)
    for _ in range(100):
        s = (low + high) / 2
        a = math.exp(-1 / s)
        low, high = (s, high) if 2 * a**51 / (1 + a) <= 0.05 else (low, s)
    exact = 2 / low
    assert exact <= proposed <= 1.01 * exact
    assert histogram.count_sensitivity("replace-one") == 2


def off_grid_intervals(count=40):
    """Intervals of x whose edges fall inside the cells of a 10-cell grid."""
    return [{"type": "box", "lo": [3.3 + 2 * i], "hi": [47.6 + i]} for i in range(count)]


def test_range_counts_get_an_epsilon_without_overflow_at_large_epsilon():
    """The old search planned 1e-10-scale noise at ε = 100, got an OverflowError and gave up;
    this one searches up to its cap and plans off-grid intervals, rounding included."""
    params = {"grid": [400], "workload": off_grid_intervals()}
    proposal = planner.plan_epsilon(request("range_count", ["x"], params), 20, cap=100)
    assert proposal.epsilon is not None and proposal.epsilon < 100
    (promise,) = proposal.promises
    assert promise.half_width <= 20 and 0 < promise.floor < promise.half_width
    assert "range answers" in promise.sentence() and "rounding" in promise.sentence()


def test_a_target_below_the_grid_rounding_names_it_and_asks_for_a_finer_grid():
    """On a 10-cell grid the off-grid intervals' rounding alone errs far more than ±20 rows:
    no ε removes it, the answer says so; on 400 cells the same target is reached."""
    coarse = {"grid": [10], "workload": off_grid_intervals()}
    proposal = planner.plan_epsilon(request("range_count", ["x"], coarse), 20)
    assert proposal.epsilon is None
    assert "grid rounding alone errs" in proposal.reason and "finer grid" in proposal.reason
    assert proposal.promises[0].floor > 20
    fine = {"grid": [400], "workload": off_grid_intervals()}
    assert planner.plan_epsilon(request("range_count", ["x"], fine), 20).epsilon is not None


def test_ignoring_the_rounding_would_promise_more_than_the_grid_allows():
    """Broken twin of the range planner: crowding 0 (no rounding) reaches ±20 on the coarse
    grid at some ε, which the real planner refuses above."""
    coarse = {"grid": [10], "workload": off_grid_intervals()}
    twin = request("range_count", ["x"], coarse, assumptions=planner.Assumptions(crowding=0))
    assert planner.plan_epsilon(twin, 20).epsilon is not None


def test_statistics_get_an_epsilon_per_statistic_target():
    params = {"stat": ["count", "mean:x", "median:x"], "by": ["a"]}
    targets = {"count": 20, "mean:x": 5, "median:x": 60}
    proposal = planner.plan_epsilon(
        request("statistics", ["x", "a"], params, neighbouring="add-remove"), targets
    )
    assert proposal.epsilon is not None
    by_key = {p.key: p for p in proposal.promises}
    assert set(by_key) == set(targets)
    assert all(by_key[k].half_width <= targets[k] for k in targets)
    assert by_key["median:x"].unit == "rows of rank" and by_key["mean:x"].unit == "x"
    assert by_key["mean:x"].assumed_rows == N / 6  # an even split over the 6 categories


def test_smaller_groups_need_more_epsilon():
    params = {"stat": ["mean:x"], "by": ["a"]}
    even = planner.plan_epsilon(request("statistics", ["x", "a"], params), 5).epsilon
    fewer = planner.Assumptions(group_rows=100)
    small = request("statistics", ["x", "a"], params, assumptions=fewer)
    assert planner.plan_epsilon(small, 5).epsilon > even


def test_a_sum_with_its_own_count_is_promised_on_the_share_the_release_leaves_it():
    """A sum with no count to read (add-remove, no mean of its column) spends SUPPORT_SHARE of
    its ε on a noisy count of its own (`statistics.support`); on large groups (nothing
    withheld) its promise is the statistics plan's own 95% preview, which uses the release's
    split. The promise of d19796b gave the sum its whole share: 0.75 of this."""
    from mechanisms.release_request import PlanInputs
    from mechanisms.statistics.plan import statistics_plan

    params = {"stat": ["sum:x"], "by": ["a"]}
    plan_request = request("statistics", ["x", "a"], params, neighbouring="add-remove")
    promise = planner.accuracy_at(plan_request, 1.0)[0]
    inputs = PlanInputs(
        schema=SCHEMA,
        columns=["x", "a"],
        params=params,
        epsilon=1.0,
        delta=0.0,
        neighbouring="add-remove",
        n=N,
    )
    preview = statistics_plan(inputs).details["statistics"][0]
    assert preview["source"].startswith("a noisy count of present values")
    assert promise.half_width == pytest.approx(preview["halfwidth"], rel=1e-6)


def test_groups_withheld_too_often_get_no_promise_and_the_reason_says_so():
    """Groups of 5 rows at ε ≤ 0.05 are nearly always withheld (too few rows to publish): no ±
    is kept (an infinite half-width), and the planner says why instead of printing ±inf."""
    params = {"stat": ["mean:x"], "by": ["a"]}
    tiny = planner.Assumptions(group_rows=5)
    plan_request = request("statistics", ["x", "a"], params, assumptions=tiny)
    assert planner.accuracy_at(plan_request, 0.05)[0].half_width == math.inf
    proposal = planner.plan_epsilon(plan_request, 50, cap=0.05)
    assert proposal.epsilon is None
    assert "too often withheld" in proposal.reason and "inf" not in proposal.reason


def test_person_level_needs_k_times_the_epsilon():
    document = {
        "columns": [
            {"name": "pid", "role": "person_id"},
            {"name": "a", "type": "categorical", "categories": list("uvw")},
        ],
        "max_rows_per_person": 3,
    }
    person = Schema.from_dict(document)
    at_k = planner.PlanRequest(
        "perturbed_histogram", person, ("a",), {}, N, neighbouring="add-remove"
    )
    one = planner.PlanRequest(
        "perturbed_histogram", person, ("a",), {}, N, neighbouring="add-remove",
        max_rows_per_person=1,
    )  # fmt: skip
    with_k, without = (planner.plan_epsilon(r, 30).epsilon for r in (at_k, one))
    assert with_k == pytest.approx(3 * without, rel=0.01)
    assert "bounded to 3" in planner.plan_epsilon(at_k, 30).promises[0].assumption


def test_a_target_as_wide_as_an_average_count_is_refused():
    proposal = planner.plan_epsilon(request("perturbed_histogram", ["a", "b"]), 200)
    assert proposal.epsilon is None and "average output" in proposal.reason  # 3000 / 30 cells


def test_bad_requests_say_what_to_fix():
    with pytest.raises(MechanismError, match="unknown"):
        planner.plan_epsilon(request("histogram", ["a"]), 5)
    with pytest.raises(MechanismError, match="must be a number > 0"):
        planner.plan_epsilon(request("perturbed_histogram", ["a"]), 0)
    stats = request("statistics", ["x"], {"stat": ["mean:x"]})
    with pytest.raises(MechanismError, match="does not compute"):
        planner.plan_epsilon(stats, {"mean:y": 1})


def test_the_command_line_prints_the_epsilon_or_why_none(tmp_path, capsys):
    schema = tmp_path / "schema.json"
    schema.write_text(
        '{"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 10}]}'
    )
    common = ["plan", "perturbed-histogram", "--schema", str(schema), "--row-count", "3000"]
    assert main([*common, "--target", "20"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("epsilon ") and "promise: at least 95% of the noisy cell counts" in out
    workload = tmp_path / "ranges.json"
    workload.write_text(
        '[{"type": "box", "lo": [3], "hi": [47]}, {"type": "box", "lo": [5], "hi": [61]}]'
    )
    ranges = ["plan", "range-count", "--schema", str(schema), "--row-count", "3000"]
    assert main([*ranges, "--grid", "10", "--workload", str(workload), "--target", "20"]) == 1
    assert "grid rounding alone errs" in capsys.readouterr().out
    stats = ["plan", "statistics", "--schema", str(schema), "--row-count", "3000"]
    assert main([*stats, "--stat", "mean:x", "--target", "mean:x=2"]) == 0
    assert "mean:x estimates within" in capsys.readouterr().out
    assert main([*common, "--target", "twenty"]) == 2
    assert "must be a number" in capsys.readouterr().err
    assert main([*ranges, "--grid", "10", "--target", "20"]) == 2  # no ranges: which flags
    assert "--workload FILE" in capsys.readouterr().err


def test_the_command_lines_person_bound_stands_in_for_the_schemas(tmp_path, capsys):
    """A schema with a person column but no max_rows_per_person: --max-rows-per-person gives
    it (plan and release alike, `Schema.load`); without it the message says where to put k."""
    schema = tmp_path / "schema.json"
    schema.write_text(
        '{"columns": [{"name": "pid", "role": "person_id"},'
        ' {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 10}]}'
    )
    common = ["plan", "perturbed-histogram", "--schema", str(schema), "--row-count", "3000"]
    assert main([*common, "--target", "20"]) == 2
    assert '"max_rows_per_person": 5' in capsys.readouterr().err
    assert main([*common, "--target", "20", "--max-rows-per-person", "4"]) == 0
    assert "each person's rows bounded to 4" in capsys.readouterr().out


def test_every_catalogue_kind_has_a_planner():
    """Every release kind; the DP estimate of a schema is planned by its own spend choice."""
    from mechanisms.catalogue import CATALOGUE

    kinds = {name for name, entry in CATALOGUE.items() if not entry.describes_schema}
    assert set(planner.KINDS) == kinds


COLUMN_A = {"name": "a", "type": "numeric", "lower": 0, "upper": 9, "bins": 3}


def test_the_command_line_plans_exactly_the_planners_kinds(tmp_path, capsys):
    """`plan dp-schema-estimate` used to end in a traceback (its own --kind option overwrote
    the chosen subcommand's name, None); the planner does not plan it, so argparse now names
    the kinds it does plan."""
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {"columns": [{"name": "a", "type": "numeric", "lower": 0, "upper": 9, "bins": 3}]}
        )
    )
    with pytest.raises(SystemExit) as refused:
        main(
            [
                "plan",
                "dp-schema-estimate",
                "--schema",
                str(schema),
                "--row-count",
                "10",
                "--target",
                "1",
            ]
        )
    assert refused.value.code == 2
    assert "invalid choice: 'dp-schema-estimate'" in capsys.readouterr().err
    for kind in planner.KINDS:
        with pytest.raises(SystemExit) as shown:
            main(["plan", kind.replace("_", "-"), "--help"])
        assert shown.value.code == 0 and "--target" in capsys.readouterr().out


def test_a_public_row_count_past_a_32_bit_size_is_planned(tmp_path, capsys):
    """Statistics under replace-one read a public n through OpenDP's sized count, whose size is
    32-bit: 10^23 rows ended in a ValueError. The count's sensitivity is 1 at every n (one row
    replaced turns one value present or missing), so larger n are asked at the largest size."""
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {"columns": [{"name": "a", "type": "numeric", "lower": 0, "upper": 9, "bins": 3}]}
        )
    )
    argv = ["plan", "statistics", "--schema", str(schema), "--stat", "mean:a", "--target", "1"]
    assert main([*argv, "--row-count", str(10**23)]) == 0
    assert "the public 100,000,000,000,000,000,000,000 rows" in capsys.readouterr().out
    for n in (1, 1000, 2**31 - 1):
        assert count_sensitivity("replace-one", n) == 1.0
    assert count_sensitivity("replace-one", 10**23) == 1.0
