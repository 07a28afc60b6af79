"""Neighbouring-dataset event tests of the range-count mechanisms against the REQUESTED budget.

`sample_release` runs the real plan (built by `build_plan` from the requested epsilon, delta and
neighbouring relation, exactly as `range_count` builds it) `draws` times on two neighbouring
count vectors and projects each noisy release to its privacy-loss statistic

    L(y) = sum_j w_j (|y_j - a_j| - |y_j - b_j|)          discrete Laplace, w_j = 1 / b_j
    L(y) = sum_j ((y_j - a_j)^2 - (y_j - b_j)^2) / 2s_j^2   discrete Gaussian of sd s_j

over the released values j that differ (a = exact release on D, b on D'). L is the log
likelihood ratio of the two output distributions, so the events {L >= t} are the most
powerful ones: they are where a too-small noise scale shows first. The noise scales and the
neighbours are read from the plan (they choose the EVENT, never the claim). The claim
(`claims`) is a function of the requested (epsilon, delta) only:

- pure epsilon-DP (delta = 0): (epsilon, 0);
- mn12_laplace: (epsilon, delta);
- Gaussian plans: (epsilon, delta) and, because the requested (epsilon, delta) is met through
  rho-zCDP with rho = (sqrt(ln(1/delta) + epsilon) - sqrt(ln(1/delta)))^2 (the inverse of
  epsilon = rho + 2 sqrt(rho ln(1/delta)), recomputed here), the (eps1, delta1)-DP that every
  rho-zCDP mechanism has (Canonne-Kamath-Steinke 2020, Prop. 12 / Cor. 13):
      delta1 = min over alpha > 1 of exp((alpha-1)(alpha rho - eps1)) / alpha (1-1/alpha)^(alpha-1).

The twin (`dropped_replace_one_factor`) doubles PrivacyTarget.loss_budget, which is exactly the
budget with the replace-one factor dropped (and, under add-remove, half the sensitivity).
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.noise import RandomSource, seeded_source
from mechanisms.persons import mechanism_budget
from mechanisms.range_count import all_prefixes, grid_support, incidence, random_halfspaces
from mechanisms.range_count.api import build_plan
from mechanisms.range_count.core import PrivacyTarget, privacy_target
from mechanisms.range_count.inputs import normalize_queries

LINE = grid_support(["x"], [(0, 1)], (16,))
LONG_LINE = grid_support(["x"], [(0, 1)], (256,))  # the tree: two levels of 16
PLANE = grid_support(["x", "y"], [(0, 1), (0, 1)], (6, 6))
HALVES = [{"type": "box", "lo": [0.0], "hi": [0.49]}, {"type": "box", "lo": [0.51], "hi": [1.0]}]


def setting(mechanism: str):
    """(support, workload, plan options) of each audited mechanism."""
    if mechanism in ("mn12", "mn12_laplace"):
        return PLANE, random_halfspaces(PLANE, 40, seeded_source(3)), {"n_min": 4}
    if mechanism == "per_query":  # disjoint queries: one record moves between two of them
        return LINE, normalize_queries(HALVES, 1), {}
    if mechanism == "tree":
        return LONG_LINE, all_prefixes(LONG_LINE), {}
    return LINE, all_prefixes(LINE), {}


def dropped_replace_one_factor(monkeypatch) -> None:
    """The broken twin: every plan gets twice the per-point loss budget it may spend."""
    honest = PrivacyTarget.loss_budget.fget
    monkeypatch.setattr(PrivacyTarget, "loss_budget", property(lambda t: 2.0 * honest(t)))


class ScaleProbe(RandomSource):
    """Noise equal to a code per noise call, so a zero-count release shows every value's scale."""

    def __init__(self):
        self.scales: list[tuple[str, float]] = []

    def _code(self, kind, scale, size):
        self.scales.append((kind, float(scale)))
        return np.full(size, len(self.scales), dtype=np.int64)

    def discrete_laplace(self, scale, size):
        return self._code("laplace", scale, size)

    def discrete_gaussian(self, sigma, size):
        return self._code("gaussian", sigma, size)


class PooledNoise(RandomSource):
    """The project's seeded sampler, drawn in large blocks per scale (the same i.i.d. stream,
    fast enough to run a plan's own `measure` 10^4-10^5 times)."""

    def __init__(self, seed: int):
        self.inner, self.pools = seeded_source(seed), {}

    def _take(self, kind, scale, size):
        count = int(np.prod(size))
        pool, pos = self.pools.get((kind, scale), (np.zeros(0, dtype=np.int64), 0))
        if pos + count > len(pool):
            pool, pos = getattr(self.inner, kind)(scale, max(1 << 17, count)), 0
        self.pools[(kind, scale)] = (pool, pos + count)
        return pool[pos : pos + count].reshape(size)

    def discrete_laplace(self, scale, size):
        return self._take("discrete_laplace", scale, size)

    def discrete_gaussian(self, sigma, size):
        return self._take("discrete_gaussian", sigma, size)


def flat(measured) -> np.ndarray:
    """Every released value of a `measure` result, in a fixed order."""
    if isinstance(measured, dict):
        return np.concatenate([flat(v) for v in measured.values()])
    if isinstance(measured, list):
        return np.concatenate([flat(v) for v in measured]) if measured else np.zeros(0)
    return np.asarray(measured, dtype=np.int64).ravel()


def requested_plan(mechanism: str, epsilon: float, delta: float, neighbouring: str):
    support, queries, options = setting(mechanism)
    target = privacy_target(epsilon=epsilon, delta=delta, neighbouring=neighbouring)
    return support, build_plan(
        mechanism, support, queries, incidence(support, queries), target, **options
    )


