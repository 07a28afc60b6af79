"""Random sources: the only module in `mechanisms` that may touch numpy.random or OpenDP samplers.

Every random draw a mechanism makes goes through a `RandomSource`:

- `secure_source()` (the default whenever a mechanism gets `rng=None`) draws privacy noise with
  OpenDP's vetted samplers (exact discrete Laplace and discrete Gaussian on 64-bit integers,
  OpenDP's Laplace and Gaussian on floats, Gumbel report-noisy-max); counts are passed into
  OpenDP's measurement, so its proof covers the addition too. Uniform integers (the smoothed
  histogram's sampling, whose privacy is the sampling itself) are rejection-sampled from
  os.urandom. Post-processing draws (synthetic rows of a noisy histogram, values inside a bin,
  shuffling) come from a NumPy generator seeded afresh from OS entropy.
  OpenDP is fast enough on every hot path measured so far (10^4 cells of discrete Laplace take
  about 0.07 s), so there is no home-made secure sampler.
- `seeded_source(seed)` is reproducible and exact-in-distribution (discrete Laplace as the
  difference of two geometric variables): for tests, benchmarks and the CLI's `--seed` only.
- `RecordingSource(inner)` records each call's (primitive, scale, size) for record-and-replay
  privacy tests.

Range: every source refuses, in one line, an integer noise scale above MAX_INTEGER_SCALE (a draw
beyond +-2^62 would then have probability above 2^-60; with counts below 2^62 the noisy count
always fits int64) and a float noise scale above MAX_FLOAT_SCALE (same tail, beyond +-2^1020), so
no draw is ever clamped, wrapped or infinite except with probability below 2^-60.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
import opendp.prelude as dp

from mechanisms.accounting import noise_scale
from mechanisms.arrays import AnyArray, FloatArray, IntArray
from mechanisms.errors import MechanismError

dp.enable_features("contrib")

Size = int | tuple[int, ...]

NOISE_PRIMITIVES = frozenset(
    {
        "discrete_laplace",
        "laplace",
        "gaussian",
        "discrete_gaussian",
        "gumbel",
        "report_noisy_max",
        "permute_and_flip",
    }
)


def _shape(size: Size) -> tuple[int, ...]:
    return tuple(int(s) for s in size) if isinstance(size, Iterable) else (int(size),)


# P(|X| >= L) <= 2 exp(-L / scale) for the discrete and continuous Laplace, and the Gaussians'
# tails are lighter (both are scale^2-subgaussian: 2 exp(-L^2 / (2 scale^2))): at most 2^-60
# when scale <= L / (61 ln 2).
TAIL_BITS = 60
COUNT_LIMIT = 2**62  # |count| and |noise| below this keep count + noise inside int64
MAX_INTEGER_SCALE = COUNT_LIMIT / ((TAIL_BITS + 1) * math.log(2))  # about 1.09e17
MAX_FLOAT_SCALE = 2.0**1020 / ((TAIL_BITS + 1) * math.log(2))  # about 2.6e305
MIX_RESOLUTION = 2**62  # the smoothed histogram's mix is rounded up to a multiple of 1/this


def _check_scale(scale: float, name: str = "scale", kind: str = "float") -> float:
    scale = float(scale)
    if not (math.isfinite(scale) and scale >= 0):
        raise MechanismError(f"noise {name} ({scale}) must be a finite number >= 0")
    limit = MAX_INTEGER_SCALE if kind == "integer" else MAX_FLOAT_SCALE
    if scale > limit:
        values = "counts" if kind == "integer" else "floats"
        raise MechanismError(
            f"noise {name} ({scale:.3g}) is too large for 64-bit {values}: a draw beyond their "
            f"range would have probability above 2^-{TAIL_BITS}; use a {name} <= {limit:.3g} "
            "(a larger epsilon)"
        )
    return scale


def _check_counts(values: npt.ArrayLike) -> IntArray:
    raw = np.asarray(values)
    if raw.dtype.kind not in "iub":
        raise MechanismError(f"counts (dtype {raw.dtype}) must be whole numbers")
    counts = raw.astype(np.int64)
    if counts.size and int(np.abs(counts).max()) >= COUNT_LIMIT:
        raise MechanismError("counts of 2^62 or more cannot take 64-bit noise without overflow")
    return counts


def _check_floats(values: npt.ArrayLike) -> FloatArray:
    floats = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(floats)):
        raise MechanismError("values that take Laplace noise must be finite numbers")
    return floats


def check_count_noise(scale: float, epsilon: float) -> float:
    """Refuse a count-noise scale above MAX_INTEGER_SCALE, in terms of the requested epsilon.

    The scale is proportional to 1/epsilon, so the message names the smallest epsilon that fits.
    """
    if scale > MAX_INTEGER_SCALE:
        needed = epsilon * scale / MAX_INTEGER_SCALE * 1.001
        raise MechanismError(
            f"epsilon ({epsilon:g}) is too small: its noise scale {scale:.3g} exceeds what 64-bit "
            f"counts can carry ({MAX_INTEGER_SCALE:.3g}); use epsilon >= {needed:.3g}"
        )
    return scale


class RandomSource:
    """All random draws of a mechanism. Subclasses implement the primitives."""

    def discrete_laplace(self, scale: float, size: Size) -> IntArray:
        """Int64 draws with P(k) proportional to exp(-|k|/scale); scale 0 gives zeros."""
        raise NotImplementedError

    def add_discrete_laplace(self, values: npt.ArrayLike, scale: float) -> IntArray:
        """Int64 counts `values` plus discrete Laplace noise of `scale` on each.

        The counts must lie below 2^62 in magnitude and the scale at most MAX_INTEGER_SCALE.
        """
        counts = _check_counts(values)
        _check_scale(scale, kind="integer")
        return counts + self.discrete_laplace(scale, counts.shape)

    def laplace(self, scale: float, size: Size) -> FloatArray:
        """Float64 Laplace(0, scale) draws."""
        raise NotImplementedError

    def add_laplace(self, values: npt.ArrayLike, scale: float) -> FloatArray:
        """Float64 `values` (finite) plus Laplace(0, scale) noise on each.

        The secure source passes the values into OpenDP's float Laplace measurement, so its
        proof (and its floating-point care) covers the addition, as for the counts.
        """
        floats = _check_floats(values)
        return floats + self.laplace(_check_scale(scale), floats.shape)

    def gaussian(self, sigma: float, size: Size) -> FloatArray:
        """Float64 Normal(0, sigma^2) draws."""
        raise NotImplementedError

    def discrete_gaussian(self, sigma: float, size: Size) -> IntArray:
        """Int64 draws with P(k) proportional to exp(-k^2 / (2 sigma^2))."""
        raise NotImplementedError

    def gumbel(self, scale: float, size: Size) -> FloatArray:
        """Float64 Gumbel(0, scale) draws."""
        raise NotImplementedError

    def report_noisy_max(self, scores: npt.ArrayLike, scale: float) -> int:
        """Index of the largest score after adding Gumbel(scale) noise to each."""
        raise NotImplementedError

    def permute_and_flip(self, scores: npt.ArrayLike, scale: float) -> int:
        """Index of the largest score after adding Exponential(scale) noise to each.

        Report-noisy-max with exponential noise, the same distribution as permute-and-flip
        (McKenna and Sheldon 2020; Ding et al. 2021).
        """
        raise NotImplementedError

    def uniform(self, size: Size) -> FloatArray:
        """Float64 draws in [0, 1): post-processing only."""
        raise NotImplementedError

    def integers(self, high: int, size: Size) -> IntArray:
        """Int64 draws uniform on {0, ..., high - 1}: post-processing only."""
        raise NotImplementedError

    def choice(self, probabilities: FloatArray, size: Size) -> IntArray:
        """Indices drawn i.i.d. with the given probabilities: post-processing only."""
        raise NotImplementedError

    def multinomial(self, n: int, probabilities: FloatArray) -> IntArray:
        """One Multinomial(n, probabilities) count vector: post-processing only."""
        raise NotImplementedError

    def shuffle(self, values: AnyArray) -> None:
        """Shuffle a 1-D array in place: post-processing only."""
        raise NotImplementedError

    def smoothed_cells(self, counts: npt.ArrayLike, mix: float, rows: int) -> IntArray:
        """Flat cell indices of `rows` i.i.d. draws from (1 - mix') counts / n + mix' / m.

        Each draw is, with probability mix' = ceil(mix * 2^62) / 2^62 (>= mix), a uniformly
        random cell of the m, else the cell of a uniformly random one of the n rows; exact in
        distribution given exact `integers`. This sampling is the smoothed histogram's privacy
        mechanism (Wasserman & Zhou, Thm 4.1); its bound rows * log(1 + (1 - mix) m / (n mix))
        decreases in mix, so rounding mix up keeps every guarantee mix had.
        """
        flat = np.asarray(counts, dtype=np.int64).ravel()
        threshold = math.ceil(float(mix) * MIX_RESOLUTION)  # exact: scaling by a power of 2
        uniform = self.integers(MIX_RESOLUTION, rows) < threshold
        cells = np.empty(rows, dtype=np.int64)
        cells[uniform] = self.integers(flat.size, int(uniform.sum()))
        picked = self.integers(int(flat.sum()), rows - int(uniform.sum()))
        cells[~uniform] = np.searchsorted(np.cumsum(flat), picked, side="right")
        return cells


class _NumpySource(RandomSource):
    """Exact-in-distribution samplers on a NumPy generator (seeded, or seeded from OS entropy)."""

    def __init__(self, generator: np.random.Generator):
        self._gen = generator

    def discrete_laplace(self, scale: float, size: Size) -> IntArray:
        scale, shape = _check_scale(scale, kind="integer"), _shape(size)
        if scale == 0:
            return np.zeros(shape, dtype=np.int64)
        # Two-sided geometric: the difference of two i.i.d. geometric counts with
        # P(stop) = 1 - exp(-1/scale) has pmf proportional to exp(-|k|/scale).
        p = -math.expm1(-1.0 / scale)
        return self._gen.geometric(p, shape) - self._gen.geometric(p, shape)

    def laplace(self, scale: float, size: Size) -> FloatArray:
        return self._gen.laplace(0.0, _check_scale(scale), _shape(size))

    def gaussian(self, sigma: float, size: Size) -> FloatArray:
        return self._gen.normal(0.0, _check_scale(sigma, "sigma"), _shape(size))

    def discrete_gaussian(self, sigma: float, size: Size) -> IntArray:
        sigma, shape = _check_scale(sigma, "sigma", "integer"), _shape(size)
        if sigma == 0:
            return np.zeros(shape, dtype=np.int64)
        return _discrete_gaussian_by_rejection(self, sigma, int(np.prod(shape))).reshape(shape)

    def gumbel(self, scale: float, size: Size) -> FloatArray:
        return self._gen.gumbel(0.0, _check_scale(scale), _shape(size))

    def report_noisy_max(self, scores: npt.ArrayLike, scale: float) -> int:
        scores = np.asarray(scores, dtype=np.float64)
        return int(np.argmax(scores + self.gumbel(scale, scores.shape)))

    def permute_and_flip(self, scores: npt.ArrayLike, scale: float) -> int:
        scores = np.asarray(scores, dtype=np.float64)
        return int(np.argmax(scores + self._gen.exponential(scale, scores.shape)))

    def uniform(self, size: Size) -> FloatArray:
        return self._gen.random(_shape(size))

    def integers(self, high: int, size: Size) -> IntArray:
        return self._gen.integers(0, high, _shape(size), dtype=np.int64)

    def choice(self, probabilities: FloatArray, size: Size) -> IntArray:
        return self._gen.choice(len(probabilities), size=_shape(size), p=probabilities)

    def multinomial(self, n: int, probabilities: FloatArray) -> IntArray:
        return self._gen.multinomial(n, probabilities)

    def shuffle(self, values: AnyArray) -> None:
        self._gen.shuffle(values)


def _discrete_gaussian_by_rejection(source: _NumpySource, sigma: float, count: int) -> IntArray:
    """Exact discrete Gaussian (Canonne, Kamath & Steinke 2020, Alg. 3) for the seeded source."""
    t = math.floor(sigma) + 1
    out = np.empty(0, dtype=np.int64)
    while out.size < count:
        batch = 2 * (count - out.size) + 16
        y = source.discrete_laplace(t, batch)
        accept_p = np.exp(-((np.abs(y) - sigma**2 / t) ** 2) / (2 * sigma**2))
        out = np.concatenate([out, y[source.uniform(batch) < accept_p]])
    return out[:count]


@lru_cache(maxsize=64)
def _opendp_noise(kind: str, scale: float) -> dp.Measurement:
    """OpenDP's measurement adding `kind` noise of `scale` to a vector.

    Integers are i64; a saturation at the type's bounds would be post-processing of OpenDP's
    own output (and has probability below 2^-60 within the scale limits).
    """
    if kind == "discrete_laplace":
        space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")
        return dp.m.make_laplace(*space, scale=scale)
    if kind == "laplace":
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float)
        return dp.m.make_laplace(*space, scale=scale)
    if kind == "discrete_gaussian":
        space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64")
        return dp.m.make_gaussian(*space, scale=scale)
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)
    return dp.m.make_gaussian(*space, scale=scale)


@lru_cache(maxsize=64)
def _opendp_noisy_max(scale: float, exponential: bool = False) -> dp.Measurement:
    # Under the zCDP output measure OpenDP's noisy max adds Gumbel noise; under MaxDivergence it
    # adds exponential noise (permute-and-flip, `exponential`). We account for the privacy
    # loss ourselves (pure epsilon at scale 2 * sensitivity / epsilon, either noise).
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
    measure = dp.max_divergence() if exponential else dp.zero_concentrated_divergence()
    return dp.m.make_noisy_max(*space, measure, scale=scale)


def _urandom_integers(high: int, count: int) -> IntArray:
    """`count` int64 draws uniform on {0, ..., high - 1} (1 <= high <= 2^63) from os.urandom.

    64-bit words below the largest multiple of `high` are kept (rejection), then reduced.
    """
    limit = 2**64 - 2**64 % high
    kept = np.empty(0, dtype=np.uint64)
    while kept.size < count:
        words = np.frombuffer(os.urandom(8 * (count - kept.size)), dtype=np.uint64)
        kept = np.concatenate([kept, words if limit == 2**64 else words[words < limit]])
    return (kept[:count] % np.uint64(high)).astype(np.int64)


class _SecureSource(_NumpySource):
    """OpenDP samplers for noise, os.urandom for uniform integers, NumPy for the rest.

    The NumPy generator is seeded from OS entropy and serves post-processing draws only.
    """

    def __init__(self) -> None:
        seed = np.random.SeedSequence(secrets.randbits(256))
        super().__init__(np.random.Generator(np.random.PCG64DXSM(seed)))

    def _add(self, kind: str, values: AnyArray, scale: float) -> AnyArray:
        if scale == 0:
            return values.copy()
        noisy = _opendp_noise(kind, scale)(values.ravel().tolist())
        return np.asarray(noisy, dtype=values.dtype).reshape(values.shape)

    def add_discrete_laplace(self, values: npt.ArrayLike, scale: float) -> IntArray:
        values = _check_counts(values)
        return self._add("discrete_laplace", values, _check_scale(scale, kind="integer"))

    def discrete_laplace(self, scale: float, size: Size) -> IntArray:
        return self.add_discrete_laplace(np.zeros(_shape(size), dtype=np.int64), scale)

    def add_laplace(self, values: npt.ArrayLike, scale: float) -> FloatArray:
        return self._add("laplace", _check_floats(values), _check_scale(scale))

    def discrete_gaussian(self, sigma: float, size: Size) -> IntArray:
        sigma = _check_scale(sigma, "sigma", "integer")
        return self._add("discrete_gaussian", np.zeros(_shape(size), dtype=np.int64), sigma)

    def laplace(self, scale: float, size: Size) -> FloatArray:
        return self._add("laplace", np.zeros(_shape(size)), _check_scale(scale))

    def gaussian(self, sigma: float, size: Size) -> FloatArray:
        return self._add("gaussian", np.zeros(_shape(size)), _check_scale(sigma, "sigma"))

    def report_noisy_max(self, scores: npt.ArrayLike, scale: float) -> int:
        scores = [float(s) for s in np.asarray(scores, dtype=np.float64).ravel()]
        if _check_scale(scale) == 0:
            return int(np.argmax(scores))
        return int(_opendp_noisy_max(scale)(scores))

    def permute_and_flip(self, scores: npt.ArrayLike, scale: float) -> int:
        scores = [float(s) for s in np.asarray(scores, dtype=np.float64).ravel()]
        if _check_scale(scale) == 0:
            return int(np.argmax(scores))
        return int(_opendp_noisy_max(scale, exponential=True)(scores))

    def integers(self, high: int, size: Size) -> IntArray:
        shape, high = _shape(size), int(high)
        if not 1 <= high <= 2**63:
            raise MechanismError(f"high ({high}) must be between 1 and 2^63")
        return _urandom_integers(high, math.prod(shape)).reshape(shape)

    # gumbel() stays on the OS-seeded NumPy generator (inverse-CDF floating point): it is offered
    # for completeness; selection should use report_noisy_max, which is OpenDP's exact sampler.


def secure_source() -> RandomSource:
    """A fresh, unseeded, secure source: the default for every mechanism."""
    return _SecureSource()


def seeded_source(seed: int) -> RandomSource:
    """A reproducible source for tests, benchmarks and the CLI's --seed; never for the portal."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise MechanismError(f"seed ({seed!r}) must be a non-negative integer")
    return _NumpySource(np.random.Generator(np.random.PCG64DXSM(int(seed))))


def resolve_rng(rng: RandomSource | None) -> RandomSource:
    """Return `rng`, or a fresh secure source when it is None."""
    if rng is None:
        return secure_source()
    if not isinstance(rng, RandomSource):
        raise MechanismError(
            f"rng ({type(rng).__name__}) must be a mechanisms.noise.RandomSource or None; "
            "use seeded_source(seed) for reproducible runs"
        )
    return rng


@dataclass(frozen=True)
class Call:
    """One recorded draw: which primitive, at what scale (None for post-processing), what shape."""

    primitive: str
    scale: float | None
    size: tuple[int, ...]


class RecordingSource(RandomSource):
    """Wrap a source and record (primitive, scale, size) of every call, in order."""

    def __init__(self, inner: RandomSource):
        self.inner = resolve_rng(inner)
        self.calls: list[Call] = []

    def noise_calls(self) -> list[Call]:
        """The recorded calls that draw privacy noise (not post-processing)."""
        return [c for c in self.calls if c.primitive in NOISE_PRIMITIVES]

    def _record(self, primitive: str, scale: float | None, size: Size) -> None:
        self.calls.append(Call(primitive, None if scale is None else float(scale), _shape(size)))

    def discrete_laplace(self, scale: float, size: Size) -> IntArray:
        self._record("discrete_laplace", scale, size)
        return self.inner.discrete_laplace(scale, size)

    def add_discrete_laplace(self, values: npt.ArrayLike, scale: float) -> IntArray:
        self._record("discrete_laplace", scale, np.shape(values))
        return self.inner.add_discrete_laplace(values, scale)

    def laplace(self, scale: float, size: Size) -> FloatArray:
        self._record("laplace", scale, size)
        return self.inner.laplace(scale, size)

    def add_laplace(self, values: npt.ArrayLike, scale: float) -> FloatArray:
        self._record("laplace", scale, np.shape(values))
        return self.inner.add_laplace(values, scale)

    def gaussian(self, sigma: float, size: Size) -> FloatArray:
        self._record("gaussian", sigma, size)
        return self.inner.gaussian(sigma, size)

    def discrete_gaussian(self, sigma: float, size: Size) -> IntArray:
        self._record("discrete_gaussian", sigma, size)
        return self.inner.discrete_gaussian(sigma, size)

    def gumbel(self, scale: float, size: Size) -> FloatArray:
        self._record("gumbel", scale, size)
        return self.inner.gumbel(scale, size)

    def report_noisy_max(self, scores: npt.ArrayLike, scale: float) -> int:
        self._record("report_noisy_max", scale, np.shape(scores))
        return self.inner.report_noisy_max(scores, scale)

    def permute_and_flip(self, scores: npt.ArrayLike, scale: float) -> int:
        self._record("permute_and_flip", scale, np.shape(scores))
        return self.inner.permute_and_flip(scores, scale)

    def uniform(self, size: Size) -> FloatArray:
        self._record("uniform", None, size)
        return self.inner.uniform(size)

    def integers(self, high: int, size: Size) -> IntArray:
        self._record("integers", None, size)
        return self.inner.integers(high, size)

    def choice(self, probabilities: FloatArray, size: Size) -> IntArray:
        self._record("choice", None, size)
        return self.inner.choice(probabilities, size)

    def multinomial(self, n: int, probabilities: FloatArray) -> IntArray:
        self._record("multinomial", None, np.shape(probabilities))
        return self.inner.multinomial(n, probabilities)

    def shuffle(self, values: AnyArray) -> None:
        self._record("shuffle", None, np.shape(values))
        self.inner.shuffle(values)

    def smoothed_cells(self, counts: npt.ArrayLike, mix: float, rows: int) -> IntArray:
        self._record("smoothed_cells", None, rows)
        return self.inner.smoothed_cells(counts, mix, rows)


def exponential_mechanism(
    scores: npt.ArrayLike, *, epsilon: float, sensitivity: float, rng: RandomSource | None = None
) -> int:
    """Select an index with probability proportional to exp(epsilon * score / (2 * sensitivity)).

    Privacy: epsilon-DP (pure) for scores whose L-infinity sensitivity between neighbouring
    datasets is at most `sensitivity`; implemented as report-noisy-max with Gumbel noise of scale
    2 * sensitivity / epsilon, rounded up (`noise_scale`). epsilon = inf returns the first index
    of the largest score.
    """
    checked, scale = _selection(scores, epsilon, sensitivity)
    if scale is None:
        return int(np.argmax(checked))
    return resolve_rng(rng).report_noisy_max(checked, scale)


def permute_and_flip(
    scores: npt.ArrayLike, *, epsilon: float, sensitivity: float, rng: RandomSource | None = None
) -> int:
    """Select an index by report-noisy-max with exponential noise (permute-and-flip).

    Privacy: epsilon-DP (pure) for scores whose L-infinity sensitivity is at most
    `sensitivity`, at the exponential mechanism's noise scale 2 * sensitivity / epsilon
    (rounded up; McKenna and Sheldon 2020, Ding et al. 2021: permute-and-flip is report-noisy-
    max with exponential noise). Its expected score is never below the exponential
    mechanism's, and the same tail bound holds: a candidate scoring t below the best wins
    with probability at most e^(-t / scale) (it needs its own noise to exceed t). OpenDP's
    quantile measurement uses the same selection. epsilon = inf: the first largest score.
    """
    checked, scale = _selection(scores, epsilon, sensitivity)
    if scale is None:
        return int(np.argmax(checked))
    return resolve_rng(rng).permute_and_flip(checked, scale)


def permute_and_flip_chances(
    scores: npt.ArrayLike, *, epsilon: float, sensitivity: float
) -> FloatArray:
    """The exact chance of each index of `permute_and_flip` at the same arguments.

    For accuracy statements (tests, benchmarks): no draw, no privacy cost. With scale b and w_i
    = exp((s_i - max s) / b), index i wins when its Exponential noise puts it above every other:
    w_i times the integral over v in [0, 1] of prod_(j != i) (1 - w_j v), a polynomial of degree
    below the number of indices, which Gauss-Legendre with half as many nodes integrates
    exactly. Indices with w below 1e-17 (scores more than 39 b below the best) get 0 and leave
    the product. epsilon = inf: all on the first largest score.
    """
    checked, scale = _selection(scores, epsilon, sensitivity)
    chances = np.zeros_like(checked)
    if scale is None:
        chances[np.argmax(checked)] = 1.0
        return chances
    w = np.exp((checked - checked.max()) / scale)
    kept = w > 1e-17
    nodes, weights = np.polynomial.legendre.leggauss(int(kept.sum()) // 2 + 2)
    factors = 1 - np.outer(w[kept], (nodes + 1) / 2)
    chances[kept] = w[kept] * ((weights / 2 * np.prod(factors, axis=0)) / factors).sum(axis=1)
    return chances


def _selection(
    scores: npt.ArrayLike, epsilon: float, sensitivity: float
) -> tuple[FloatArray, float | None]:
    """The checked scores and the noise scale 2 * sensitivity / epsilon (None at epsilon inf)."""
    checked = np.asarray(scores, dtype=np.float64)
    if checked.ndim != 1 or checked.size == 0 or not np.all(np.isfinite(checked)):
        raise MechanismError(
            f"scores (shape {checked.shape}) must be a non-empty 1-D array of finite numbers"
        )
    epsilon, sensitivity = float(epsilon), float(sensitivity)
    if not epsilon > 0:
        raise MechanismError(f"epsilon ({epsilon}) must be > 0")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise MechanismError(f"sensitivity ({sensitivity}) must be a finite number > 0")
    if math.isinf(epsilon):
        return checked, None
    return checked, noise_scale(2.0 * sensitivity, epsilon)
