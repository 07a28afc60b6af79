"""MWEM's measurements: the ONLY part of MWEM that touches the data.

Counting marginals and query answers on the private records, the noisy 1-way start, the
exponential-mechanism selection and the noisy measurements; every privacy draw goes through
the RandomSource. Everything else in ``mechanisms.mwem`` post-processes what these return.

Privacy, unit = one record (each function states what it spends):

* A marginal's cell vector, and the L1-error score of a marginal query, have L1 sensitivity
  ``marginal_sensitivity(neighbouring)``: 2 under replace-one (one cell −1, another +1), 1
  under add-remove. A box count and its absolute error have ``BOX_SENSITIVITY`` = 1 under both.
* The d 1-way marginals measured together have L1 sensitivity d × the marginal sensitivity.
* Noise is discrete Laplace of scale ``noise_scale(Δ, ε)`` (at least Δ/ε exactly), so each
  measurement is ε-DP; a selection is the exponential mechanism at ε on sensitivity-1 scores.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from mechanisms.accounting import noise_scale
from mechanisms.arrays import AnyArray
from mechanisms.errors import MechanismError
from mechanisms.mwem.distribution import query_answer
from mechanisms.noise import exponential_mechanism
from mechanisms.workload import Query

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


BOX_SENSITIVITY = 1


def marginal_sensitivity(neighbouring: str) -> int:
    """L1 sensitivity of a marginal's cell vector: 2 under replace-one, 1 under add-remove."""
    return 2 if neighbouring == "replace-one" else 1


def _sensitivity(query: Query, marginal_l1: int) -> int:
    """L1 sensitivity of the query's answer vector (and of its L1-error score)."""
    return BOX_SENSITIVITY if query.box is not None else marginal_l1


class TrueAnswers:
    """Exact marginals of the private records, computed once per attribute set.

    From the encoded records (n × d cell indices), or from the full table of cell counts
    (`from_counts`: what a counting engine returns, so a table that stays where it lives is
    never rebuilt row by row in the worker). Both give the same marginals, exactly.
    Private: these counts leave this module only through ``measure_one_way``, ``select_query`` and
    ``measure_query`` (noisy or as a selection), never as they are.
    """

    def __init__(self, codes: AnyArray, shape: tuple[int, ...]):
        codes = np.asarray(codes)
        if codes.size and (codes.min() < 0 or (codes >= np.asarray(shape)).any()):
            raise MechanismError("codes must lie in 0..k-1 for each attribute of k bins")
        # fast per-column reads, in the smallest integer type of the codes (randhie1m, 10^6
        # rows: 10 MB of uint8 instead of 80 MB of int64, benchmarks/mwem_peers.py)
        small = np.min_scalar_type(max(max(shape, default=1) - 1, 0))
        self.columns: AnyArray | None = np.ascontiguousarray(codes.T, dtype=small)
        self.rows = len(codes)
        self.shape = shape
        self._cache: dict[tuple[int, ...], AnyArray] = {}

    @classmethod
    def from_counts(cls, counts: AnyArray) -> TrueAnswers:
        """The marginals of the records whose full table of cell counts is ``counts``."""
        counts = np.asarray(counts, dtype=np.int64)
        true = cls(np.zeros((0, counts.ndim), dtype=np.int64), tuple(counts.shape))
        true.columns, true.rows = None, int(counts.sum())
        true._cache[tuple(range(counts.ndim))] = counts
        return true

    def marginal(self, attrs: tuple[int, ...]) -> AnyArray:
        if attrs not in self._cache:
            self._cache[attrs] = self._count(attrs)
        return self._cache[attrs]

    def _count(self, attrs: tuple[int, ...]) -> AnyArray:
        dims = tuple(self.shape[a] for a in attrs)
        if self.columns is None:  # summed from the full table of counts
            full = self._cache[tuple(range(len(self.shape)))]
            others = tuple(a for a in range(len(self.shape)) if a not in attrs)
            kept = sorted(attrs)
            summed = full.sum(axis=others) if others else full
            return np.transpose(summed, [kept.index(a) for a in attrs]).astype(np.int64)
        flat = np.ravel_multi_index(tuple(self.columns[a] for a in attrs), dims)
        counts = np.bincount(flat, minlength=math.prod(dims))
        return counts.reshape(dims).astype(np.int64)

    def answer(self, query: Query) -> AnyArray:
        return query_answer(query, self.marginal(query.attrs))


def measure_one_way(
    true: TrueAnswers, rows: int | None, eps_init: float, neighbouring: str, rng: RandomSource
) -> tuple[int, list[AnyArray], list[AnyArray], float]:
    """Measure every 1-way marginal with ``eps_init`` (none if 0).

    Returns (n, noisy 1-way counts, start weights, noise scale). A noisy count below the noise
    scale is raised to it (a count that small is not evidence of an empty cell).
    Privacy: spends ``eps_init`` (ε-DP): the d marginals together have L1 sensitivity
    d × ``marginal_sensitivity`` and each cell gets discrete Laplace noise of scale
    ``noise_scale(that, eps_init)``. ``rows`` is the public n under replace-one, the noisy
    row count (``noisy_row_count``) under the add-remove default plan, else None: n is then
    ``_estimate_n`` of the noisy marginals (post-processing).
    """
    shape, d = true.shape, len(true.shape)
    if eps_init == 0:
        if rows is None:
            raise MechanismError(
                "init_fraction (0) must be > 0 under add-remove: the noisy 1-way marginals "
                "estimate the (private) number of rows"
            )
        return rows, [], [np.ones(k) for k in shape], 0.0
    scale = noise_scale(marginal_sensitivity(neighbouring) * d, eps_init)
    one_way = [rng.add_discrete_laplace(true.marginal((a,)), scale) for a in range(d)]
    n = rows if rows is not None else _estimate_n(one_way)
    return n, one_way, [np.maximum(m, max(scale, 0.5)) for m in one_way], scale


