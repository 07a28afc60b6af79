"""Utility metrics against hand-computed values."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mechanisms import metrics
from mechanisms.errors import MechanismError
from mechanisms.noise import seeded_source
from mechanisms.schema import Schema

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": [0, 0.5, 1]},
            {"name": "y", "type": "numeric", "lower": 0, "upper": 2, "bins": 2},
            {"name": "g", "type": "categorical", "categories": ["a", "b", "c"]},
        ]
    }
)


def test_squared_l2_of_piecewise_constant_densities():
    # f = 2 on [0, .5), 0 elsewhere; g = 1 everywhere: integral of (f - g)^2 = .5 * 1 + .5 * 1
    assert metrics.squared_l2([1, 0], [0.5, 0.5], [0.5, 0.5]) == pytest.approx(1.0)
    with pytest.raises(MechanismError, match="one positive volume per cell"):
        metrics.squared_l2([1, 0], [0.5, 0.5], [0.5, 0])


def test_cell_volumes_multiply_bin_widths():
    volumes = metrics.cell_volumes(SCHEMA, ["x", "y", "g"])
    # each column's last cell is its "(missing)" cell, of width 1
    assert volumes.shape == (3, 3, 5) and np.allclose(volumes[:2, :2, :4], 0.5)
    assert volumes[2, 2, 4] == 1
    assert metrics.cell_volumes(SCHEMA, ["x", "y"]).sum() == pytest.approx(6.0)  # (1 + 1)(2 + 1)


def test_ks_distance_matches_scipy_and_hand_values():
    assert metrics.ks_distance([1, 2, 3], [1, 2, 3]) == 0
    assert metrics.ks_distance([0, 0], [1, 1]) == 1
    rng = seeded_source(1)
    a, b = rng.gaussian(1, 300), rng.gaussian(1, 500) + 0.2
    assert metrics.ks_distance(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic)


def test_orthant_ks_reduces_to_ks_in_one_dimension_and_sees_2d_differences():
    rng = seeded_source(2)
    a, b = rng.uniform(400), rng.uniform(300)
    assert metrics.orthant_ks_distance(a[:, None], b[:, None]) == pytest.approx(
        metrics.ks_distance(a, b)
    )
    # same marginals, opposite dependence: 1-D KS sees nothing, the orthant version does
    u = np.linspace(0, 1, 501)
    together, opposite = np.column_stack([u, u]), np.column_stack([u, 1 - u])
    assert metrics.ks_distance(together[:, 1], opposite[:, 1]) < 0.01
    # F(x, y) = min(x, y) against max(0, x + y - 1): the gap is 0.5 at (0.5, 0.5)
    assert metrics.orthant_ks_distance(together, opposite) == pytest.approx(0.5, abs=0.01)


def test_marginal_tvds():
    raw = pd.DataFrame({"x": [0.1, 0.1, 0.9, 0.9], "y": [0.1] * 4, "g": ["a", "a", "b", "b"]})
    syn = pd.DataFrame({"x": [0.1, 0.9, 0.9, 0.9], "y": [0.1, 0.1, 1.5, 1.5], "g": ["a"] * 4})
    result = metrics.marginal_tvds(SCHEMA, raw, syn, ["x", "y", "g"])
    assert result["1-way"] == {"x": 0.25, "y": 0.5, "g": 0.5}
    assert set(result["2-way"]) == {"x x y", "x x g", "y x g"}
    assert result["2-way"]["x x g"] == pytest.approx(0.75)


def test_range_query_errors():
    raw = pd.DataFrame({"x": [0.1, 0.2, 0.6, 0.9]})
    syn = pd.DataFrame({"x": [0.15, 0.7]})
    queries = [{"x": (0, 0.5)}, {"x": (0.5, 1)}, {"x": (0.65, 1)}]
    assert metrics.range_counts(raw, queries).tolist() == [2, 2, 1]
    errors = metrics.synthetic_range_errors(raw, syn, queries)
    assert errors == {"mean_abs_error": pytest.approx(1 / 3), "max_abs_error": 1.0}  # 2-2, 2-2, 2-1
    with pytest.raises(MechanismError, match="at least one query"):
        metrics.range_query_errors([], [])
