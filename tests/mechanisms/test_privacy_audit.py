"""The event-test helper passes honest noise and catches too little noise.

Setting: counts f(D) = 0, f(D') = 1 (sensitivity 1) plus discrete Laplace of scale 1/epsilon,
n = 10^5 draws per side, alpha = 1e-6 (family-wise false-alarm rate).
"""

import math

import numpy as np
import pytest

from mechanisms.noise import seeded_source
from tests.mechanisms.privacy_audit import (
    audit_neighbours,
    clopper_pearson_lower,
    clopper_pearson_upper,
    threshold_grid,
)

N = 100_000


def _outputs(epsilon, scale_factor, seed):
    rng = seeded_source(seed)
    scale = scale_factor / epsilon
    return 0 + rng.discrete_laplace(scale, N), 1 + rng.discrete_laplace(scale, N), scale


@pytest.mark.audit
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_it_passes_correct_noise(epsilon):
    out_d, out_d2, scale = _outputs(epsilon, 1.0, seed=11)
    result = audit_neighbours(
        out_d, out_d2, epsilon=epsilon, thresholds=threshold_grid(0, 1, scale)
    )
    assert result.passed, result.summary()
    assert result.epsilon_hat <= epsilon


@pytest.mark.audit
@pytest.mark.parametrize("epsilon, factor", [(0.5, 0.5), (1.0, 0.5), (1.0, 0.85), (2.0, 0.85)])
def test_it_catches_the_broken_twin(epsilon, factor):
    out_d, out_d2, _ = _outputs(epsilon, factor, seed=12)
    grid = threshold_grid(0, 1, 1 / epsilon)  # fixed from the claimed parameters
    result = audit_neighbours(out_d, out_d2, epsilon=epsilon, thresholds=grid)
    assert not result.passed, result.summary()
    assert result.epsilon_hat > epsilon


@pytest.mark.audit
def test_it_allows_delta_slack():
    out_d, out_d2, scale = _outputs(1.0, 0.85, seed=12)
    grid = threshold_grid(0, 1, scale)
    assert audit_neighbours(out_d, out_d2, epsilon=1.0, delta=0.2, thresholds=grid).passed


def test_clopper_pearson_bounds_bracket_the_proportion():
    hits = np.array([0, 10, 500, 1000])
    lower, upper = clopper_pearson_lower(hits, 1000, 1e-3), clopper_pearson_upper(hits, 1000, 1e-3)
    assert lower[0] == 0 and upper[-1] == 1
    assert np.all(lower <= hits / 1000) and np.all(hits / 1000 <= upper)
    assert math.isclose(upper[0], 1 - 1e-3 ** (1 / 1000))  # exact for zero hits