def noisy_row_count(true: TrueAnswers, eps_count: float, rng: RandomSource) -> int:
    """The number of rows plus discrete Laplace noise of scale 1/``eps_count``, at least 1.

    Privacy: spends ``eps_count`` (ε-DP under add-remove: the count has sensitivity 1; the
    clip at 1 is post-processing). Only the add-remove default plan draws it (n is public
    under replace-one).
    """
    rows = np.array([true.rows], dtype=np.int64)
    return max(1, int(rng.add_discrete_laplace(rows, noise_scale(1, eps_count))[0]))


def _estimate_n(one_way: list[AnyArray]) -> int:
    """Post-processing: the mean total of the noisy 1-way marginals, at least 1."""
    return max(1, round(float(np.mean([m.sum() for m in one_way]))))


def expected_abs_noise(scale: float) -> float:
    """E|Z| for the discrete Laplace P(k) ∝ exp(-|k|/scale) (public: a function of the scale)."""
    if scale == 0:
        return 0.0
    alpha = math.exp(-1 / scale)
    return 2 * alpha / (-math.expm1(-1 / scale) * (1 + alpha))  # 1 - α without cancellation


def selection_candidates(workload: list[Query]) -> list[Query]:
    """The queries MWEM may select: the workload, then the pairs inside its larger marginals.

    The pairs are the 2-way marginals inside its marginals of three or more columns that it
    does not hold already, in a fixed order.
    Measuring a pair of a 3-way marginal fits that marginal's pair structure at a fraction of
    its cells' noise, so a workload of 3-way marginals alone no longer forces every round to
    measure a whole 3-way table (issue 44: such a workload lost to MST and AIM at low signal,
    which measure pairs). Public: a function of the public workload only; idempotent.
    """
    held = {q.attrs for q in workload if q.box is None}
    pairs = [
        pair
        for q in workload
        if q.box is None and len(q.attrs) >= 3
        for pair in itertools.combinations(q.attrs, 2)
    ]
    extra = [Query(pair) for pair in dict.fromkeys(pairs) if pair not in held]
    return [*workload, *extra]


def select_query(
    model: Any,
    true: TrueAnswers,
    workload: list[Query],
    n: int,
    eps_select: float,
    eps_measure: float,
    marginal_l1: int,
    memory_cells: int | None,
    rng: RandomSource,
    *,
    whole_cells: int | None,
) -> tuple[Query, bool]:
    """Exponential mechanism over the queries the memory budget allows: (query, left out).

    ``left out``: whether the memory budget left out at least one workload query this round.
    The model joins blocks into one whole table of up to ``whole_cells`` cells and links larger
    ones as a junction tree (``FactoredDistribution.join``; None: always one whole table), so a
    query fits when the largest table that joining it needs has at most ``memory_cells`` cells.
    Every query that fits competes: speed comes from the junction trees, not from steering the
    selection (issue 44: a steer toward queries that kept blocks within 2^22 cells cost up to
    2.9× pair TVD on tables above it). Which queries fit, and so the flag, is public: it
    depends only on the model's cliques (fixed by earlier DP selections), the public domain
    shape, workload, ``whole_cells`` and ``memory_cells``, never on the data.
    Score of q = (‖q(B) − q(A)‖₁ − expected ‖noise‖₁ of measuring q) / Δ_q, so every score has
    sensitivity 1; the penalty is data-independent. Privacy: spends ``eps_select`` (ε-DP, the
    exponential mechanism at ``eps_select`` with sensitivity 1); ``n`` must be public (the row
    count under replace-one, the DP estimate under add-remove). How the model is held (whole
    tables or junction trees) is post-processing: it changes no score, the same distribution.
    """
    allowed = [  # a clique never has more cells than the whole table of the blocks it joins
        q
        for q in workload
        if model.merged_size(q.attrs) <= memory_cells
        or model.clique_cells(q.attrs, whole_cells) <= memory_cells
    ]
    if not allowed:
        raise MechanismError(
            f"no workload query fits memory_cells ({memory_cells}); raise it or use smaller queries"
        )
    scores = _selection_scores(model, true, allowed, n, eps_measure, marginal_l1)
    chosen = exponential_mechanism(scores, epsilon=eps_select, sensitivity=1, rng=rng)
    return allowed[chosen], len(allowed) < len(workload)


def _selection_scores(
    model: Any,
    true: TrueAnswers,
    queries: list[Query],
    n: int,
    eps_measure: float,
    marginal_l1: int,
) -> AnyArray:
    """(‖q(B) − q(A)‖₁ − expected ‖noise‖₁ of measuring q) / Δ_q: sensitivity 1 each."""
    scores = np.empty(len(queries))
    for i, q in enumerate(queries):
        delta = _sensitivity(q, marginal_l1)
        error = np.abs(true.answer(q) - n * query_answer(q, model.marginal(q.attrs))).sum()
        penalty = q.cells(true.shape) * expected_abs_noise(delta / eps_measure)
        scores[i] = (error - penalty) / delta
    return scores


def measure_query(
    true: TrueAnswers, query: Query, eps_measure: float, marginal_l1: int, rng: RandomSource
) -> tuple[AnyArray, float]:
    """The query's answer plus discrete Laplace noise of scale Δ_q/ε; returns (noisy, scale).

    Privacy: spends ``eps_measure`` (ε-DP): Δ_q = ``_sensitivity(query, marginal_l1)``, scale
    ``noise_scale(Δ_q, eps_measure)``.
    """
    scale = noise_scale(_sensitivity(query, marginal_l1), eps_measure)
    return rng.add_discrete_laplace(true.answer(query), scale), scale
