"""MWEM's synthetic distribution: the model that multiplicative weights fits (never the data).

Kept factored (Hardt, Ligett & McSherry 2012, Sec. 4): independent groups of attributes, each a
dense float64 array of probabilities; two groups are merged (outer product) only when a
measured query spans both. ``dense=True`` starts from one group over the whole domain. Here are
the representations, their marginals, the arithmetic of a reweighting, sampling, and a query's
answer from a marginal. Touches no data: it is post-processing of noisy measurements.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from mechanisms.arrays import AnyArray
from mechanisms.workload import Query

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


INTERMEDIATE_CELLS = 1 << 16
_stamps = itertools.count()  # a fresh stamp marks every change of a group's array


class _Group:
    """Attributes ``attrs`` (sorted) with their joint probabilities ``probs``.

    Marginals are cached in ``partials``. Reweighting is lazy: a factor over attrs S multiplies
    every cached marginal whose attributes contain S (exact: summing out other attributes
    commutes with it) and waits in ``pending``; the full array is brought up to date, all
    pending factors in one broadcast, only when it is needed.
    """

    def __init__(self, attrs: tuple[int, ...], probs: AnyArray):
        self.attrs = attrs
        self.size = probs.size
        self.stamp = next(_stamps)
        self._probs = probs
        self._pending: list[tuple[tuple[int, ...], AnyArray]] = []
        self.partials: dict[tuple[int, ...], AnyArray] = {attrs: probs}

    @property
    def probs(self) -> AnyArray:
        """The full, up-to-date array."""
        self._flush()
        return self._probs

    def reweight(self, keep: tuple[int, ...], factor: AnyArray) -> None:
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

    def marginal(self, keep: tuple[int, ...]) -> AnyArray:
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
        if array.size > INTERMEDIATE_CELLS and len(unwanted) > 1:
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


def _spread(factor: AnyArray, keep: tuple[int, ...], attrs: tuple[int, ...]) -> AnyArray:
    """``factor`` (axes ``keep``) reshaped to broadcast against an array with axes ``attrs``."""
    return factor.reshape([factor.shape[keep.index(a)] if a in keep else 1 for a in attrs])


def _cells_of(group: _Group) -> Callable[[tuple[int, ...]], int]:
    return lambda attrs: group.partials[attrs].size


class FactoredDistribution:
    """A product of independent attribute groups, each a dense array of probabilities."""

    def __init__(self, shape: tuple[int, ...], groups: list[tuple[tuple[int, ...], AnyArray]]):
        self.shape = tuple(shape)
        self.group_of: list[_Group] = [None] * len(shape)  # type: ignore[list-item]
        for attrs, probs in groups:
            self._install(_Group(attrs, probs / probs.sum()))
        self._products: dict[tuple[int, ...], tuple[tuple[int, ...], AnyArray]] = {}

    @classmethod
    def independent(cls, one_way: list[AnyArray], *, dense: bool = False) -> FactoredDistribution:
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

    def groups_of(self, attrs: Any) -> list[_Group]:
        """The distinct groups holding ``attrs``."""
        return list({id(self.group_of[a]): self.group_of[a] for a in attrs}.values())

    def merged_size(self, attrs: tuple[int, ...]) -> int:
        """Cells of the group that measuring a query on ``attrs`` would need."""
        return math.prod(g.size for g in self.groups_of(attrs))

    def marginal(self, attrs: tuple[int, ...]) -> AnyArray:
        """Probabilities of the marginal on sorted ``attrs`` (cached until a group changes)."""
        groups = self.groups_of(attrs)
        if len(groups) == 1:
            return groups[0].marginal(attrs)
        stamps = tuple(g.stamp for g in groups)
        cached = self._products.get(attrs)
        if cached is not None and cached[0] == stamps:
            return cached[1]
        wanted = set(attrs)
        result, order = np.ones(()), list[int]()
        for g in groups:
            keep = tuple(a for a in g.attrs if a in wanted)
            result = np.multiply.outer(result, g.marginal(keep))
            order += keep
        result = result.transpose(np.argsort(order))
        self._products[attrs] = (stamps, result)
        return result

    def merge(self, attrs: tuple[int, ...]) -> None:
        """Join the groups holding ``attrs`` into one (outer product of their arrays)."""
        groups = self.groups_of(attrs)
        if len(groups) == 1:
            return
        joint, order = np.ones(()), []
        for g in groups:
            joint = np.multiply.outer(joint, g.probs)
            order += list(g.attrs)
        perm = np.argsort(order)
        self._install(_Group(tuple(sorted(order)), np.ascontiguousarray(joint.transpose(perm))))

    def reweight(self, attrs: tuple[int, ...], factor: AnyArray) -> None:
        """Multiply by ``factor`` (an array over ``attrs``) in one broadcast and renormalise.

        The groups holding ``attrs`` must already be merged.
        """
        factor = factor / float(np.sum(self.marginal(attrs) * factor))
        self.group_of[attrs[0]].reweight(attrs, factor)

    def to_dense(self) -> AnyArray:
        """The full joint array (small domains only: tests and the averaged output)."""
        return self.marginal(tuple(range(len(self.shape)))).copy()

    def sample(self, n: int, rng: RandomSource) -> AnyArray:
        """``n`` records (cell codes, shape (n, d)) drawn from the distribution.

        Each group is sampled systematically (cell counts within one of n·p) and the groups'
        rows are paired by independent random permutations. A cell index is split into its
        attributes' codes digit by digit, in place (row-major, as ``np.unravel_index``): one
        column at a time, not a copy per attribute (randhie1m, 10^6 rows, a group of 9
        attributes: 289 MB of temporaries before, benchmarks/mwem_peers.py).
        """
        codes = np.zeros((n, len(self.shape)), dtype=np.int64)
        for g in self.groups():
            cdf = np.cumsum(g.probs.ravel())
            points = (rng.uniform(size=1)[0] + np.arange(n)) / n * cdf[-1]
            cells = np.minimum(np.searchsorted(cdf, points, side="right"), cdf.size - 1)
            del points
            cells = cells[np.argsort(rng.uniform(size=n))]
            for a, k in reversed(list(zip(g.attrs, g.probs.shape, strict=True))):
                codes[:, a] = cells % k
                cells //= k
        return codes


def query_answer(query: Query, marginal: AnyArray) -> AnyArray:
    """The query's answer vector from the marginal on its attributes (length 1 for a box)."""
    if query.box is None:
        return marginal.ravel()
    return np.atleast_1d(marginal[box_slices(query)].sum())


def box_slices(query: Query) -> tuple[slice, ...]:
    """The box query's bin ranges as slices of a marginal (each range includes its end)."""
    assert query.box is not None, "only a box query has bin ranges"
    return tuple(slice(lo, hi + 1) for lo, hi in query.box)
