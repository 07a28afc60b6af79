"""Shared pieces of the range-count tests (test_range_count*.py): supports, noise sources that
return zero or shrunk noise (the broken twins), the Monte-Carlo calibration, the one-count event
test and its fixed audit workload, and the command line's inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from scipy.stats import norm

from mechanisms.noise import RandomSource, seeded_source
from mechanisms.range_count import (
    grid_support,
    incidence,
    point_support,
    random_halfspaces,
    range_count,
)
from mechanisms.range_count.api import build_plan
from mechanisms.range_count.core import privacy_target
from tests.mechanisms.privacy_audit import audit_neighbours, threshold_grid


def _true_answers(support, queries, counts):
    bits = incidence(support, queries)
    return np.unpackbits(bits, axis=1, count=support.n).astype(float) @ counts


def _uniform_support(n, seed):
    pts = seeded_source(seed).uniform((n, 2))
    return point_support(["x", "y"], [(0, 1), (0, 1)], pts)


class ZeroNoise(RandomSource):
    """Noise of the declared scale that always comes out zero: for exactness tests."""

    def discrete_gaussian(self, sigma, size):
        return np.zeros(size, dtype=np.int64)

    def discrete_laplace(self, scale, size):
        return np.zeros(size, dtype=np.int64)


class ShrunkNoise(RandomSource):
    """Broken twin: draws noise at `factor` times the scale the plan asks for."""

    def __init__(self, inner, factor):
        self.inner, self.factor = inner, factor

    def discrete_gaussian(self, sigma, size):
        return self.inner.discrete_gaussian(sigma * self.factor, size)

    def discrete_laplace(self, scale, size):
        return self.inner.discrete_laplace(scale * self.factor, size)


def plan_is_public(mechanism):
    """T0: the plan and accounting are byte-identical on neighbouring and unrelated data."""
    support = _uniform_support(300, seed=1)
    queries = random_halfspaces(support, 600, seeded_source(2))
    x = seeded_source(3).integers(6, support.n)
    neighbour = x.copy()
    neighbour[np.argmax(x)] -= 1  # replace-one: one record moves between points
    neighbour[np.argmin(x)] += 1
    unrelated = seeded_source(4).integers(50, support.n)
    if mechanism == "tree":
        support = grid_support(["x", "y"], [(0, 1), (0, 1)], (15, 20))
    plans = set()
    for counts, seed in ((x, 5), (neighbour, 6), (unrelated, 7)):
        r = range_count(
            counts,
            support,
            queries,
            epsilon=1.0,
            delta=1e-6,
            mechanism=mechanism,
            rng=seeded_source(seed),
        )
        plans.add(json.dumps([r.mechanism, r.structure["plan"], r.accounting], sort_keys=True))
    assert len(plans) == 1


RUNS = 300


def _calibration(mechanism, estimator, source_factor=1.0):
    """Monte-Carlo (RUNS releases, n = 512) mean error, its SE, and empirical/predicted MSE."""
    support = _uniform_support(512, seed=19)
    queries = random_halfspaces(support, 2048, seeded_source(20))
    bits = incidence(support, queries)
    target = privacy_target(epsilon=1.0, delta=1e-6, neighbouring="add-remove")
    plan = build_plan(mechanism, support, queries, bits, target)
    x = seeded_source(21).integers(20, support.n)
    truth = _true_answers(support, queries, x)
    base = seeded_source(22)
    source = base if source_factor == 1 else ShrunkNoise(base, source_factor)
    errors, predicted = [], None
    for _ in range(RUNS):
        answers, predicted = plan.answer(plan.measure(x, source), bits, estimator)
        errors.append(answers - truth)
    errors = np.array(errors)
    per_run = errors.mean(axis=1)
    return (
        per_run.mean(),
        per_run.std(ddof=1) / math.sqrt(RUNS),
        (errors**2).mean() / predicted.mean(),
    )


N_AUDIT = 10_000  # per side; the broken twins draw noise at half the planned scale


EVENT_DELTA = 1e-3


def _gaussian_epsilon(mu, delta):
    """Tight epsilon of a Gaussian shift with mu = sensitivity / std at the given delta."""
    lo, hi = 0.0, 50.0
    for _ in range(100):
        eps = (lo + hi) / 2
        d = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        lo, hi = (eps, hi) if d > delta else (lo, eps)
    return hi


AUDIT_SUPPORT = grid_support(["x", "y"], [(0, 1), (0, 1)], (5, 6))


AUDIT_QUERIES = random_halfspaces(AUDIT_SUPPORT, 60, seeded_source(23)) + [
    {"type": "box", "lo": [0, 0], "hi": [0.1, 0.1]}
]  # the single cell 0


# epsilons giving mu = 1/sqrt(V) of 0.5-1 (noise std >= 1) for the audited count
AUDIT_EPSILON = {"identity": 8.0, "per_query": 30.0, "tree": 8.0, "mn12": 8.0, "pure": 2.0}


def _audit(mechanism, delta, factor, seed):
    """N_AUDIT releases on D and D' (one record moved into cell 0), projected to its count."""
    target = privacy_target(
        epsilon=AUDIT_EPSILON["pure" if delta == 0 else mechanism],
        delta=delta,
        neighbouring="replace-one",
    )
    bits = incidence(AUDIT_SUPPORT, AUDIT_QUERIES)
    plan = build_plan(mechanism, AUDIT_SUPPORT, AUDIT_QUERIES, bits, target, n_min=4)
    box = bits[-1:]
    x = np.full(AUDIT_SUPPORT.n, 3)
    x2 = x.copy()
    x2[0] += 1
    x2[-1] -= 1
    samples = []
    for counts, s in ((x, seed), (x2, seed + 1)):
        source = ShrunkNoise(seeded_source(s), factor)
        samples.append(
            np.array([plan.answer(plan.measure(counts, source), box)[0][0] for _ in range(N_AUDIT)])
        )
    return samples, plan, float(plan.predicted_variance(box)[0])


def event_test_of_one_range_count(mechanism, delta, factor):
    """A released count hides one record as well as its declared noise says.

    Claim: Gaussian noise of the declared variance V hides a shift of 1 at the tight
    (epsilon, 1e-3) of mu = 1/sqrt(V); discrete Laplace of declared scale b at epsilon = 1/b.
    alpha = 1e-6 (family-wise false alarms); the broken twin (factor 0.5) draws half the noise.
    """
    (sample_d, sample_d2), plan, variance = _audit(mechanism, delta, factor, seed=30)
    if delta == 0:
        epsilon, event_delta = 1.0 / plan.scale, 0.0
        grid = threshold_grid(3, 4, plan.scale)
    else:
        epsilon = _gaussian_epsilon(1.0 / math.sqrt(variance), EVENT_DELTA)
        event_delta = EVENT_DELTA
        grid = threshold_grid(3, 4, math.sqrt(variance), integer=False, points=81)
    result = audit_neighbours(
        sample_d,
        sample_d2,
        epsilon=epsilon,
        delta=event_delta,
        thresholds=grid,
        discrete=delta == 0,
    )
    assert result.passed == (factor == 1.0), result.summary()


def write_xy_inputs(folder, seed: int) -> None:
    """schema.json (x, y in [0, 1]) and data.csv (200 uniform points) for command-line tests."""
    schema = {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 8},
            {"name": "y", "type": "numeric", "lower": 0, "upper": 1, "bins": 8},
        ]
    }
    (folder / "schema.json").write_text(json.dumps(schema))
    pd.DataFrame(seeded_source(seed).uniform((200, 2)), columns=["x", "y"]).to_csv(
        folder / "data.csv", index=False
    )
