"""Private range counting: validation, public plans, accounting, exactness, calibration, privacy.

Checks T0-T3 of docs/range-count.md section 4.3 plus the event test of docs/testing-privacy.md.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mechanisms.catalogue import run_release
from mechanisms.errors import MechanismError
from mechanisms.noise import seeded_source
from mechanisms.range_count import (
    answer_queries,
    grid_support,
    incidence,
    load_workload,
    random_boxes,
    random_halfspaces,
    range_count,
)
from mechanisms.range_count.api import account, build_plan
from mechanisms.range_count.core import privacy_target
from mechanisms.schema import Schema
from tests.helpers import randomness_uses as _randomness_uses
from tests.mechanisms.range_count_helpers import (
    ZeroNoise,
    _calibration,
    _true_answers,
    _uniform_support,
    event_test_of_one_range_count,
    plan_is_public,
    write_xy_inputs,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
MECHS = ("identity", "per_query", "tree", "mn12")


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epsilon": -1}, r"epsilon \(-1"),
        ({"delta": 2}, r"delta \(2"),
        ({"neighbouring": "swap"}, r"neighbouring \('swap'\)"),
        ({"mechanism": "magic"}, r"mechanism \('magic'\)"),
        ({"estimator": "mle"}, r"estimator \('mle'\)"),
        ({"mechanism": "mn12", "delta": 0}, "mn12 needs delta > 0"),
    ],
)
def test_it_rejects_bad_parameters_in_one_line(kwargs, message):
    support = grid_support(["x"], [(0, 1)], (8,))
    args = {"epsilon": 1.0, "delta": 1e-6, **kwargs}
    with pytest.raises(MechanismError, match=message) as info:
        range_count(np.ones(8, int), support, [{"type": "interval", "lo": 0, "hi": 0.5}], **args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "query, message",
    [
        ({"type": "circle"}, r"type \('circle'\)"),
        ({"type": "box", "lo": [0.5, 0], "hi": [0.1, 1]}, r"lo \(\[0.5, 0.0\]\) must be <= hi"),
        ({"type": "halfspace", "a": [1, 2, 3], "b": 0}, r"'a' \(\[1, 2, 3\]\) must be 2 finite"),
        ({"type": "halfspace", "a": [1, 2], "b": "x"}, r"b \('x'\)"),
        ({"type": "interval", "lo": 0, "hi": 1}, "an interval needs 1 column"),
    ],
)
def test_it_rejects_bad_queries(query, message):
    support = grid_support(["x", "y"], [(0, 1), (0, 1)], (4, 4))
    with pytest.raises(MechanismError, match=message):
        range_count(np.ones(16, int), support, [query], epsilon=1, delta=1e-6)


def test_it_rejects_bad_support_and_counts():
    with pytest.raises(MechanismError, match=r"bounds of column 'x' \(1.0, 0.0\)"):
        grid_support(["x"], [(1, 0)], (4,))
    with pytest.raises(MechanismError, match="1 to 3 numeric columns"):
        grid_support(list("abcd"), [(0, 1)] * 4, (2, 2, 2, 2))
    with pytest.raises(MechanismError, match=r"grid 8 must give|needs 2 positive"):
        grid_support(["x", "y"], [(0, 1), (0, 1)], (8,))
    support = grid_support(["x"], [(0, 1)], (4,))
    with pytest.raises(MechanismError, match=r"counts \(shape \(3,\)\)"):
        range_count(
            np.ones(3, int), support, [{"type": "interval", "lo": 0, "hi": 1}], epsilon=1, delta=0
        )
    with pytest.raises(MechanismError, match="workload is empty"):
        range_count(np.ones(4, int), support, [], epsilon=1, delta=0)


def test_workload_reads_json_and_csv():
    cols = ("x", "y")
    text = json.dumps({"queries": [{"type": "halfspace", "a": [1, -1], "b": 0.2}]})
    assert load_workload(text, cols) == [{"type": "halfspace", "a": [1.0, -1.0], "b": 0.2}]
    csv_text = "type,lo_x,lo_y,hi_x,hi_y,a_x,a_y,b\nbox,0,0,1,0.5,,,\nhalfspace,,,,,2,1,0.3\n"
    got = load_workload(csv_text, cols, fmt="csv")
    assert got == [
        {"type": "box", "lo": [0.0, 0.0], "hi": [1.0, 0.5]},
        {"type": "halfspace", "a": [2.0, 1.0], "b": 0.3},
    ]
    with pytest.raises(MechanismError, match="not valid JSON"):
        load_workload("{", cols)


def test_records_snap_to_the_grid_and_are_clamped_to_the_public_bounds():
    support = grid_support(["x", "y"], [(0, 4), (0, 2)], (4, 2))
    values = np.array([[0.1, 0.1], [3.9, 1.9], [-50, 99], [2.5, 0.5]])
    assert support.snap(values).tolist() == [0, 7, 1, 4]


def test_it_has_no_module_touching_random_state():
    modules = sorted((REPO_ROOT / "mechanisms" / "range_count").glob("*.py"))
    assert len(modules) >= 5
    offenders = {m.name: u for m in modules if (u := _randomness_uses(ast.parse(m.read_text())))}
    assert offenders == {}


# ---------------------------------------------------------------- T0: the plan is public


@pytest.mark.parametrize("mechanism", [*MECHS, "auto"])
def test_t0_plan_is_identical_across_neighbouring_and_unrelated_datasets(mechanism):
    plan_is_public(mechanism)


# ---------------------------------------------------------------- T1: accounting


def _loss_from_structure(structure, budget_kind="gaussian"):
    """Per-point loss recomputed from the released structure alone (independent of the code)."""
    plan = structure["plan"]
    n = plan["n"]
    loss = np.zeros(n)
    covered = np.zeros(n, dtype=int)
    for r in plan["rounds"]:
        var = [r["kappa"] * w for w in r["relative_variance"]]
        for piece, level in zip(r["pieces"], r["piece_levels"], strict=True):
            loss[piece] += 1 / var[level]
        loss[r["x_points"]] += 1 / var[0]
        covered[r["x_points"]] += 1
    loss[plan["leftover"]] += 1 / plan["leftover_scale"] ** 2
    covered[plan["leftover"]] += 1
    return loss, covered


@pytest.mark.parametrize("neighbouring, factor", [("replace-one", 2.0), ("add-remove", 1.0)])
@pytest.mark.parametrize("support_kind", ["uniform", "grid"])
def test_t1_recomputed_point_loss_is_within_budget_and_points_are_partitioned(
    neighbouring, factor, support_kind
):
    support = (
        _uniform_support(700, seed=8)
        if support_kind == "uniform"
        else grid_support(["x", "y"], [(0, 1), (0, 1)], (24, 30))
    )
    queries = random_halfspaces(support, 2000, seeded_source(9))
    r = range_count(
        np.zeros(support.n, int),
        support,
        queries,
        epsilon=2.0,
        delta=1e-6,
        neighbouring=neighbouring,
        mechanism="mn12",
        rng=seeded_source(10),
    )
    rho = privacy_target(epsilon=2.0, delta=1e-6, neighbouring=neighbouring).rho
    loss, covered = _loss_from_structure(r.structure)
    assert len(r.structure["plan"]["rounds"]) >= 2  # the recursion really happens
    assert (covered == 1).all()  # every point in exactly one X_t (or the leftover)
    assert loss.max() <= 2 * rho / factor * (1 + 1e-9)
    assert loss.max() >= 2 * rho / factor * (1 - 1e-9)  # the budget is used, not wasted
    assert r.structure["plan"]["leftover_scale"] ** 2 == pytest.approx(factor / (2 * rho))
    assert r.accounting["rho"] == pytest.approx(rho)
    assert r.accounting["epsilon"] <= 2.0 * (1 + 1e-9)


def test_t1_broken_twin_with_shrunk_variances_is_refused_before_release():
    support = _uniform_support(400, seed=12)
    queries = random_halfspaces(support, 1200, seeded_source(13))
    target = privacy_target(epsilon=1.0, delta=1e-6, neighbouring="replace-one")
    plan = build_plan("mn12", support, queries, incidence(support, queries), target)
    assert account(plan, target)["max_point_loss"] <= target.loss_budget
    plan.rounds[0].kappa *= 0.85  # the twin: 15% less variance than planned
    structure = {"plan": plan.to_dict()}
    assert _loss_from_structure(structure)[0].max() > target.loss_budget
    with pytest.raises(RuntimeError, match="nothing was released"):
        account(plan, target)


@pytest.mark.parametrize("mechanism", ["identity", "per_query", "tree"])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_t1_baselines_use_exactly_the_budget(mechanism, delta):
    support = grid_support(["x", "y"], [(0, 1), (0, 1)], (16, 16))
    queries = random_boxes(support, 300, seeded_source(11))
    plan = build_plan(
        mechanism,
        support,
        queries,
        incidence(support, queries),
        privacy_target(epsilon=0.7, delta=delta, neighbouring="replace-one"),
    )
    loss = plan.point_loss()
    budget = (
        0.7 / 2
        if delta == 0
        else 2 * privacy_target(epsilon=0.7, delta=delta, neighbouring="replace-one").rho / 2
    )
    assert loss.max() == pytest.approx(budget, rel=1e-9)


# ---------------------------------------------------------------- T2: exact decomposition


@pytest.mark.parametrize(
    "mechanism, estimator",
    [
        ("mn12", "chain"),
        ("mn12", "gls"),
        ("tree", "gls"),
        ("identity", "chain"),
        ("per_query", "chain"),
    ],
)
@pytest.mark.parametrize("rng", ["zero-noise", "epsilon-inf"])
def test_t2_without_noise_every_answer_is_exact(mechanism, estimator, rng):
    support = grid_support(["x", "y"], [(0, 1), (0, 1)], (20, 24))
    queries = random_halfspaces(support, 900, seeded_source(12)) + random_boxes(
        support, 100, seeded_source(13)
    )
    x = seeded_source(14).integers(9, support.n)
    epsilon, source = (1.0, ZeroNoise()) if rng == "zero-noise" else (math.inf, seeded_source(1))
    r = range_count(
        x,
        support,
        queries,
        epsilon=epsilon,
        delta=1e-6,
        mechanism=mechanism,
        estimator=estimator,
        rng=source,
    )
    truth = _true_answers(support, queries, x)
    tolerance = 0 if estimator == "chain" else 1e-6
    assert np.max(np.abs(r.answers - truth)) <= tolerance
    if mechanism == "mn12":
        assert len(r.structure["plan"]["rounds"]) >= 2


def test_t2_new_queries_from_the_structure_match_and_cost_nothing():
    support = grid_support(["x", "y"], [(0, 1), (0, 1)], (16, 16))
    queries = random_halfspaces(support, 500, seeded_source(15))
    x = seeded_source(16).integers(9, support.n)
    r = range_count(
        x, support, queries, epsilon=1.0, delta=1e-6, mechanism="mn12", rng=seeded_source(17)
    )
    assert r.structure["estimator"] == "gls"  # `auto` picks least squares when it is cheap
    saved = json.loads(json.dumps(r.structure))
    again, var = answer_queries(saved, queries[:50])
    assert np.allclose(again, r.answers[:50]) and np.allclose(var, r.variance[:50])
    chain, chain_var = answer_queries(saved, queries[:50], estimator="chain")
    assert (chain_var >= var * (1 - 1e-9)).all()  # GLS is the minimum-variance unbiased one
    new = random_halfspaces(support, 20, seeded_source(18)) + [
        {"type": "box", "lo": [0.1, 0.2], "hi": [0.6, 0.9]}
    ]
    exact = range_count(x, support, queries, epsilon=math.inf, delta=1e-6, mechanism="mn12")
    for estimator in ("chain", "gls"):
        got, _ = answer_queries(exact.structure, new, estimator=estimator)
        assert np.allclose(got, _true_answers(support, new, x), atol=1e-6)


def test_per_query_structure_refuses_queries_it_did_not_release():
    support = grid_support(["x"], [(0, 1)], (8,))
    queries = [{"type": "interval", "lo": 0, "hi": 0.5}]
    r = range_count(
        np.ones(8, int),
        support,
        queries,
        epsilon=1.0,
        delta=0,
        mechanism="per_query",
        rng=seeded_source(1),
    )
    with pytest.raises(MechanismError, match="not in the released workload"):
        answer_queries(r.structure, [{"type": "interval", "lo": 0, "hi": 0.9}])
    with pytest.raises(MechanismError, match="not a range-count structure"):
        answer_queries({"format": "x"}, queries)


# ---------------------------------------------------------------- T3: calibration


@pytest.mark.audit
@pytest.mark.parametrize(
    "mechanism, estimator", [("mn12", "chain"), ("mn12", "gls"), ("identity", "chain")]
)
def test_t3_monte_carlo_error_matches_the_predicted_variance(mechanism, estimator):
    # 300 releases x 2048 queries; the relative SE of the MSE ratio is ~3%, so the [0.9, 1.1]
    # window is ~3 SE wide (false-alarm rate ~0.3%); the 4-SE bias check ~1e-4.
    mean, se, ratio = _calibration(mechanism, estimator)
    assert abs(mean) <= 4 * se
    assert 0.9 <= ratio <= 1.1


@pytest.mark.audit
def test_t3_broken_twin_with_smaller_noise_is_caught():
    _, _, ratio = _calibration("mn12", "chain", source_factor=0.85)  # expected ratio 0.72
    assert not 0.9 <= ratio <= 1.1


# ---------------------------------------------------------------- privacy event test


@pytest.mark.audit
@pytest.mark.parametrize(
    "mechanism, delta",
    [("identity", 1e-6), ("per_query", 1e-6), ("tree", 1e-6), ("mn12", 1e-6), ("tree", 0.0)],
)
@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_privacy_event_test_on_one_released_range_count(mechanism, delta, factor):
    """A released count hides one record as well as its declared noise says.

    Claim: Gaussian noise of the declared variance V hides a shift of 1 at the tight
    (epsilon, 1e-3) of mu = 1/sqrt(V); discrete Laplace of declared scale b at epsilon = 1/b.
    alpha = 1e-6 (family-wise false alarms); the broken twin (factor 0.5) draws half the noise.
    """
    event_test_of_one_range_count(mechanism, delta, factor)


# ---------------------------------------------------------------- routing, seeds, release


def test_auto_never_picks_mn12_for_boxes_and_prefers_it_for_many_halfplanes():
    grid = grid_support(["x", "y"], [(0, 1), (0, 1)], (32, 32))
    boxes = random_boxes(grid, 500, seeded_source(24))
    r = range_count(np.zeros(grid.n, int), grid, boxes, epsilon=1, delta=1e-6)
    assert r.mechanism != "mn12" and "mn12" not in r.predicted
    assert r.predicted[r.mechanism] == min(r.predicted.values())
    points = _uniform_support(1024, seed=25)
    halfplanes = random_halfspaces(points, 4096, seeded_source(26))
    r = range_count(np.zeros(points.n, int), points, halfplanes, epsilon=1, delta=1e-6)
    assert r.mechanism == "mn12"
    assert r.predicted["mn12"] < 0.6 * r.predicted["identity"]


def test_same_seed_same_release():
    support = grid_support(["x"], [(0, 1)], (64,))
    queries = random_boxes(support, 50, seeded_source(27))
    a, b = (
        range_count(
            np.arange(64),
            support,
            queries,
            epsilon=1,
            delta=1e-6,
            mechanism="tree",
            rng=seeded_source(28),
        )
        for _ in range(2)
    )
    assert json.dumps(a.structure) == json.dumps(b.structure)


def test_release_writes_public_files_without_raw_values():
    schema = Schema.from_dict(
        {
            "columns": [
                {"name": "lon", "type": "numeric", "lower": -180, "upper": -60, "bins": 24},
                {"name": "lat", "type": "numeric", "lower": 15, "upper": 75, "bins": 12},
            ]
        }
    )
    data = pd.DataFrame(
        {"lon": [-123.456789, -75.5, -90.25, -100.0], "lat": [45.678912, 40.1, 35.2, 50.0]}
    )
    out = run_release(
        "range_count",
        data,
        schema,
        epsilon=1.0,
        delta=1e-6,
        columns=["lon", "lat"],
        params={"random_halfspaces": 40, "mechanism": "auto"},
        rng=seeded_source(29),
    )
    assert set(out.files) == {"answers.csv", "structure.json"}
    structure = json.loads(out.files["structure.json"])
    assert structure["support"]["grid"] == [24, 12]
    answers = pd.read_csv(pd.io.common.StringIO(out.files["answers.csv"].decode()))
    assert len(answers) == 40 and answers["noise_sd"].gt(0).all()
    assert (answers["ci_lower"] <= answers["estimate"]).all()
    assert (answers["estimate"] <= answers["ci_upper"]).all()
    blob = b"".join(out.files.values()).decode()
    assert "123.456789" not in blob and "45.678912" not in blob
    assert out.manifest["accounting"]["epsilon"] <= 1.0
    assert out.manifest["guarantee"]["neighbouring"] == "replace-one"


def test_command_line_releases_and_answers_new_queries(tmp_path, capsys):
    from mechanisms.__main__ import main

    write_xy_inputs(tmp_path, 31)
    workload = {
        "queries": [
            {"type": "halfspace", "a": [1, 1], "b": 1.0},
            {"type": "box", "lo": [0, 0], "hi": [0.5, 0.5]},
        ]
    }
    (tmp_path / "w.json").write_text(json.dumps(workload))
    out = tmp_path / "out"
    status = main(
        [
            "range-count",
            "--input",
            str(tmp_path / "data.csv"),
            "--schema",
            str(tmp_path / "schema.json"),
            "--columns",
            "x,y",
            "--grid",
            "16x16",
            "--workload",
            str(tmp_path / "w.json"),
            "--random-halfspaces",
            "30",
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            "--mechanism",
            "mn12",
            "--seed",
            "3",
            "--out",
            str(out),
        ]
    )
    assert status == 0
    assert {p.name for p in out.iterdir()} == {
        "answers.csv",
        "structure.json",
        "manifest.json",
        "README.txt",
        "report.html",
        "report.pdf",
        "release.xlsx",
    }
    assert len(pd.read_csv(out / "answers.csv")) == 32
    capsys.readouterr()
    assert (
        main(
            [
                "range-query",
                "--structure",
                str(out / "structure.json"),
                "--query",
                str(tmp_path / "w.json"),
            ]
        )
        == 0
    )
    answered = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    released = pd.read_csv(out / "answers.csv").head(2)
    # the package rounds released answers to whole rows (mechanisms.package.tables)
    assert np.allclose(answered["estimate"], released["estimate"], rtol=0, atol=0.5)
    assert np.allclose(answered["ci_upper"], released["ci_upper"], rtol=0, atol=1)
    assert (
        main(
            [
                "range-query",
                "--structure",
                str(tmp_path / "nope.json"),
                "--query",
                str(tmp_path / "w.json"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "nope.json" in err and err.count("\n") == 1
