"""Shared pieces of the range-count mechanisms.

The privacy target, noise draws, bit matrices, and the two baselines (identity and per-query
noise).

Every mechanism here releases `y = B x + noise` for a public 0/1 matrix B that the plan fixes
from public inputs only. Gaussian plans are accounted in zCDP: the per-point loss
`l(p) = sum_j B_jp / sigma_j^2` is the squared L2 sensitivity after scaling, so
`rho = max_p l(p) / 2` for add/remove neighbours. For replace-one neighbours the release moves
by `v_p - v_q` with non-negative v's, whose squared norm is at most `l(p) + l(q)`, so the
allowed per-point loss halves. Laplace plans are pure epsilon-DP with the L1 analogue.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mechanisms.accounting import (
    approx_dp_to_zcdp,
    check_delta,
    check_epsilon,
    check_neighbouring,
)
from mechanisms.arrays import AnyArray
from mechanisms.errors import MechanismError

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


SAFETY = 1.0 + 1e-12  # noise scales are rounded up so float error never overspends


@dataclass(frozen=True)
class PrivacyTarget:
    """What one release may spend: rho-zCDP (Gaussian noise) or pure epsilon-DP (Laplace)."""

    kind: str  # "zcdp" or "pure"
    rho: float  # zCDP parameter (0 when pure)
    epsilon: float
    delta: float
    neighbouring: str

    @property
    def loss_budget(self) -> float:
        """Largest allowed per-point loss: sum B/sigma^2 (zCDP) or sum B/b (pure)."""
        factor = 2.0 if self.neighbouring == "replace-one" else 1.0
        if self.kind == "zcdp":
            return 2.0 * self.rho / factor
        return self.epsilon / factor

    @property
    def noise(self) -> str:
        return "gaussian" if self.kind == "zcdp" else "laplace"


def privacy_target(*, epsilon: float, delta: float, neighbouring: str) -> PrivacyTarget:
    """Validate (epsilon, delta); delta > 0 becomes the largest rho with that guarantee."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    neighbouring = check_neighbouring(neighbouring)
    if delta == 0:
        return PrivacyTarget("pure", 0.0, epsilon, 0.0, neighbouring)
    rho = math.inf if math.isinf(epsilon) else approx_dp_to_zcdp(epsilon, delta)
    return PrivacyTarget("zcdp", rho, epsilon, delta, neighbouring)


# ---------------------------------------------------------------- noise


def draw_noise(rng: RandomSource, noise: str, scale: float, size: Any) -> AnyArray:
    """Integer noise for integer counts: discrete Gaussian (std `scale`) or discrete Laplace."""
    if scale == 0:
        return np.zeros(size, dtype=np.int64)
    if noise == "gaussian":
        return np.asarray(rng.discrete_gaussian(scale, size))
    return np.asarray(rng.discrete_laplace(scale, size))


@lru_cache(maxsize=1024)
def noise_variance(noise: str, scale: float) -> float:
    """Exact variance of one integer noise draw with the given scale (public; cached)."""
    if scale == 0:
        return 0.0
    if noise == "laplace":
        q = math.exp(-1.0 / scale)
        return 2.0 * q / (1.0 - q) ** 2
    if scale > 4:  # the discrete Gaussian's variance equals sigma^2 to ~1e-130 here
        return scale * scale
    k = np.arange(-int(12 * scale) - 2, int(12 * scale) + 3, dtype=float)
    w = np.exp(-(k**2) / (2 * scale * scale))
    return float((k**2 * w).sum() / w.sum())


def scale_for(noise: str, loss: float, loss_budget: float) -> float:
    """Noise scale giving a point with `loss` units of load exactly `loss_budget`."""
    if math.isinf(loss_budget):
        return 0.0
    ratio = loss / loss_budget * SAFETY
    return math.sqrt(ratio) if noise == "gaussian" else ratio


def per_point_loss(noise: str, loads: AnyArray, scale: float) -> AnyArray:
    """Loss of each point with `loads` released sets at one noise scale."""
    if scale == 0:
        return np.where(loads > 0, math.inf, 0.0)
    return loads / scale**2 if noise == "gaussian" else loads / scale


# ---------------------------------------------------------------- bit matrices


def unpack(bits: AnyArray, n: int) -> AnyArray:
    """Packed 0/1 rows -> float32 dense rows (exact for GEMM while n < 2**24)."""
    return np.unpackbits(bits, axis=-1, count=n).astype(np.float32)


def popcount(bits: AnyArray) -> AnyArray:
    """Number of ones in each packed row."""
    counts: AnyArray = np.bitwise_count(bits).sum(axis=-1, dtype=np.int64)
    return counts


