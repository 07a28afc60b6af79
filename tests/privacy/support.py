"""Shared pieces of the privacy audits (docs/reliability.md T2-T7, T10): batch and zero-noise random
sources that run a mechanism's own noise step many times at once, the privacy-loss projection,
and one printed figure line per audit for docs/guarantees.md."""

from __future__ import annotations

import math

import numpy as np

from mechanisms.noise import RandomSource, seeded_source
from tests.mechanisms.privacy_audit import AuditResult

ALPHA = 1e-6  # family-wise false-alarm rate of every event test
N_PER_SIDE = 100_000  # per-commit sample size per neighbouring dataset
N_NIGHTLY = 1_000_000  # the long run (`./test.sh --long`), at epsilon = 0.1
TWIN_SCALE = 0.85  # the mutation twin's noise-scale factor (docs/testing-privacy.md section 1.6)


class BatchNoise(RandomSource):
    """Runs a mechanism's noise step `draws` times in one call: every noise draw of shape
    `size` comes back with a leading axis of length `draws`, so `exact + noise` broadcasts
    to `draws` independent noisy outputs. `factor` < 1 makes the broken twin (less noise than
    the mechanism asked for)."""

    def __init__(self, seed: int, draws: int, factor: float = 1.0):
        self.inner, self.draws, self.factor = seeded_source(seed), draws, factor
        self.scales: list[tuple[str, float]] = []

    def _batch(self, size):
        return (self.draws, *((size,) if np.isscalar(size) else tuple(size)))

    def discrete_laplace(self, scale, size):
        self.scales.append(("discrete_laplace", float(scale)))
        return self.inner.discrete_laplace(scale * self.factor, self._batch(size))

    def discrete_gaussian(self, sigma, size):
        self.scales.append(("discrete_gaussian", float(sigma)))
        return self.inner.discrete_gaussian(sigma * self.factor, self._batch(size))


class ZeroNoise(RandomSource):
    """Noise primitives return zeros, so a release shows the exact input of every noise call
    (record-and-replay's |input_D - input_D'| check). Selection and post-processing draws go
    to a seeded source; report_noisy_max's scores are recorded too."""

    def __init__(self, seed: int):
        self.inner = seeded_source(seed)
        self.calls: list[tuple[str, float, tuple]] = []
        self.scores: list[np.ndarray] = []

    def _zeros(self, primitive, scale, size):
        shape = (size,) if np.isscalar(size) else tuple(size)
        self.calls.append((primitive, float(scale), shape))
        return np.zeros(shape, dtype=np.int64)

    def discrete_laplace(self, scale, size):
        return self._zeros("discrete_laplace", scale, size)

    def discrete_gaussian(self, sigma, size):
        return self._zeros("discrete_gaussian", sigma, size)

    def report_noisy_max(self, scores, scale):
        self.calls.append(("report_noisy_max", float(scale), np.shape(scores)))
        self.scores.append(np.asarray(scores, dtype=float).copy())
        return self.inner.report_noisy_max(scores, scale)

    def uniform(self, size):
        return self.inner.uniform(size)

    def integers(self, high, size):
        return self.inner.integers(high, size)

    def choice(self, probabilities, size):
        return self.inner.choice(probabilities, size)

    def multinomial(self, n, probabilities):
        return self.inner.multinomial(n, probabilities)

    def shuffle(self, values):
        self.inner.shuffle(values)


def laplace_loss_statistic(noisy: np.ndarray, exact_d: np.ndarray, exact_d2: np.ndarray):
    """Project (draws, k) noisy vectors to T = sum over changed coordinates of
    |y - exact_D| - |y - exact_D'|: for integer Laplace noise of one scale b, the top event
    {T = L1} has probability ratio exactly e^(L1 / b) between D and D' (the worst event).
    Returns (T, L1)."""
    exact_d, exact_d2 = np.ravel(exact_d), np.ravel(exact_d2)
    changed = np.flatnonzero(exact_d != exact_d2)
    y = noisy.reshape(len(noisy), -1)[:, changed]
    stat = (np.abs(y - exact_d[changed]) - np.abs(y - exact_d2[changed])).sum(axis=1)
    return stat, int(np.abs(exact_d - exact_d2).sum())


def report(
    label: str, result: AuditResult, *, epsilon: float, delta: float, twin: str, expect_pass: bool
):
    """Print the audit's figure line (pytest -s or -rP shows it) and return whether the
    outcome is the expected one (passed for the honest mechanism, failed for its twin).
    eps_hat is the largest log(LB / UB) over the events: a lower confidence bound on the real
    epsilon when delta = 0; with delta > 0 it ignores the slack (compare with delta's events)."""
    caught = (
        "" if expect_pass else (" -> twin CAUGHT" if not result.passed else " -> twin NOT caught")
    )
    print(
        f"\nFIGURE T2 {label}: n={result.samples_per_side}/side alpha={ALPHA:g} "
        f"claimed eps={epsilon:.4g} delta={delta:g} eps_hat={result.epsilon_hat:.4f} "
        f"{'PASS' if result.passed else 'FAIL'} twin={twin}{caught}"
    )
    return result.passed == expect_pass


def gaussian_tight_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon with (epsilon, delta)-DP for a Gaussian shift of mu standard
    deviations (Balle & Wang 2018): delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""
    from scipy.stats import norm

    lo, hi = 0.0, 50.0
    for _ in range(200):
        eps = (lo + hi) / 2
        excess = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        lo, hi = (eps, hi) if excess > delta else (lo, eps)
    return hi
