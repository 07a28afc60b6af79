"""The neighbouring-dataset event test of docs/testing-privacy.md section 1, as a reusable helper.

Given n scalar outputs of M(D) and n of M(D') (one bin count, one selected index, ...), an
epsilon/delta claim and a grid of thresholds fixed from the mechanism's parameters before
sampling, it checks every event {X >= t}, {X <= t} (and {X = t} for discrete outputs) in both
directions with one-sided Clopper-Pearson bounds at level alpha / (number of comparisons):

    fail if  LB_D(S) - e^epsilon * UB_D'(S) > delta.

The family-wise false-alarm rate is at most alpha (union bound). `epsilon_hat` is the largest
log(LB / UB) seen: a lower confidence bound on the mechanism's real privacy loss.

Usage::

    grid = threshold_grid(f_d, f_d2, scale)
    result = audit_neighbours(out_d, out_d2, epsilon=1.0, thresholds=grid)
    assert result.passed, result.summary()
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

MIN_HITS = 20


@dataclass
class AuditResult:
    """Outcome of one event test."""

    passed: bool
    epsilon_hat: float
    worst_event: str
    comparisons: int
    samples_per_side: int

    def summary(self) -> str:
        """One line for assertion messages."""
        verdict = "passed" if self.passed else "FAILED"
        return (
            f"{verdict}: epsilon_hat={self.epsilon_hat:.4f} at {self.worst_event}, "
            f"{self.comparisons} comparisons, n={self.samples_per_side} per side"
        )


def clopper_pearson_lower(hits: np.ndarray, n: int, level: float) -> np.ndarray:
    """One-sided lower confidence bound for a binomial proportion at level `level`."""
    hits = np.asarray(hits, dtype=float)
    safe = np.maximum(hits, 1)
    return np.where(hits > 0, beta.ppf(level, safe, n - safe + 1), 0.0)


def clopper_pearson_upper(hits: np.ndarray, n: int, level: float) -> np.ndarray:
    """One-sided upper confidence bound for a binomial proportion at level `level`."""
    hits = np.asarray(hits, dtype=float)
    safe = np.minimum(hits, n - 1)
    return np.where(hits < n, beta.ppf(1 - level, safe + 1, n - safe), 1.0)


def threshold_grid(
    f_d: float, f_d2: float, scale: float, *, integer: bool = True, points: int = 201
) -> np.ndarray:
    """Thresholds over [min(f) - 10 scale, max(f) + 10 scale], fixed before sampling."""
    low, high = min(f_d, f_d2) - 10 * scale, max(f_d, f_d2) + 10 * scale
    if integer:
        return np.arange(math.floor(low), math.ceil(high) + 1)
    return np.linspace(low, high, points)


def _event_counts(samples: np.ndarray, thresholds: np.ndarray, discrete: bool):
    ordered = np.sort(samples)
    at_most = np.searchsorted(ordered, thresholds, side="right")
    below = np.searchsorted(ordered, thresholds, side="left")
    counts = {"X <= t": at_most, "X >= t": len(ordered) - below}
    if discrete:
        counts["X = t"] = at_most - below
    return counts


def audit_neighbours(
    samples_d,
    samples_d2,
    *,
    epsilon: float,
    thresholds,
    delta: float = 0.0,
    alpha: float = 1e-6,
    discrete: bool = True,
) -> AuditResult:
    """Event test of an (epsilon, delta) claim on scalar outputs of M(D) and M(D')."""
    samples_d, samples_d2 = np.asarray(samples_d).ravel(), np.asarray(samples_d2).ravel()
    n = len(samples_d)
    assert n == len(samples_d2) and n > 0, "need the same positive number of samples per side"
    thresholds = np.asarray(thresholds)
    counts_d = _event_counts(samples_d, thresholds, discrete)
    counts_d2 = _event_counts(samples_d2, thresholds, discrete)
    keep = {k: (counts_d[k] + counts_d2[k]) >= MIN_HITS for k in counts_d}
    events = int(sum(v.sum() for v in keep.values()))
    assert events > 0, "no event has enough hits: widen the thresholds or draw more samples"
    level = alpha / (2 * events)
    passed, best, worst = True, -math.inf, "none"
    for kind in counts_d:
        for a, b, direction in ((counts_d, counts_d2, "D vs D'"), (counts_d2, counts_d, "D' vs D")):
            lb = clopper_pearson_lower(a[kind][keep[kind]], n, level)
            ub = clopper_pearson_upper(b[kind][keep[kind]], n, level)
            if np.any(lb - math.exp(epsilon) * ub > delta):
                passed = False
            with np.errstate(divide="ignore"):
                ratio = np.log(lb) - np.log(ub)
            if ratio.size and ratio.max() > best:
                i = int(np.argmax(ratio))
                best, worst = float(ratio[i]), f"{kind}, t={thresholds[keep[kind]][i]}, {direction}"
    return AuditResult(passed, best, worst, 2 * events, n)