def restrict_columns(bits: AnyArray, n: int, keep: AnyArray, block: int = 8192) -> AnyArray:
    """Packed rows restricted to the columns `keep` (sorted indices), repacked."""
    if len(keep) == n:
        return bits
    out = np.zeros((len(bits), (len(keep) + 7) // 8), dtype=np.uint8)
    for s in range(0, len(bits), block):
        rows = np.unpackbits(bits[s : s + block], axis=1, count=n)[:, keep]
        out[s : s + block] = np.packbits(rows, axis=1)
    return out


def unique_rows(bits: AnyArray) -> tuple[AnyArray, AnyArray, AnyArray, AnyArray]:
    """Distinct packed rows: (unique, first index of each, inverse, counts)."""
    view = np.ascontiguousarray(bits).view(np.dtype((np.void, bits.shape[1])))
    _, first, inverse, counts = np.unique(
        view.ravel(), return_index=True, return_inverse=True, return_counts=True
    )
    return bits[first], first, inverse, counts


def memo(cache: dict[Any, Any], key: Any, compute: Callable[[], Any]) -> Any:
    """cache[key], computed once: plans cache what depends only on public inputs."""
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def bits_key(bits: AnyArray) -> tuple[Any, ...]:
    """A cache key for a packed query matrix."""
    return bits.shape, hashlib.sha1(bits.tobytes(), usedforsecurity=False).hexdigest()


def row_keys(bits: AnyArray) -> list[bytes]:
    """Hashable key of each packed row."""
    return [row.tobytes() for row in bits]


# ---------------------------------------------------------------- baselines


@dataclass
class IdentityPlan:
    """Noise on every support point's count; answers are sums of noisy point counts."""

    n: int
    noise: str
    scale: float
    name: str = "identity"

    @classmethod
    def build(cls, n: int, target: PrivacyTarget) -> IdentityPlan:
        return cls(n, target.noise, scale_for(target.noise, 1.0, target.loss_budget))

    def point_loss(self) -> AnyArray:
        return per_point_loss(self.noise, np.ones(self.n), self.scale)

    def predicted_variance(self, query_bits: AnyArray) -> AnyArray:
        return popcount(query_bits) * noise_variance(self.noise, self.scale)

    def measure(self, counts: AnyArray, rng: RandomSource) -> dict[str, Any]:
        return {"points": counts + draw_noise(rng, self.noise, self.scale, self.n)}

    def answer(
        self, noisy: dict[str, Any], query_bits: AnyArray, estimator: str = "chain"
    ) -> tuple[AnyArray, AnyArray]:
        y = np.asarray(noisy["points"], dtype=float)
        answers = np.concatenate(
            [
                unpack(query_bits[s : s + 4096], self.n).astype(float) @ y
                for s in range(0, len(query_bits), 4096)
            ]
            or [np.zeros(0)]
        )
        return answers, self.predicted_variance(query_bits)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "noise": self.noise, "scale": self.scale}

    @classmethod
    def from_dict(cls, d: dict[str, Any], **_: Any) -> IdentityPlan:
        return cls(int(d["n"]), d["noise"], float(d["scale"]))


@dataclass
class PerQueryPlan:
    """Noise on each workload answer; the scale covers the point in the most queries."""

    query_bits: AnyArray
    n: int
    noise: str
    scale: float
    name: str = "per_query"

    @classmethod
    def build(cls, query_bits: AnyArray, n: int, target: PrivacyTarget) -> PerQueryPlan:
        max_load = float(_column_sums(query_bits, n).max())
        return cls(
            query_bits,
            n,
            target.noise,
            scale_for(target.noise, max(max_load, 1.0), target.loss_budget),
        )

    def point_loss(self) -> AnyArray:
        return per_point_loss(self.noise, _column_sums(self.query_bits, self.n), self.scale)

    def predicted_variance(self, query_bits: AnyArray) -> AnyArray:
        return np.full(len(query_bits), noise_variance(self.noise, self.scale))

    def measure(self, counts: AnyArray, rng: RandomSource) -> dict[str, Any]:
        exact = np.concatenate(
            [
                unpack(b, self.n).astype(np.int64) @ counts
                for b in np.array_split(self.query_bits, max(1, len(self.query_bits) // 4096))
            ]
        )
        return {"answers": exact + draw_noise(rng, self.noise, self.scale, len(exact))}

    def answer(
        self, noisy: dict[str, Any], query_bits: AnyArray, estimator: str = "chain"
    ) -> tuple[AnyArray, AnyArray]:
        index = {key: k for k, key in enumerate(row_keys(self.query_bits))}
        rows = [index.get(key) for key in row_keys(query_bits)]
        missing = [k for k, r in enumerate(rows) if r is None]
        if missing:
            raise MechanismError(
                f"query {missing[0]} was not in the released workload; a "
                "per_query release answers only its own queries"
            )
        y = np.asarray(noisy["answers"], dtype=float)
        # `missing` is empty here, so no entry of `rows` is None (mypy cannot see that).
        return y[cast(list[int], rows)], self.predicted_variance(query_bits)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "noise": self.noise, "scale": self.scale}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, workload_bits: AnyArray, **_: Any) -> PerQueryPlan:
        return cls(workload_bits, int(d["n"]), d["noise"], float(d["scale"]))


def _column_sums(bits: AnyArray, n: int, block: int = 8192) -> AnyArray:
    total = np.zeros(n, dtype=np.int64)
    for s in range(0, len(bits), block):
        total += np.unpackbits(bits[s : s + block], axis=1, count=n).sum(axis=0, dtype=np.int64)
    return total


# ---------------------------------------------------------------- interval half-widths

LEVEL = 0.95  # confidence level of every released interval
Z_ONE_SIDED = 1.959963984540054  # standard normal quantile at 1 - (1 - LEVEL) / 2
CANTELLI_FACTOR = math.sqrt(1 / 0.025 - 1)  # P(X - mean >= k sd) <= 1 / (1 + k^2) = 2.5%


def noise_kurtosis(noise: str, scale: float) -> float:
    """Exact excess kurtosis of one integer noise draw of this scale (public).

    Discrete Laplace with q = exp(-1/scale) is the difference of two geometric draws, whose
    excess kurtosis is 6 + p^2/q (p = 1 - q); even cumulants add, so the difference has
    3 + p^2/(2q). The discrete Gaussian's is summed directly (near 0 once scale > 1).
    """
    if scale == 0:
        return 0.0
    if noise == "laplace":
        q = math.exp(-1.0 / scale)
        return math.inf if q == 0 else 3.0 + (1.0 - q) ** 2 / (2.0 * q)
    if scale > 4:  # within 1e-100 of the continuous Gaussian's 0
        return 0.0
    k = np.arange(-int(12 * scale) - 2, int(12 * scale) + 3, dtype=float)
    w = np.exp(-(k**2) / (2 * scale * scale))
    var = float((k**2 * w).sum() / w.sum())
    return float((k**4 * w).sum() / w.sum()) / var**2 - 3.0


def half_width(sd: AnyArray, kurtosis: AnyArray) -> AnyArray:
    """One-sided 97.5% quantile of symmetric answer noise with this sd and excess kurtosis.

    Cornish-Fisher: z + (z^3 - 3z) * kurtosis / 24 standard deviations (the noise is
    symmetric, so the skewness term vanishes). For one discrete Laplace draw of large scale
    this gives 2.166 sd against the exact 2.118 (coverage 95.3%); for sums of draws the
    kurtosis falls as 1/terms and the quantile tends to the normal one. Integer-valued sums
    (identity, per_query) use the exact `integer_sum_half_width` instead. Tested for
    coverage in tests/mechanisms/test_range_count_intervals.py. The factor is capped at
    CANTELLI_FACTOR: by Cantelli's inequality no noise of this sd exceeds that many sds with
    probability above 2.5%, whatever its shape; the cap binds where the noise is almost always
    0 (a tiny discrete Laplace scale, at a very large epsilon), whose kurtosis grows without
    bound and would otherwise make the interval absurdly wide (a billion rows at epsilon 100).
    """
    z = Z_ONE_SIDED
    sd, kurtosis = np.asarray(sd, dtype=float), np.asarray(kurtosis, dtype=float)
    factor = z + (z**3 - 3 * z) * np.maximum(kurtosis, 0.0) / 24.0
    factor = np.minimum(factor, CANTELLI_FACTOR)
    result: AnyArray = np.where(sd > 0, sd * factor, 0.0)
    return result


@lru_cache(maxsize=4096)
def integer_sum_half_width(noise: str, scale: float, terms: int) -> int:
    """Exact one-sided 97.5% quantile of a sum of `terms` independent integer draws.

    The smallest k >= 0 with P(S > k) <= 2.5%, from the exact pmf of S (the single draw's pmf
    on +-(12 scale + 2), raised to the power `terms` in Fourier space on a grid wide enough
    that the wrapped-around mass is below 1e-12). Used for identity and per_query answers,
    whose noise is such a sum.
    """
    if scale == 0 or terms == 0:
        return 0
    reach = int(12 * scale) + 2
    k = np.arange(-reach, reach + 1, dtype=float)
    if noise == "laplace":
        pmf = np.exp(-np.abs(k) / scale)
    else:
        pmf = np.exp(-(k**2) / (2 * scale * scale))
    pmf /= pmf.sum()
    sd = math.sqrt(terms * noise_variance(noise, scale))
    size = 1 << max(6, math.ceil(math.log2(2 * (40 * sd + reach) + 1)))
    padded = np.zeros(size)
    padded[: len(pmf)] = pmf
    total = np.fft.irfft(np.fft.rfft(padded) ** terms, n=size)
    total = np.roll(total, -terms * reach)  # index i <-> value i (mod size)
    centred = np.concatenate([total[size // 2 :], total[: size // 2]])
    values = np.arange(-(size // 2), size - size // 2)
    tail = np.cumsum(np.clip(centred, 0, None)[::-1])[::-1]  # tail[i] = P(S >= values[i])
    above = tail[1:]  # P(S > values[i])
    ok = np.nonzero((above <= 1 - (1 + LEVEL) / 2) & (values[:-1] >= 0))[0]
    return int(values[ok[0]]) if len(ok) else int(values[-1])