def _noise_of_each_value(plan):
    probe = ScaleProbe()
    codes = flat(plan.measure(np.zeros(plan.n, dtype=np.int64), probe))
    kinds = {kind for kind, _ in probe.scales}
    assert len(kinds) == 1, kinds
    return kinds.pop(), np.array([probe.scales[c - 1][1] for c in codes])


def _worst_neighbours(plan, kind, scales, neighbouring):
    """Base counts (2 per point) and the neighbour of largest loss under the relation."""
    base = np.full(plan.n, 2, dtype=np.int64)
    zero = _exact(plan, base)
    columns = np.stack(
        [_exact(plan, base + np.eye(plan.n, dtype=np.int64)[p]) - zero for p in range(plan.n)],
        axis=1,
    )
    w = 1 / scales if kind == "laplace" else 1 / scales**2
    if neighbouring == "add-remove":
        loss = (
            (np.abs(columns) * w[:, None]).sum(axis=0)
            if kind == "laplace"
            else (columns**2 * w[:, None]).sum(axis=0)
        )
        p = int(np.argmax(loss))
        return base, base + np.eye(plan.n, dtype=np.int64)[p]
    best, pair = -1.0, (0, 1)
    for p in range(plan.n):
        diff = columns - columns[:, [p]]
        loss = (
            (np.abs(diff) * w[:, None]).sum(axis=0)
            if kind == "laplace"
            else (diff**2 * w[:, None]).sum(axis=0)
        )
        q = int(np.argmax(loss))
        if loss[q] > best:
            best, pair = float(loss[q]), (p, q)
    p, q = pair
    return base + np.eye(plan.n, dtype=np.int64)[p], base + np.eye(plan.n, dtype=np.int64)[q]


def _exact(plan, counts):
    return flat(plan.measure(counts, _Zero()))


class _Zero(RandomSource):
    def discrete_laplace(self, scale, size):
        return np.zeros(size, dtype=np.int64)

    def discrete_gaussian(self, sigma, size):
        return np.zeros(size, dtype=np.int64)


def sample_release(mechanism, *, epsilon, delta, neighbouring, draws, seed, person=None):
    """(L on D, L on D', threshold grid): `draws` runs of the plan's `measure` per side.

    With `person` (a mechanisms.persons.PersonLevel of bound k): the plan is built at the
    row-level budget a person-level release runs at (persons.mechanism_budget), and D, D'
    differ in all k rows of one person (added at the worst point, or moved between the worst
    pair of points under replace-one).
    """
    budget, group = (epsilon, delta, neighbouring), 1
    if person is not None:
        budget, group = mechanism_budget(person, epsilon, delta, neighbouring), person.max_rows
    _support, plan = requested_plan(mechanism, *budget)
    kind, scales = _noise_of_each_value(plan)
    d, d2 = (2 + group * (c - 2) for c in _worst_neighbours(plan, kind, scales, neighbouring))
    a, b = _exact(plan, d), _exact(plan, d2)
    changed = np.flatnonzero(a != b)
    a, b, s = a[changed].astype(float), b[changed].astype(float), scales[changed]
    stats = []
    for counts, side_seed in ((d, seed), (d2, seed + 1)):
        source = PooledNoise(side_seed)
        y = np.array([flat(plan.measure(counts, source))[changed] for _ in range(draws)], float)
        if kind == "laplace":
            stats.append(((np.abs(y - a) - np.abs(y - b)) / s).sum(axis=1))
        else:
            stats.append((((y - a) ** 2 - (y - b) ** 2) / (2 * s**2)).sum(axis=1))
    if kind == "laplace":
        top = float((np.abs(a - b) / s).sum())
        grid = np.linspace(-top, top, 161) - 1e-9
    else:
        mu2 = float(((a - b) ** 2 / s**2).sum())
        grid = np.linspace(-mu2 / 2 - 6 * math.sqrt(mu2), mu2 / 2 + 6 * math.sqrt(mu2), 121)
    return stats[0], stats[1], grid


def requested_rho(epsilon: float, delta: float) -> float:
    """rho with rho + 2 sqrt(rho ln(1/delta)) = epsilon (computed here, not by the package)."""
    log_term = math.log(1 / delta)
    return (math.sqrt(log_term + epsilon) - math.sqrt(log_term)) ** 2


def zcdp_delta(rho: float, eps1: float) -> float:
    """delta1 of the (eps1, delta1)-DP that every rho-zCDP mechanism satisfies (CKS Cor. 13)."""
    alpha = np.linspace(1.0001, 5000, 500_000)
    log_delta = (
        (alpha - 1) * (alpha * rho - eps1) - np.log(alpha) + (alpha - 1) * np.log1p(-1 / alpha)
    )
    return min(1.0, float(np.exp(log_delta.min())))


def zcdp_event_epsilon(rho: float) -> float:
    """The eps1 (fixed before sampling, from rho only) where a Gaussian of twice rho (the twin)
    exceeds the rho-zCDP bound the most."""
    from scipy.stats import norm

    mu = math.sqrt(4 * rho)
    grid = np.linspace(0.05, 6, 120)
    excess = [
        norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - zcdp_delta(rho, e)
        for e in grid
    ]
    return float(grid[int(np.argmax(excess))])


def claims(mechanism: str, epsilon: float, delta: float) -> list[tuple[float, float]]:
    """The (epsilon, delta) pairs the request promises, from the requested values only."""
    if delta == 0 or mechanism == "mn12_laplace":
        return [(epsilon, delta)]
    rho = requested_rho(epsilon, delta)
    eps1 = zcdp_event_epsilon(rho)
    return [(epsilon, delta), (eps1, zcdp_delta(rho, eps1))]
