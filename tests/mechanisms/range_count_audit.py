"""Neighbouring-dataset event tests of the range-count mechanisms against the REQUESTED budget.

`sample_release` draws the real plan (built by `build_plan` from the requested epsilon, delta and
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
from dataclasses import dataclass
from functools import lru_cache

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


STRIDE = 1 << 32  # a probe's noise names its draw: (call number + 1) * STRIDE + element


class RoutingProbe(RandomSource):
    """Noise that names itself: element e of the c-th noise call (c from 0) is
    (c + 1) * STRIDE + e, so `measure(counts, probe) - exact(counts)` shows which draw of which
    call each released value received (`noise_routes`)."""

    def __init__(self):
        self.calls: list[tuple[str, float, int]] = []

    def _code(self, kind, scale, size):
        shape = (size,) if np.ndim(size) == 0 else tuple(size)
        self.calls.append((kind, float(scale), int(np.prod(shape))))
        return len(self.calls) * STRIDE + np.arange(self.calls[-1][2]).reshape(shape)

    def discrete_laplace(self, scale, size):
        return self._code("discrete_laplace", scale, size)

    def discrete_gaussian(self, sigma, size):
        return self._code("discrete_gaussian", sigma, size)


class KeepingSource(RandomSource):
    """The project's seeded sampler, keeping every noise array it returned (in call order)."""

    def __init__(self, seed: int):
        self.inner, self.drawn = seeded_source(seed), []

    def discrete_laplace(self, scale, size):
        self.drawn.append(self.inner.discrete_laplace(scale, size))
        return self.drawn[-1]

    def discrete_gaussian(self, sigma, size):
        self.drawn.append(self.inner.discrete_gaussian(sigma, size))
        return self.drawn[-1]


@dataclass(frozen=True)
class NoiseRoutes:
    """How a plan's `measure` noises its released values: value j gets draw `element[j]` of
    noise call `call[j]`, and `calls` lists (primitive, scale, size) of each call in order."""

    calls: list[tuple[str, float, int]]
    call: np.ndarray
    element: np.ndarray

    @property
    def kind(self) -> str:
        primitives = {primitive for primitive, _, _ in self.calls}
        assert len(primitives) == 1, primitives
        return "laplace" if primitives == {"discrete_laplace"} else "gaussian"

    def scales(self) -> np.ndarray:
        return np.array([self.calls[c][1] for c in self.call])

    def same_as(self, other: NoiseRoutes) -> bool:
        return (
            self.calls == other.calls
            and np.array_equal(self.call, other.call)
            and np.array_equal(self.element, other.element)
        )


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


def noise_routes(plan, counts) -> NoiseRoutes:
    """The routes of `plan.measure` on `counts`; fails unless every released value is its exact
    value plus exactly one draw of one noise call (the noise is added, nothing else)."""
    probe = RoutingProbe()
    codes = flat(plan.measure(np.asarray(counts, dtype=np.int64), probe)) - _exact(plan, counts)
    call, element = codes // STRIDE - 1, codes % STRIDE
    sizes = np.array([size for _, _, size in probe.calls])
    assert probe.calls and ((call >= 0) & (call < len(sizes))).all(), "a value without its noise"
    assert (element < sizes[call]).all(), "a value whose noise is not one draw"
    return NoiseRoutes(probe.calls, call, element)


def check_replay(plan, counts, routes: NoiseRoutes, seed: int, runs: int = 20) -> None:
    """`runs` real runs of `plan.measure` on real noise equal exact + each value's routed draw:
    `draw_releases`, which assembles releases from the routes, gives the measure's own output."""
    exact = _exact(plan, counts)
    for _ in range(runs):
        source = KeepingSource(seed)
        released = flat(plan.measure(np.asarray(counts, dtype=np.int64), source))
        assert [n.size for n in source.drawn] == [size for _, _, size in routes.calls]
        routed = [source.drawn[c].ravel()[e] for c, e in zip(routes.call, routes.element)]
        assert np.array_equal(released, exact + np.asarray(routed, dtype=np.int64))
        seed += 1000


def draw_releases(routes: NoiseRoutes, exact, columns, source, draws, block=10_000):
    """`draws` releases of the values `columns`: exact + the draw each gets by `routes`, taken
    from the production sampler `source` in blocks (the i.i.d. stream `measure` would see,
    without running it `draws` times). A draw that `measure` gives to several values is
    given to all of them here too."""
    out = np.empty((draws, len(columns)))
    call, element = routes.call[columns], routes.element[columns]
    for start in range(0, draws, block):
        rows = min(block, draws - start)
        noise = np.empty((rows, len(columns)))
        for c, (primitive, scale, _) in enumerate(routes.calls):
            take = np.flatnonzero(call == c)
            if take.size:
                used, where = np.unique(element[take], return_inverse=True)
                noise[:, take] = getattr(source, primitive)(scale, (rows, used.size))[:, where]
        out[start : start + rows] = exact[columns] + noise
    return out


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
    """(L on D, L on D', threshold grid): `draws` releases of the plan's `measure` per side.

    The releases are exact + noise from the production sampler, routed to the values as the
    plan's own `measure` routes it (`noise_routes`, checked on real runs by `check_replay`),
    drawn in blocks (`draw_releases`) so that 10^5 draws per side take seconds.

    With `person` (a mechanisms.persons.PersonLevel of bound k): the plan is built at the
    row-level budget a person-level release runs at (persons.mechanism_budget), and D, D'
    differ in all k rows of one person (added at the worst point, or moved between the worst
    pair of points under replace-one).
    """
    budget, group = (epsilon, delta, neighbouring), 1
    if person is not None:
        budget, group = mechanism_budget(person, epsilon, delta, neighbouring), person.max_rows
    _support, plan = requested_plan(mechanism, *budget)
    routes = noise_routes(plan, np.zeros(plan.n, dtype=np.int64))
    kind, scales = routes.kind, routes.scales()
    d, d2 = (2 + group * (c - 2) for c in _worst_neighbours(plan, kind, scales, neighbouring))
    a, b = _exact(plan, d), _exact(plan, d2)
    changed = np.flatnonzero(a != b)
    stats = []
    for counts, side_seed in ((d, seed), (d2, seed + 1)):
        assert noise_routes(plan, counts).same_as(routes), "the noise depends on the data"
        check_replay(plan, counts, routes, side_seed + 7)
        y = draw_releases(routes, _exact(plan, counts), changed, seeded_source(side_seed), draws)
        ya, yb, s = y - a[changed], y - b[changed], scales[changed]
        if kind == "laplace":
            stats.append(((np.abs(ya) - np.abs(yb)) / s).sum(axis=1))
        else:
            stats.append(((ya**2 - yb**2) / (2 * s**2)).sum(axis=1))
    a, b = a[changed].astype(float), b[changed].astype(float)
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


@lru_cache(maxsize=4096)  # pure; the event audits ask for the same values many times
def zcdp_delta(rho: float, eps1: float) -> float:
    """delta1 of the (eps1, delta1)-DP that every rho-zCDP mechanism satisfies (CKS Cor. 13)."""
    alpha = np.linspace(1.0001, 5000, 500_000)
    log_delta = (
        (alpha - 1) * (alpha * rho - eps1) - np.log(alpha) + (alpha - 1) * np.log1p(-1 / alpha)
    )
    return min(1.0, float(np.exp(log_delta.min())))


@lru_cache(maxsize=256)
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
