"""path_tree range counts: the Hilbert path, exact decompositions and variances, a public plan,
Monte-Carlo calibration and the privacy event test (docs/range-count.md 2.5, 4.3;
docs/testing-privacy.md).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mechanisms.errors import MechanismError
from mechanisms.noise import seeded_source
from mechanisms.range_count import (
    answer_queries,
    incidence,
    point_support,
    random_boxes,
    random_halfspaces,
    range_count,
)
from mechanisms.range_count.api import build_plan
from mechanisms.range_count.core import noise_variance, privacy_target
from mechanisms.range_count.path_tree import PathTreePlan, hilbert_keys, level_sizes
from tests.mechanisms.range_count_helpers import (
    AUDIT_EPSILON,
    ZeroNoise,
    _calibration,
    _true_answers,
    _uniform_support,
    event_test_of_one_range_count,
)
from tests.mechanisms.range_count_helpers import plan_is_public as plan_is_public_test

TARGET = privacy_target(epsilon=1.0, delta=1e-6, neighbouring="add-remove")


def _line(n):
    """n points on [0, 1] listed in shuffled order, so the path order is not the index order."""
    xs = (np.arange(n) + 0.5) / n
    seeded_source(n).shuffle(xs)
    return point_support(["x"], [(0, 1)], xs[:, None])


def _interval(support, first, last):
    """The interval holding the points of sorted ranks first..last."""
    xs = np.sort(support.points[:, 0])
    return {"type": "interval", "lo": [xs[first]], "hi": [xs[last]]}


def _mixed_workload(support, seed):
    return random_halfspaces(support, 300, seeded_source(seed)) + random_boxes(
        support, 100, seeded_source(seed + 1)
    )


# ---------------------------------------------------------------- the path


@pytest.mark.parametrize("dim, side", [(2, 32), (3, 8)])
def test_hilbert_path_steps_from_every_grid_cell_to_a_neighbouring_cell(dim, side):
    cells = np.stack(np.meshgrid(*[np.arange(side)] * dim, indexing="ij"), -1).reshape(-1, dim)
    order = np.argsort(hilbert_keys(cells.astype(np.uint64), int(math.log2(side))))
    steps = np.abs(np.diff(cells[order], axis=0)).sum(axis=1)
    assert len(np.unique(order)) == side**dim
    assert (steps == 1).all()  # a row-major or random order fails this


def test_in_one_dimension_the_path_is_the_sorted_order():
    support = _line(40)
    plan = PathTreePlan.build(support.points, TARGET)
    assert (np.diff(support.points[plan.order, 0]) > 0).all()


# ---------------------------------------------------------------- exact decompositions


def test_chain_answers_use_the_canonical_dyadic_nodes():
    support = _line(8)
    queries = [_interval(support, 1, 6), _interval(support, 0, 7), _interval(support, 3, 3)]
    plan = build_plan("path_tree", support, queries, incidence(support, queries), TARGET)
    # [1,7) = {1} + {2,3} + {4,5} + {6}; everything = the root; one point = its leaf
    expected = np.array([4, 1, 1]) * noise_variance("gaussian", plan.scale)
    assert np.allclose(plan.predicted_variance(incidence(support, queries)), expected)
    five = _line(5)  # a cut tree: the run {3, 4} reaching the end uses {3} and the cut node {4}
    bits = incidence(five, [_interval(five, 3, 4)])
    plan = build_plan("path_tree", five, [_interval(five, 3, 4)], bits, TARGET)
    assert plan.predicted_variance(bits)[0] == pytest.approx(2 * plan.node_variance())


def _dense_tree(n):
    """Node-by-point 0/1 matrix of the tree over path positions, built directly."""
    height = math.ceil(math.log2(n)) if n > 1 else 0
    rows = []
    for level, count in enumerate(level_sizes(n)):
        width = 2 ** (height - level)
        for k in range(count):
            row = np.zeros(n)
            row[k * width : min(n, (k + 1) * width)] = 1
            rows.append(row)
    return np.array(rows)


@pytest.mark.parametrize("n", [1, 2, 13, 32, 45])
def test_gls_equals_dense_least_squares_and_never_loses_to_the_chain(n):
    support = _uniform_support(n, seed=n)
    queries = _mixed_workload(support, 40)
    bits = incidence(support, queries)
    plan = build_plan("path_tree", support, queries, bits, TARGET)
    tree = _dense_tree(n)
    assert (tree.sum(axis=0) == plan.height + 1).all()
    y = tree @ seeded_source(41).integers(9, n) + seeded_source(42).uniform(len(tree)) * 4
    w = np.unpackbits(bits, axis=1, count=n)[:, plan.order].astype(float)
    inverse = np.linalg.inv(tree.T @ tree)
    answers, variance = plan.answer({"nodes": y}, bits, "gls")
    assert np.allclose(answers, w @ inverse @ tree.T @ y)
    assert np.allclose(variance, np.einsum("ij,jk,ik->i", w, inverse, w) * plan.node_variance())
    assert (variance <= plan.predicted_variance(bits, "chain") * (1 + 1e-9)).all()


@pytest.mark.parametrize("estimator", ["chain", "gls"])
@pytest.mark.parametrize("rng", ["zero-noise", "epsilon-inf"])
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_without_noise_every_answer_is_exact(dim, rng, estimator):
    support = (
        _uniform_support(300, seed=43)
        if dim == 2
        else point_support(list("xyz")[:dim], [(0, 1)] * dim, seeded_source(44).uniform((300, dim)))
    )
    queries = _mixed_workload(support, 45)
    x = seeded_source(46).integers(9, support.n)
    epsilon, source = (1.0, ZeroNoise()) if rng == "zero-noise" else (math.inf, seeded_source(1))
    r = range_count(
        x,
        support,
        queries,
        epsilon=epsilon,
        delta=1e-6,
        mechanism="path_tree",
        estimator=estimator,
        rng=source,
    )
    tolerance = 0 if estimator == "chain" else 1e-6
    assert np.max(np.abs(r.answers - _true_answers(support, queries, x))) <= tolerance


# ---------------------------------------------------------------- public plan, accounting


def test_plan_is_identical_across_neighbouring_and_unrelated_datasets():
    plan_is_public_test("path_tree")  # test_range_count's T0: plan and accounting byte-identical


@pytest.mark.parametrize("neighbouring", ["replace-one", "add-remove"])
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_every_point_spends_exactly_the_budget(neighbouring, delta):
    support = _uniform_support(100, seed=54)  # h = 8 levels
    queries = random_halfspaces(support, 50, seeded_source(55))
    r = range_count(
        np.zeros(support.n, int),
        support,
        queries,
        epsilon=0.7,
        delta=delta,
        neighbouring=neighbouring,
        mechanism="path_tree",
        rng=seeded_source(56),
    )
    target = privacy_target(epsilon=0.7, delta=delta, neighbouring=neighbouring)
    plan = build_plan("path_tree", support, queries, incidence(support, queries), target)
    scale = r.structure["plan"]["scale"]
    loss = 8 / scale**2 if delta else 8 / scale  # recomputed from the structure alone
    assert plan.point_loss() == pytest.approx(np.full(support.n, loss))
    assert loss == pytest.approx(target.loss_budget, rel=1e-9)
    assert loss <= target.loss_budget
    assert r.accounting["epsilon"] <= 0.7 * (1 + 1e-9)


def test_a_damaged_structure_is_refused():
    support = _uniform_support(20, seed=57)
    queries = random_halfspaces(support, 10, seeded_source(58))
    r = range_count(
        np.ones(20, int),
        support,
        queries,
        epsilon=1.0,
        delta=1e-6,
        mechanism="path_tree",
        rng=seeded_source(59),
    )
    damaged = json.loads(json.dumps(r.structure))
    damaged["plan"]["order"][0] = damaged["plan"]["order"][1]
    with pytest.raises(MechanismError, match="not a permutation of the support points"):
        answer_queries(damaged, queries)


# ---------------------------------------------------------------- structure, CLI, auto


def test_structure_answers_new_queries_after_a_json_round_trip():
    support = _uniform_support(400, seed=60)
    queries = random_halfspaces(support, 500, seeded_source(61))
    x = seeded_source(62).integers(9, support.n)
    r = range_count(
        x, support, queries, epsilon=1.0, delta=1e-6, mechanism="path_tree", rng=seeded_source(63)
    )
    assert r.structure["estimator"] == "gls"  # `auto` picks least squares for path_tree
    saved = json.loads(json.dumps(r.structure))
    again, var = answer_queries(saved, queries[:50])
    assert np.allclose(again, r.answers[:50]) and np.allclose(var, r.variance[:50])
    _, chain_var = answer_queries(saved, queries[:50], estimator="chain")
    assert (chain_var >= var).all() and chain_var.mean() > 1.5 * var.mean()
    new = random_halfspaces(support, 20, seeded_source(64)) + [
        {"type": "box", "lo": [0.1, 0.2], "hi": [0.6, 0.9]}
    ]
    exact = json.loads(
        json.dumps(
            range_count(
                x, support, queries, epsilon=math.inf, delta=1e-6, mechanism="path_tree"
            ).structure
        )
    )
    for estimator in ("chain", "gls"):
        got, _ = answer_queries(exact, new, estimator=estimator)
        assert np.allclose(got, _true_answers(support, new, x), atol=1e-6)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_auto_weighs_path_tree_for_halfspaces_by_its_predicted_variance(delta):
    support = _uniform_support(256, seed=66)
    halfplanes = random_halfspaces(support, 1024, seeded_source(67))
    r = range_count(np.zeros(support.n, int), support, halfplanes, epsilon=1, delta=delta)
    assert "path_tree" in r.predicted and ("mn12" in r.predicted) == (delta > 0)
    assert r.predicted[r.mechanism] == min(r.predicted.values())
    boxes = random_boxes(support, 100, seeded_source(68))
    assert (
        "path_tree"
        not in range_count(
            np.zeros(support.n, int), support, boxes, epsilon=1, delta=delta
        ).predicted
    )


# ---------------------------------------------------------------- calibration


@pytest.mark.audit
@pytest.mark.parametrize("estimator", ["chain", "gls"])
def test_monte_carlo_error_matches_the_predicted_variance(estimator):
    # 300 releases x 2048 halfplanes over 512 points (test_range_count's T3 set-up): the relative
    # SE of the MSE ratio is ~3%, so the [0.9, 1.1] window is ~3 SE wide (false-alarm rate
    # ~0.3%); the 4-SE bias check ~1e-4.
    mean, se, ratio = _calibration("path_tree", estimator)
    assert abs(mean) <= 4 * se
    assert 0.9 <= ratio <= 1.1


@pytest.mark.audit
def test_monte_carlo_catches_a_twin_drawing_smaller_noise():
    _, _, ratio = _calibration("path_tree", "chain", source_factor=0.7)  # expected ratio 0.49
    assert not 0.9 <= ratio <= 1.1


# ---------------------------------------------------------------- privacy event test


@pytest.mark.audit
@pytest.mark.parametrize("delta", [1e-6, 0.0])
@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_privacy_event_test_on_one_released_count(delta, factor, monkeypatch):
    """The noisy count of one cell (one leaf of the tree) hides one record as declared.

    test_range_count's event test, run on path_tree: 10^4 releases per side on neighbours that
    move one record into cell 0, alpha = 1e-6 family-wise. Claim: Gaussian of the declared
    variance V at the tight (epsilon, 1e-3) of mu = 1/sqrt(V) (mu ~ 0.6 at epsilon 13, h = 6
    levels); discrete Laplace of scale b at epsilon = 1/b. The broken twin (factor 0.5) draws
    half the noise and must fail.
    """
    monkeypatch.setitem(AUDIT_EPSILON, "path_tree", 13.0)
    event_test_of_one_range_count("path_tree", delta, factor)
