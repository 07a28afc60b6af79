"""MWEM: multiplicative weights and the exponential mechanism (Hardt, Ligett & McSherry 2012).

The approximating distribution is kept factored (paper Sec. 4): independent groups of attributes,
each a dense float64 array of probabilities; two groups are merged (outer product) only when a
measured query spans both. ``dense=True`` starts from one group over the whole domain.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from mechanisms.accounting import check_epsilon, check_neighbouring, float_at_most, noise_scale
from mechanisms.errors import MechanismError
from mechanisms.noise import check_count_noise, exponential_mechanism, resolve_rng
from mechanisms.release import ReleaseOutput, csv_bytes, json_bytes
from mechanisms.schema import NumericColumn
from mechanisms.workload import Query, expand_workload, load_workload, marginals_spec

__all__ = ["FactoredDistribution", "MwemResult", "default_rounds", "measure_all", "mwem"]

DEFAULT_MEMORY_CELLS = 25_000_000  # float64 cells per group: 200 MB
MAX_DEFAULT_ROUNDS = 30
MIN_DEFAULT_ROUNDS = 3
SELECT_FRACTION = 0.15  # of each round's budget; the rest measures (measured best on Adult)
ADD_REMOVE_INIT_FRACTION = 0.2
FINAL_PASSES = 5
SELECTION_GAP = 0.25  # default_rounds: the error (fraction of n) selection must be able to find
_INTERMEDIATE_CELLS = 1 << 16
_stamps = itertools.count()  # a fresh stamp marks every change of a group's array
_SETTLED = 1e-3  # an update that would change no weight by more than this is skipped
FLOOR_SHARE = 0.3  # MWEM's update targets are floored at this share of the noise scale


class _Group:
    """Attributes ``attrs`` (sorted) with their joint probabilities ``probs``.

    Marginals are cached in ``partials``. Reweighting is lazy: a factor over attrs S multiplies
    every cached marginal whose attributes contain S (exact: summing out other attributes
    commutes with it) and waits in ``pending``; the full array is brought up to date, all
    pending factors in one broadcast, only when it is needed.
    """

    def __init__(self, attrs: tuple[int, ...], probs: np.ndarray):
        self.attrs = attrs
        self.size = probs.size
        self.stamp = next(_stamps)
        self._probs = probs
        self._pending: list[tuple[tuple[int, ...], np.ndarray]] = []
        self.partials: dict[tuple[int, ...], np.ndarray] = {attrs: probs}

    @property
    def probs(self) -> np.ndarray:
        """The full, up-to-date array."""
        self._flush()
        return self._probs

    def reweight(self, keep: tuple[int, ...], factor: np.ndarray) -> None:
        """Multiply by ``factor`` over ``keep`` (lazily for the full array)."""
        self.stamp = next(_stamps)
        wanted = set(keep)
        self.partials = {
            attrs: array * _spread(factor, keep, attrs)
            for attrs, array in self.partials.items()
            if wanted <= set(attrs) and attrs != self.attrs
        }
        self._pending.append((keep, factor))

    def _flush(self) -> None:
        if not self._pending:
            return
        union = tuple(sorted({a for keep, _ in self._pending for a in keep}))
        dims = [self._probs.shape[self.attrs.index(a)] for a in union]
        if math.prod(dims) <= self.size // 4:  # combine first: one pass over the full array
            combined = np.ones(dims)
            for keep, factor in self._pending:
                combined = combined * _spread(factor, keep, union)
            self._pending = [(union, combined)]
        for keep, factor in self._pending:
            self._probs *= _spread(factor, keep, self.attrs)
        self._pending = []
        self.partials[self.attrs] = self._probs

    def marginal(self, keep: tuple[int, ...]) -> np.ndarray:
        """Marginal on the sorted ``keep`` ⊆ attrs, summed from the smallest cached superset.

        Summing a large array over many axes is the hot path, so the first marginal asked of a
        large array goes through an intermediate that drops only its largest unwanted axis;
        later marginals are then summed from that smaller intermediate.
        """
        if keep in self.partials:
            return self.partials[keep]
        wanted = set(keep)
        supersets = [k for k in self.partials if wanted <= set(k)]
        if not supersets:
            self._flush()
            supersets = [self.attrs]
        source = min(supersets, key=_cells_of(self))
        array = self.partials[source]
        unwanted = [a for a in source if a not in wanted]
        if array.size > _INTERMEDIATE_CELLS and len(unwanted) > 1:
            largest = max(unwanted, key=lambda a: array.shape[source.index(a)])
            middle = tuple(a for a in source if a != largest)
            self.partials[middle] = array.sum(axis=source.index(largest))
            return self.marginal(keep)
        letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(source)]
        spec = letters + "->" + "".join(letters[source.index(a)] for a in keep)
        self.partials[keep] = (
            np.einsum(spec, array)
            if len(source) <= 52
            else array.sum(axis=tuple(source.index(a) for a in unwanted))
        )
        return self.partials[keep]


def _spread(factor: np.ndarray, keep: tuple[int, ...], attrs: tuple[int, ...]) -> np.ndarray:
    """``factor`` (axes ``keep``) reshaped to broadcast against an array with axes ``attrs``."""
    return factor.reshape([factor.shape[keep.index(a)] if a in keep else 1 for a in attrs])


def _cells_of(group: _Group):
    return lambda attrs: group.partials[attrs].size


class FactoredDistribution:
    """A product of independent attribute groups, each a dense array of probabilities."""

    def __init__(self, shape: tuple[int, ...], groups: list[tuple[tuple[int, ...], np.ndarray]]):
        self.shape = tuple(shape)
        self.group_of: list[_Group] = [None] * len(shape)  # type: ignore[list-item]
        for attrs, probs in groups:
            self._install(_Group(attrs, probs / probs.sum()))
        self._products: dict[tuple[int, ...], tuple[tuple[int, ...], np.ndarray]] = {}

    @classmethod
    def independent(cls, one_way: list[np.ndarray], *, dense: bool = False):
        """The product of the 1-way distributions; one group per attribute unless ``dense``."""
        shape = tuple(len(p) for p in one_way)
        if not dense:
            return cls(shape, [((a,), p.astype(float)) for a, p in enumerate(one_way)])
        joint = np.ones((), dtype=float)
        for p in one_way:
            joint = np.multiply.outer(joint, p / p.sum())
        return cls(shape, [(tuple(range(len(shape))), joint)])

    def groups(self) -> list[_Group]:
        """The distinct groups, in attribute order."""
        return list({id(g): g for g in self.group_of}.values())

    def _install(self, group: _Group) -> None:
        for a in group.attrs:
            self.group_of[a] = group

    def _groups_of(self, attrs) -> list[_Group]:
        return list({id(self.group_of[a]): self.group_of[a] for a in attrs}.values())

    def merged_size(self, attrs: tuple[int, ...]) -> int:
        """Cells of the group that measuring a query on ``attrs`` would need."""
        return math.prod(g.size for g in self._groups_of(attrs))

    def marginal(self, attrs: tuple[int, ...]) -> np.ndarray:
        """Probabilities of the marginal on sorted ``attrs`` (cached until a group changes)."""
        groups = self._groups_of(attrs)
        if len(groups) == 1:
            return groups[0].marginal(attrs)
        stamps = tuple(g.stamp for g in groups)
        cached = self._products.get(attrs)
        if cached is not None and cached[0] == stamps:
            return cached[1]
        wanted = set(attrs)
        result, order = np.ones(()), []
        for g in groups:
            keep = tuple(a for a in g.attrs if a in wanted)
            result = np.multiply.outer(result, g.marginal(keep))
            order += keep
        result = result.transpose(np.argsort(order))
        self._products[attrs] = (stamps, result)
        return result

    def merge(self, attrs: tuple[int, ...]) -> None:
        """Join the groups holding ``attrs`` into one (outer product of their arrays)."""
        groups = self._groups_of(attrs)
        if len(groups) == 1:
            return
        joint, order = np.ones(()), []
        for g in groups:
            joint = np.multiply.outer(joint, g.probs)
            order += list(g.attrs)
        perm = np.argsort(order)
        self._install(_Group(tuple(sorted(order)), np.ascontiguousarray(joint.transpose(perm))))

    def reweight(self, attrs: tuple[int, ...], factor: np.ndarray) -> None:
        """Multiply by ``factor`` (an array over ``attrs``) in one broadcast and renormalise.

        The groups holding ``attrs`` must already be merged.
        """
        factor = factor / float(np.sum(self.marginal(attrs) * factor))
        self.group_of[attrs[0]].reweight(attrs, factor)

    def to_dense(self) -> np.ndarray:
        """The full joint array (small domains only: tests and the averaged output)."""
        return self.marginal(tuple(range(len(self.shape)))).copy()

    def sample(self, n: int, rng) -> np.ndarray:
        """``n`` records (cell codes, shape (n, d)) drawn from the distribution.

        Each group is sampled systematically (cell counts within one of n·p) and the groups'
        rows are paired by independent random permutations.
        """
        codes = np.zeros((n, len(self.shape)), dtype=np.int64)
        for g in self.groups():
            cdf = np.cumsum(g.probs.ravel())
            points = (rng.uniform(size=1)[0] + np.arange(n)) / n * cdf[-1]
            cells = np.minimum(np.searchsorted(cdf, points, side="right"), cdf.size - 1)
            cells = cells[np.argsort(rng.uniform(size=n))]
            codes[:, list(g.attrs)] = np.stack(np.unravel_index(cells, g.probs.shape), axis=1)
        return codes


@dataclass
class MwemResult:
    """What MWEM releases: the fitted distribution, its noisy measurements and a trace.

    Everything here is differentially private (measurements) or post-processing of it.
    """

    distribution: FactoredDistribution
    n: int
    measurements: list[dict] = field(default_factory=list)
    trace: list[dict] = field(default_factory=list)
    rounds: int = 0
    budget: dict = field(default_factory=dict)


def mwem(
    codes: np.ndarray,
    shape: tuple[int, ...],
    workload: list[Query],
    *,
    epsilon: float,
    rounds: int | None = None,
    neighbouring: str = "replace-one",
    init_fraction: float | None = None,
    select_fraction: float = SELECT_FRACTION,
    mw_passes: int | None = None,
    output: str = "last",
    update: str = "damped",
    dense: bool = False,
    memory_cells: int = DEFAULT_MEMORY_CELLS,
    rng=None,
    progress: Callable[[int, int], None] | None = None,
) -> MwemResult:
    """Fit a synthetic-data distribution to ``workload`` with MWEM.

    ``codes`` are the encoded records (n × d cell indices), ``shape`` the public domain shape
    from the schema. Budget split (the whole ε, nothing else is spent):
    ``init_fraction·ε`` measures every 1-way marginal (the start is their product; 0 starts
    from uniform), then each of T rounds spends ``select_fraction`` of ``(1 - init_fraction)·ε/T``
    on selecting a query (exponential mechanism, score = L1 error of the current model minus the
    expected L1 size of the measurement noise) and the rest on measuring it with discrete
    Laplace noise. ``init_fraction=0, select_fraction=0.5`` is the paper's ε/(2T) split.
    After each measurement, ``mw_passes`` multiplicative-weights passes over all measurements
    so far (default: see ``_refit``).
    ``update="damped"`` (default) moves each cell by √(target / current), clipped; ``"paper"`` is
    the paper's A(x) ← A(x)·exp(q(x)·(m − q(A))/(2n)), which needs many more passes.
    ``output="last"`` returns the last iterate, ``"average"`` the average of the iterates
    (the analysed estimator; needs the dense representation).

    Privacy: unit = one record; pure ε-DP by sequential composition under ``neighbouring``.
    Sensitivities: replace-one: a marginal's cell vector has L1 sensitivity 2 (one cell −1,
    another +1), so does its L1-error score; a box count and its absolute error have 1; the
    d initial 1-way marginals jointly have L1 sensitivity 2d. add-remove: all of these are
    halved (1, 1, d), and n is not public: it is estimated from the noisy 1-way marginals.
    """
    rng = resolve_rng(rng)
    if init_fraction is None:
        init_fraction = (
            default_init_fraction(len(codes), epsilon, shape, workload)
            if neighbouring == "replace-one"
            else ADD_REMOVE_INIT_FRACTION
        )
    _check_args(epsilon, neighbouring, init_fraction, select_fraction, output, update, workload)
    # n is public only under replace-one: under add-remove an empty table must run like any other
    rows = len(codes) if neighbouring == "replace-one" else 1
    _check_counts(rows, rounds=rounds, mw_passes=mw_passes, memory_cells=memory_cells)
    d = len(shape)
    marginal_l1 = 2 if neighbouring == "replace-one" else 1
    true = _TrueAnswers(codes, shape)
    eps_init = _share(epsilon, init_fraction)
    # refuse a too small ε before any draw: the most rounds the default could choose
    _check_noise_fits(
        epsilon,
        eps_init,
        d,
        marginal_l1,
        _split(
            epsilon, eps_init, rounds or min(len(workload), MAX_DEFAULT_ROUNDS), select_fraction
        )[1],
    )
    n, one_way, start, init_scale = _start(true, len(codes), eps_init, neighbouring, rng)
    if output == "average":
        dense = _check_dense_fits(shape, memory_cells)
    model = FactoredDistribution.independent(start, dense=dense)
    if rounds is None:
        rounds = default_rounds(
            n, epsilon, shape, workload, init_fraction, select_fraction, marginal_l1
        )
    eps_select, eps_measure = _split(epsilon, eps_init, rounds, select_fraction)

    result = MwemResult(
        model,
        n,
        rounds=rounds,
        budget={
            "epsilon": epsilon,
            "initial_one_way": eps_init,
            "per_round_select": eps_select,
            "per_round_measure": eps_measure,
            "rounds": rounds,
        },
    )
    for a, noisy in enumerate(one_way):
        result.measurements.append(_measurement_record(Query((a,)), noisy, init_scale))
    measured = [(Query((a,)), m / n, _floor(init_scale, n)) for a, m in enumerate(one_way)]
    iterate_sum = np.zeros(shape) if output == "average" else None
    for t in range(rounds):
        query = _select(
            model, true, workload, n, eps_select, eps_measure, marginal_l1, memory_cells, rng
        )
        noisy, scale = _measure(true, query, eps_measure, marginal_l1, rng)
        result.measurements.append(_measurement_record(query, noisy, scale))
        measured.append((query, noisy / n, _floor(scale, n)))
        model.merge(query.attrs)
        _refit(model, measured, mw_passes, update, last_round=t == rounds - 1)
        if iterate_sum is not None:
            iterate_sum += model.to_dense()
        result.trace.append(_trace_entry(t, query, noisy, model, measured, shape))
        if progress is not None:
            progress(t + 1, rounds)
    if iterate_sum is not None:
        result.distribution = FactoredDistribution(shape, [(tuple(range(d)), iterate_sum)])
    return result


def measure_all(
    codes: np.ndarray,
    shape: tuple[int, ...],
    workload: list[Query],
    *,
    epsilon: float,
    neighbouring: str = "replace-one",
    mw_passes: int = 20,
    rng=None,
) -> FactoredDistribution:
    """The non-adaptive baseline: measure every workload query at ε/|W|, then fit by MW passes.

    Privacy: unit = one record; pure ε-DP by sequential composition over the |W| queries, each
    with discrete Laplace noise of scale Δ_q·|W|/ε (Δ_q as in ``mwem``). Replace-one only (the
    fit uses the public n). Its targets are floored at the whole noise scale, which suits its
    tiny per-query ε best (MWEM's smaller floor raises this baseline's relative entropy).
    """
    rng = resolve_rng(rng)
    check_epsilon(epsilon)
    if neighbouring != "replace-one":
        raise MechanismError(f"neighbouring ({neighbouring!r}) must be replace-one here")
    true, n = _TrueAnswers(codes, shape), len(codes)
    eps_query = (
        math.inf if math.isinf(epsilon) else float_at_most(Fraction(epsilon) / len(workload))
    )
    check_count_noise(noise_scale(2, eps_query), epsilon)
    model = FactoredDistribution.independent([np.ones(k) for k in shape])
    measured = []
    for query in workload:
        noisy, scale = _measure(true, query, eps_query, 2, rng)
        measured.append((query, noisy / n, _floor(scale, n, share=1.0)))
        model.merge(query.attrs)
    for _ in range(mw_passes):
        for query, target, floor in measured:
            _mw_update(model, query, target, floor)
    return model


def _refit(model, measured, mw_passes, update, *, last_round) -> None:
    """MW updates after a new measurement (the paper's practical improvement).

    Only measurements linked to the newest one through shared attributes are refitted: the
    others are independent of it (in the factored representation they form other groups, so
    factored and dense runs make the same updates). ``mw_passes`` given: that many passes over
    them. Default: 10 passes while the group is small (cheap); once it is large, the newest
    measurement twice, then one pass over all (FINAL_PASSES in the last round). (A pass over
    all only every 4th round: Adult, 8 columns, ε = 10, 2-/3-way TVD .0062/.0197 against
    .0054/.0187, seeds 3-5.)
    """
    group = model.group_of[measured[-1][0].attrs[0]]
    inside = _linked(measured)
    if mw_passes is None and group.size > _INTERMEDIATE_CELLS:
        for _ in range(2):
            _mw_update(model, *inside[-1], update)
        mw_passes = FINAL_PASSES if last_round else 1
    for _ in range(10 if mw_passes is None else mw_passes):
        for query, target, floor in inside:
            _mw_update(model, query, target, floor, update)


def _linked(measured: list) -> list:
    """The measurements connected to the newest one by chains of shared attributes."""
    reach, grew = set(measured[-1][0].attrs), True
    while grew:
        grew = False
        for query, *_ in measured:
            if reach.intersection(query.attrs) and not reach.issuperset(query.attrs):
                reach.update(query.attrs)
                grew = True
    return [m for m in measured if reach.issuperset(m[0].attrs)]


def default_init_fraction(n, epsilon, shape, workload) -> float:
    """1 / (1 + T) for the T the whole budget would allow (no minimum), at least 0.1; or 0.

    All d 1-way marginals together weigh like one more round: with a single affordable round
    (small n·ε) half the budget goes to them. (Adult, 8 columns, ε = 1, T = 16: 2-/3-way TVD
    .0270/.0583 at 0.1 against .0307/.0646 at d / (d + T) = 0.33.) But when the noise scale
    of a 1-way cell would exceed a tenth of its mean count (many attributes, small n·ε: an expected
    1-way TVD over 0.05), the start is not worth it and starts uniform (0).
    Only for replace-one, where n is public; add-remove uses the fixed ADD_REMOVE_INIT_FRACTION.
    """
    d = len(shape)
    rounds = default_rounds(n, epsilon, shape, workload, 0.0, SELECT_FRACTION, 2, minimum=1)
    fraction = max(0.1, 1 / (1 + rounds))
    noise = 2 * d / (fraction * epsilon)
    return fraction if noise <= n / (10 * float(np.median(shape))) else 0.0


def default_rounds(
    n,
    epsilon,
    shape,
    workload,
    init_fraction,
    select_fraction,
    marginal_l1,
    minimum=MIN_DEFAULT_ROUNDS,
):
    """The largest T (``minimum`` to min(|W|, MAX_DEFAULT_ROUNDS)) that keeps two things useful.

    At least MIN_DEFAULT_ROUNDS (or |W|): even when no round can measure a typical query well,
    the exponential mechanism picks the ones worth measuring, and one round is little more
    than the independent start (Adult at ε = 0.1, 2-/3-way TVD: 8 columns .0888/.1628 at T = 3
    against .1033/.1908 at T = 1; 4 columns .1245/.2384 against .1273/.2453).

    A workload of marginals alone is also capped at 2d rounds: beyond about two marginals per
    attribute, the noise that more rounds add outweighs what further marginals explain (Adult,
    8 columns, ε = 10: 2-/3-way TVD .0060/.0199 at T = 16, .0065/.0206 at 24, .0069/.0223 at
    30). Box queries are single numbers, so they keep the larger cap.

    Measuring: a query with c cells measured at ε_m has noise of scale Δ/ε_m per cell against a
    mean cell count n/c; ask for a seventh: T ≤ ε_measure_total·n / (7·Δ·c_median).
    Selecting: the exponential mechanism at ε_s (score sensitivity 1, scores in units of Δ)
    must tell apart a query whose error is SELECTION_GAP·n from the rest of |W|:
    ε_s·SELECTION_GAP·n / (2·Δ) ≥ ln|W|, so T ≤ ε_select_total·SELECTION_GAP·n / (2·Δ·ln|W|).
    Uses only public values (n is public under replace-one; under add-remove it is the DP
    estimate).
    """
    cap = min(len(workload), MAX_DEFAULT_ROUNDS)
    if all(q.box is None for q in workload):
        cap = min(cap, 2 * len(shape))
    if math.isinf(epsilon):
        return cap
    cells = float(np.median([q.cells(shape) for q in workload]))
    spend = epsilon * (1 - init_fraction)
    measuring = spend * (1 - select_fraction) * n / (7 * marginal_l1 * cells)
    selecting = (
        spend
        * select_fraction
        * SELECTION_GAP
        * n
        / (2 * marginal_l1 * math.log(max(len(workload), 2)))
    )
    return int(max(min(cap, minimum), 1, min(cap, measuring, selecting)))


def _share(epsilon: float, fraction: float) -> float:
    """fraction·ε rounded down (0 when fraction is 0, also at ε = inf)."""
    if fraction == 0 or math.isinf(epsilon):
        return 0.0 if fraction == 0 else math.inf
    return float_at_most(Fraction(epsilon) * Fraction(fraction))


def _split(epsilon, eps_init, rounds, select_fraction) -> tuple[float, float]:
    """(ε_select, ε_measure) per round, each rounded down.

    In exact arithmetic eps_init + rounds × (ε_select + ε_measure) <= ε.
    """
    if math.isinf(epsilon):
        return math.inf, math.inf
    per_round = float_at_most((Fraction(epsilon) - Fraction(eps_init)) / rounds)
    eps_select = _share(per_round, select_fraction)
    return eps_select, float_at_most(Fraction(per_round) - Fraction(eps_select))


def _check_noise_fits(epsilon, eps_init, d, marginal_l1, eps_measure) -> None:
    """Refuse an ε whose count noise 64-bit integers cannot carry (see noise.check_count_noise)."""
    if eps_init > 0:
        check_count_noise(noise_scale(marginal_l1 * d, eps_init), epsilon)
    check_count_noise(noise_scale(marginal_l1, eps_measure), epsilon)


def _check_args(epsilon, neighbouring, init_fraction, select_fraction, output, update, workload):
    check_epsilon(epsilon)
    check_neighbouring(neighbouring)
    if not 0 <= init_fraction < 1:
        raise MechanismError(f"init_fraction ({init_fraction!r}) must be in [0, 1)")
    if not 0 < select_fraction < 1:
        raise MechanismError(f"select_fraction ({select_fraction!r}) must be in (0, 1)")
    if output not in ("last", "average"):
        raise MechanismError(f"output ({output!r}) must be 'last' or 'average'")
    if update not in ("damped", "paper"):
        raise MechanismError(f"update ({update!r}) must be 'damped' or 'paper'")
    if not workload:
        raise MechanismError("workload (empty) must hold at least one query")


def _check_counts(n, **counts) -> None:
    if n < 1:
        raise MechanismError("data (0 rows) must have at least one row for MWEM")
    for name, value in counts.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise MechanismError(f"{name} ({value!r}) must be a whole number >= 1")


def _check_dense_fits(shape, memory_cells) -> bool:
    cells = math.prod(shape)
    if cells > memory_cells:
        raise MechanismError(
            f"output 'average' needs the dense domain ({cells} cells) within memory_cells "
            f"({memory_cells}); use output 'last' or raise memory_cells"
        )
    return True


class _TrueAnswers:
    """Exact marginals of the private records, computed once per attribute set."""

    def __init__(self, codes: np.ndarray, shape: tuple[int, ...]):
        self.columns = np.ascontiguousarray(np.asarray(codes).T)  # fast per-column reads
        self.shape, self._cache = shape, {}

    def marginal(self, attrs: tuple[int, ...]) -> np.ndarray:
        if attrs not in self._cache:
            dims = tuple(self.shape[a] for a in attrs)
            flat = np.ravel_multi_index(tuple(self.columns[a] for a in attrs), dims)
            counts = np.bincount(flat, minlength=math.prod(dims))
            self._cache[attrs] = counts.reshape(dims).astype(np.int64)
        return self._cache[attrs]

    def answer(self, query: Query) -> np.ndarray:
        return _answer(query, self.marginal(query.attrs))


def _answer(query: Query, marginal: np.ndarray) -> np.ndarray:
    """The query's answer vector from the marginal on its attributes (length 1 for a box)."""
    if query.box is None:
        return marginal.ravel()
    return np.atleast_1d(marginal[_box_slices(query)].sum())


def _box_slices(query: Query) -> tuple[slice, ...]:
    return tuple(slice(lo, hi + 1) for lo, hi in query.box)


def _sensitivity(query: Query, marginal_l1: int) -> int:
    """L1 sensitivity of the query's answer vector (and of its L1-error score)."""
    return 1 if query.box is not None else marginal_l1


def _start(true, rows, eps_init, neighbouring, rng):
    """Measure every 1-way marginal with ``eps_init`` (none if 0).

    Returns (n, noisy 1-way counts, start weights, noise scale). A noisy count below the noise
    scale is raised to it (a count that small is not evidence of an empty cell).
    """
    shape, d = true.shape, len(true.shape)
    if eps_init == 0:
        if neighbouring != "replace-one":
            raise MechanismError(
                "init_fraction (0) must be > 0 under add-remove: the noisy 1-way marginals "
                "estimate the (private) number of rows"
            )
        return rows, [], [np.ones(k) for k in shape], 0.0
    scale = noise_scale((2 if neighbouring == "replace-one" else 1) * d, eps_init)
    one_way = [rng.add_discrete_laplace(true.marginal((a,)), scale) for a in range(d)]
    n = rows if neighbouring == "replace-one" else _estimate_n(one_way)
    return n, one_way, [np.maximum(m, max(scale, 0.5)) for m in one_way], scale


def _estimate_n(one_way: list[np.ndarray]) -> int:
    """Post-processing: the mean total of the noisy 1-way marginals, at least 1."""
    return max(1, round(float(np.mean([m.sum() for m in one_way]))))


def _expected_abs_noise(scale: float) -> float:
    """E|Z| for the discrete Laplace P(k) ∝ exp(-|k|/scale)."""
    if scale == 0:
        return 0.0
    alpha = math.exp(-1 / scale)
    return 2 * alpha / (-math.expm1(-1 / scale) * (1 + alpha))  # 1 - α without cancellation


def _select(
    model, true, workload, n, eps_select, eps_measure, marginal_l1, memory_cells, rng
) -> Query:
    """Exponential mechanism over the queries the memory budget allows.

    Score of q = (‖q(B) − q(A)‖₁ − expected ‖noise‖₁ of measuring q) / Δ_q, so every score has
    sensitivity 1; the penalty is data-independent. Which queries fit the memory budget depends
    only on earlier (DP) selections.
    """
    allowed = [q for q in workload if model.merged_size(q.attrs) <= memory_cells]
    if not allowed:
        raise MechanismError(
            f"no workload query fits memory_cells ({memory_cells}); raise it or use smaller queries"
        )
    scores = _selection_scores(model, true, allowed, n, eps_measure, marginal_l1)
    return allowed[exponential_mechanism(scores, epsilon=eps_select, sensitivity=1, rng=rng)]


def _selection_scores(model, true, queries, n, eps_measure, marginal_l1) -> np.ndarray:
    """(‖q(B) − q(A)‖₁ − expected ‖noise‖₁ of measuring q) / Δ_q: sensitivity 1 each."""
    scores = np.empty(len(queries))
    for i, q in enumerate(queries):
        delta = _sensitivity(q, marginal_l1)
        error = np.abs(true.answer(q) - n * _answer(q, model.marginal(q.attrs))).sum()
        penalty = q.cells(true.shape) * _expected_abs_noise(delta / eps_measure)
        scores[i] = (error - penalty) / delta
    return scores


def _measure(true, query: Query, eps_measure: float, marginal_l1: int, rng):
    """The query's answer plus discrete Laplace noise of scale Δ_q/ε; returns (noisy, scale)."""
    scale = noise_scale(_sensitivity(query, marginal_l1), eps_measure)
    return rng.add_discrete_laplace(true.answer(query), scale), scale


def _floor(noise_scale: float, n: int, share: float = FLOOR_SHARE) -> float:
    """Smallest target (fraction of n) an update aims at: ``share`` of the noise scale.

    A count below its noise scale is weak evidence of an empty cell, but a floor at the whole
    scale puts mass into truly empty cells: on Adult (8 columns, ε = 10) 2-way TVD is .0078
    with share 1 and .0061 with 0.3 or less; 0.3 keeps the relative entropy of the
    contingency-table benchmark as low as share 1 did, where share 0 raised it up to 3×.
    """
    return max(share * noise_scale / n, 1e-9)


def _mw_update(
    model: FactoredDistribution,
    query: Query,
    target: np.ndarray,
    floor: float,
    update: str = "damped",
):
    """One multiplicative-weights step toward the noisy answer ``target`` (as a fraction of n)."""
    current = model.marginal(query.attrs)
    if update == "paper":
        factor = _paper_factor(query, current, target)
        if np.any(factor != 1):
            model.reweight(query.attrs, factor)
        return
    factor = _damped_factor(query, current, target, floor)
    if np.abs(factor - 1).max() > _SETTLED:
        model.reweight(query.attrs, factor)


def _damped_factor(query: Query, current: np.ndarray, target: np.ndarray, floor: float):
    """√(target / current) on each part of the domain the query splits it into.

    A marginal's cells and a box with its complement partition the domain; the target is
    floored at ``floor`` and the ratio clipped to [e^-2, e^2] so noisy or zero targets cannot
    blow up.
    """
    if query.box is None:
        ratio = np.maximum(target.reshape(current.shape), floor) / np.maximum(current, 1e-300)
    else:
        inside = float(current[_box_slices(query)].sum())
        wanted = min(max(float(target[0]), floor), 1 - floor)
        ratio = np.full(current.shape, (1 - wanted) / max(1 - inside, 1e-300))
        ratio[_box_slices(query)] = wanted / max(inside, 1e-300)
    return np.sqrt(np.clip(ratio, math.exp(-2), math.exp(2)))


def _paper_factor(query: Query, current: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The paper's exp(q(x)·(m − q(A))/(2n)), with answers as fractions of n.

    Each cell of a marginal is its own counting query q; a box is one query (1 inside, 0
    outside).
    """
    if query.box is None:
        return np.exp((target.reshape(current.shape) - current) / 2)
    factor = np.ones(current.shape)
    inside = float(current[_box_slices(query)].sum())
    factor[_box_slices(query)] = math.exp((float(target[0]) - inside) / 2)
    return factor


def _measurement_record(query: Query, noisy: np.ndarray, scale: float) -> dict:
    return {"query": query, "noisy_answer": [int(v) for v in noisy], "noise_scale": scale}


def _trace_entry(t, query, noisy, model, measured, shape) -> dict:
    """Round t's public trace (post-processing of DP values).

    The selected query, its noisy answer, and the largest gap between the model and any noisy
    measurement so far (fraction of n).
    """
    gap = max(
        float(np.abs(target - _answer(q, model.marginal(q.attrs))).max())
        for q, target, _ in measured
    )
    return {
        "round": t + 1,
        "query": query,
        "noisy_answer": [int(v) for v in noisy],
        "max_error_estimate": gap,
    }


CELL_ORDER = "a marginal's answers run over its columns' bins in row-major order (last fastest)"
RELEASE_PARAMS = {
    "rounds",
    "workload",
    "marginals",
    "init_fraction",
    "select_fraction",
    "mw_passes",
    "output",
    "update",
    "memory_cells",
}


def _run_mwem(data, schema, *, columns, params, epsilon, delta, neighbouring, rng, progress):
    """The registry entry: encode, run MWEM, decode ``n`` synthetic rows, package the files."""
    unknown = sorted(set(params) - RELEASE_PARAMS)
    if unknown:
        raise MechanismError(
            f"parameter ({unknown[0]!r}) is not used by mwem; allowed: {sorted(RELEASE_PARAMS)}"
        )
    if delta != 0:
        raise MechanismError(f"delta ({delta}) must be 0: mwem is pure epsilon-DP")
    shape = schema.domain_shape(columns)
    spec = _workload_spec(params, len(columns))
    workload = expand_workload(
        spec, columns, shape, {c for c in columns if isinstance(schema.column(c), NumericColumn)}
    )
    options = {k: params[k] for k in RELEASE_PARAMS - {"workload", "marginals"} if k in params}
    result = mwem(
        schema.encode(data, columns),
        shape,
        workload,
        epsilon=epsilon,
        neighbouring=neighbouring,
        rng=rng,
        progress=progress,
        **options,
    )
    synthetic = schema.decode(result.distribution.sample(result.n, rng), columns, rng)
    measurements = [dict(m, query=m["query"].describe(columns)) for m in result.measurements]
    trace = [dict(t, query=t["query"].describe(columns)) for t in result.trace]
    manifest = {
        "parameters": {**options, "rounds": result.rounds, "workload": spec},
        "guarantee": {
            "epsilon": epsilon,
            "delta": 0.0,
            "unit": "one row",
            "neighbouring": neighbouring,
        },
        "budget_split": result.budget,
        "row_count_public": neighbouring == "replace-one",
        "schema": {"columns": [schema.column(c).to_dict() for c in columns]},
        "files": {
            "synthetic.csv": "rows sampled from MWEM's fitted distribution",
            "measurements.json": "every noisy measurement MWEM made (itself the DP release)",
        },
    }
    files = {
        "synthetic.csv": csv_bytes(synthetic),
        "measurements.json": json_bytes(
            {"budget_split": result.budget, "cell_order": CELL_ORDER, "measurements": measurements}
        ),
    }
    return ReleaseOutput(
        files=files, manifest=manifest, trace={"rounds": result.rounds, "trace": trace}
    )


def _workload_spec(params: dict, d: int) -> dict:
    if "workload" in params and "marginals" in params:
        raise MechanismError("workload and marginals are both given; pass only one of them")
    if "workload" in params:
        spec = params["workload"]
        return load_workload(spec) if isinstance(spec, str) else spec
    return marginals_spec(params.get("marginals", min(2, d)))
