"""MWEM's consistent targets (issue 44, item 1): before the last round's passes, every marginal
target is shifted to agree on one 1-way marginal per attribute, pooled by inverse noise variance.

Post-processing of the noisy answers: these tests check the arithmetic and that the pooled
marginal is as accurate as inverse-variance weighting promises (a statistical test with its
sample size and false-alarm rate, and a twin with equal weights that it catches).
"""

import importlib

import numpy as np
import pytest

from mechanisms.accuracy import discrete_laplace_std
from mechanisms.mwem.fit import consistent_targets
from mechanisms.noise import seeded_source
from mechanisms.workload import Query

fit_module = importlib.import_module("mechanisms.mwem.fit")
SHAPE = (3, 5)
START, PAIR = Query((0,)), Query((0, 1))
START_SCALE, PAIR_SCALE = 10.0, 2.0  # the start far noisier than the pair's cells


def _targets(start, pair):
    return [(START, np.asarray(start, float), 0.01), (PAIR, np.asarray(pair, float), 0.02)]


def _pooled_weight() -> float:
    """The start's weight in the pooled 1-way marginal of attribute 0 (inverse variances)."""
    start = 1 / discrete_laplace_std(START_SCALE) ** 2
    pair = 1 / (SHAPE[1] * discrete_laplace_std(PAIR_SCALE) ** 2)  # a sum of 5 cells
    return start / (start + pair)


def test_targets_agree_on_the_pooled_one_way_marginal():
    """Targets are fractions of n: the pooled marginal is shifted to sum to 1, and the pair's
    sums along both attributes are then exactly the pooled ones."""
    start = np.array([0.5, 0.35, 0.25])  # noisy: sums to 1.1
    pair = np.arange(15, dtype=float) / 105  # sums to 1; its attribute-0 sums: 10, 35, 60 / 105
    out = consistent_targets(_targets(start, pair), [START_SCALE, PAIR_SCALE], SHAPE)
    w = _pooled_weight()
    pooled = w * start + (1 - w) * np.array([10.0, 35.0, 60.0]) / 105
    pooled += (1 - pooled.sum()) / 3
    assert np.allclose(out[0][1], pooled) and out[0][1].sum() == pytest.approx(1)
    assert np.allclose(out[1][1].reshape(SHAPE).sum(axis=1), pooled)
    # attribute 1 is held by the pair alone: its sums are unchanged
    assert np.allclose(out[1][1].reshape(SHAPE).sum(axis=0), pair.reshape(SHAPE).sum(axis=0))
    assert [floor for *_, floor in out] == [0.01, 0.02]


def test_boxes_and_exact_answers_are_left_as_measured():
    box = (Query((0,), ((1, 2),)), np.array([7.0]), 0.0)
    measured = [*_targets([1.0, 2.0, 3.0], np.ones(15)), box]
    out = consistent_targets(measured, [START_SCALE, PAIR_SCALE, 1.0], SHAPE)
    assert out[2] is box
    assert consistent_targets(measured, [0.0, 0.0, 0.0], SHAPE) is measured  # ε infinite


def _pooled_variance(draws: int) -> float:
    """Mean squared error of the pooled attribute-0 marginal over `draws` noisy releases."""
    rng = seeded_source(44)
    true_pair = np.arange(15, dtype=float).reshape(SHAPE) * 20
    true_start, n = true_pair.sum(axis=1), true_pair.sum()
    errors = []
    for _ in range(draws):
        start = true_start + rng.discrete_laplace(START_SCALE, size=3)
        pair = true_pair.ravel() + rng.discrete_laplace(PAIR_SCALE, size=15)
        out = consistent_targets(_targets(start / n, pair / n), [START_SCALE, PAIR_SCALE], SHAPE)
        errors.append(out[0][1] * n - true_start)
    return float(np.mean(np.square(errors)))


def test_the_pooled_marginal_has_the_inverse_variance_error():
    """N = 3,000 releases × 3 cells. The pooled cell's variance is 1 / (1/v₁ + 1/v₂) = 32.8
    (v₁ = 199 for the start at scale 10, v₂ = 5 × 7.8 for a sum of five cells at scale 2),
    times 2/3 once the 3 cells are shifted to the known total (n public): 21.8. The empirical
    MSE's relative standard error is about √((κ − 1)/(3N)) ≤ 3% (κ ≤ 6 for Laplace sums); the
    band ±15% is 5 standard errors: false alarm below 10^-6. Twin: equal weights (variance
    (v₁ + v₂)/4 × 2/3 = 39.7, outside the band)."""
    optimal = _optimal_variance()
    assert _pooled_variance(3_000) == pytest.approx(optimal, rel=0.15)


def test_its_twin_equal_weights_is_caught(monkeypatch):
    def equal_weights(marginals, scales, shape):
        sums: dict = {}
        for _, query, table in marginals:
            for axis, a in enumerate(query.attrs):
                sums.setdefault(a, []).append(fit_module._one_way(table, axis))
        means = {a: np.mean(found, axis=0) for a, found in sums.items()}
        return {a: m + (1 - m.sum()) / m.size for a, m in means.items()}

    monkeypatch.setattr(fit_module, "_pooled_one_way", equal_weights)
    assert _pooled_variance(3_000) > _optimal_variance() * 1.15


def _optimal_variance() -> float:
    """Inverse-variance pooling of the two estimates, then the shift to the known total."""
    start = discrete_laplace_std(START_SCALE) ** 2
    pair = SHAPE[1] * discrete_laplace_std(PAIR_SCALE) ** 2
    return 1 / (1 / start + 1 / pair) * (1 - 1 / SHAPE[0])
