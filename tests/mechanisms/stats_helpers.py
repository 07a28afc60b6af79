"""Goodness-of-fit helpers for the sampler tests (docs/testing-privacy.md section 3)."""

from __future__ import annotations

import numpy as np
from scipy.stats import chisquare

P_ACCEPT = 1e-6  # the true distribution must give p > this; a wrong one p < this
DRAWS = 100_000


def discrete_laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    """P(k) = (1 - a) / (1 + a) * a^|k| with a = exp(-1/scale)."""
    a = np.exp(-1.0 / scale)
    return (1 - a) / (1 + a) * a ** np.abs(support)


def discrete_gaussian_pmf(sigma: float, support: np.ndarray) -> np.ndarray:
    """P(k) proportional to exp(-k^2 / (2 sigma^2)), normalised over a wide support."""
    wide = np.arange(-int(60 * sigma) - 60, int(60 * sigma) + 61)
    total = np.exp(-(wide**2) / (2 * sigma**2)).sum()
    return np.exp(-(support**2) / (2 * sigma**2)) / total


def chi_square_p(samples: np.ndarray, pmf, width: int) -> float:
    """Chi-square p-value of integer samples against pmf on [-width, width].

    Cells with fewer than 5 expected hits are pooled into the outermost kept cells; the mass outside
    [-width, width] must be negligible.
    """
    samples = np.asarray(samples, dtype=np.int64)
    n = len(samples)
    support = np.arange(-width, width + 1)
    expected = pmf(support) * n
    big = np.flatnonzero(expected >= 5)
    lo, hi = big[0], big[-1]
    observed = np.bincount(np.clip(samples, -width, width) + width, minlength=len(support))
    obs = np.concatenate([[observed[: lo + 1].sum()], observed[lo + 1 : hi], [observed[hi:].sum()]])
    exp_ = np.concatenate(
        [[expected[: lo + 1].sum()], expected[lo + 1 : hi], [expected[hi:].sum()]]
    )
    obs = obs.astype(float)
    return float(chisquare(obs, exp_ * obs.sum() / exp_.sum()).pvalue)
