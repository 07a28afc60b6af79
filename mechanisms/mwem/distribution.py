"""MWEM's synthetic distribution: the model that multiplicative weights fits (never the data).

Kept factored (Hardt, Ligett & McSherry 2012, Sec. 4): independent blocks of attributes; two
blocks are joined only when a measured query spans both, into one dense float64 table of
probabilities while that has at most ``QUICK_CELLS`` cells, else into a junction tree of such
tables (cliques) that holds every measured query in one clique (``junction``; as private-PGM
keeps its graphical models). Both hold the same distribution: the start times one factor per
measured query. ``dense=True`` starts from one block over the whole domain. Here are the
representations, their marginals, the arithmetic of a reweighting, sampling, and a query's
answer from a marginal. Touches no data: it is post-processing of noisy measurements.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from mechanisms.arrays import AnyArray
from mechanisms.mwem.junction import (
    cliques_of,
    divide,
    largest_clique,
    neighbours_of,
    rooted,
    sum_product,
)
from mechanisms.workload import Query

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


INTERMEDIATE_CELLS = 1 << 16
# The largest block (float64 cells, 32 MB) kept as one whole table by default; ``join`` links
# larger ones as a junction tree of cliques (the same distribution, a fraction of the cost).
QUICK_CELLS = 1 << 22
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


def marginals_of(
    attrs: tuple[int, ...], probs: AnyArray, wanted: list[tuple[int, ...]]
) -> list[AnyArray]:
    """The marginals of a table over sorted ``attrs`` on each sorted set in ``wanted``.

    Each is summed from the smallest one found before it (``_Group.marginal``).
    """
    group = _Group(attrs, probs)
    for keep in sorted(wanted, key=len, reverse=True):  # the larger first, to sum from
        group.marginal(keep)
    return [group.marginal(keep) for keep in wanted]


def _spread(factor: AnyArray, keep: tuple[int, ...], attrs: tuple[int, ...]) -> AnyArray:
    """``factor`` (axes ``keep``) reshaped to broadcast against an array with axes ``attrs``."""
    return factor.reshape([factor.shape[keep.index(a)] if a in keep else 1 for a in attrs])


def _cells_of(group: _Group) -> Callable[[tuple[int, ...]], int]:
    return lambda attrs: group.partials[attrs].size


class Tree:
    """A block of the model: cliques (each a ``_Group`` holding its marginal) joined by a tree.

    A junction tree (``junction``): every attribute's cliques are connected, and the joint is
    the product of the cliques' marginals divided by the separators' (the attributes two
    neighbouring cliques share). One clique is the whole table of its attributes.
    """

    def __init__(self, cliques: list[_Group], edges: list[tuple[int, int]], shape: tuple[int, ...]):
        self.cliques = cliques
        self.neighbours = neighbours_of(len(cliques), edges)
        self.attrs = tuple(sorted({a for c in cliques for a in c.attrs}))
        self.cells = math.prod(shape[a] for a in self.attrs)  # of the whole table
        self.stamp = next(_stamps)  # changes with every reweighting
        self.structure = next(_stamps)  # names these cliques and edges (never changes)

    def home(self, attrs: tuple[int, ...]) -> _Group | None:
        """The smallest clique holding ``attrs``, if one does."""
        holding = [c for c in self.cliques if set(attrs) <= set(c.attrs)]
        return min(holding, key=lambda c: c.size) if holding else None

    def marginal(self, attrs: tuple[int, ...]) -> AnyArray:
        """Marginal on sorted ``attrs``: of one clique, or summed along the tree between them.

        Rooted at a clique holding ``attrs[0]``, the tree is cut to the paths from the root to
        one clique per attribute (the nearest); each clique of that subtree passes its parent
        the joint of their separator and the wanted attributes below it, which the parent
        divides by the separator's marginal and multiplies in (exact on a junction tree).
        """
        clique = self.home(attrs)
        if clique is not None:
            return clique.marginal(attrs)
        parent, order = rooted(
            self.neighbours, next(i for i, c in enumerate(self.cliques) if attrs[0] in c.attrs)
        )
        used: set[int] = set()
        for a in attrs:
            node: int | None = next(i for i in order if a in self.cliques[i].attrs)
            while node is not None and node not in used:
                used.add(node)
                node = parent[node]
        wanted = set(attrs)
        messages: dict[int, list[tuple[tuple[int, ...], AnyArray]]] = {i: [] for i in used}
        for i in reversed([i for i in order if i in used]):
            clique, up = self.cliques[i], parent[i]
            below = {a for t in messages[i] for a in t[0]}
            separator = self._separator(i, up) if up is not None else set()
            keep = tuple(sorted(wanted & (set(clique.attrs) | below) | separator))
            own = tuple(a for a in clique.attrs if a in set(keep) | below)
            message = sum_product([(own, clique.marginal(own)), *messages[i]], keep)
            if up is None:
                return message
            held = tuple(sorted(separator))
            messages[up].append((keep, divide((keep, message), (held, clique.marginal(held)))))
        raise AssertionError("the root returns the marginal")

    def _separator(self, i: int, j: int) -> set[int]:
        return set(self.cliques[i].attrs) & set(self.cliques[j].attrs)

    def reweight(self, attrs: tuple[int, ...], factor: AnyArray) -> None:
        """Multiply the joint by ``factor`` over ``attrs`` (in one clique; already normalised).

        The clique holding them is multiplied, then each neighbour by the ratio of the new to
        the old marginal of their separator, outward along the tree: the clique marginals of
        the reweighted joint (exact on a junction tree).
        """
        clique = self.home(attrs)
        assert clique is not None, "a reweighted query lies inside one clique"
        self.stamp = next(_stamps)
        clique.reweight(attrs, factor)
        start = self.cliques.index(clique)
        parent, order = rooted(self.neighbours, start)
        for j in order[1:]:
            up = parent[j]
            assert up is not None
            separator = tuple(sorted(self._separator(j, up)))
            if not separator:
                continue
            before = self.cliques[j].marginal(separator)
            after = self.cliques[up].marginal(separator)
            ratio = np.divide(after, before, out=np.zeros_like(after), where=before > 0)
            self.cliques[j].reweight(separator, ratio)

    def joint(self) -> AnyArray:
        """The whole table of the block's attributes."""
        if len(self.cliques) == 1:
            return self.cliques[0].probs
        return self.marginal(self.attrs)

    def sample(self, codes: AnyArray, rng: RandomSource) -> None:
        """Draw the block's columns of ``codes``: the first clique, then each given its parent.

        The first clique is sampled systematically (``_sample_cells``); each further clique's
        other attributes are drawn from its table given the separator's codes already drawn,
        systematically within each separator value (``_sample_given``; forward sampling along
        the tree).
        """
        n = len(codes)
        first = self.cliques[0]
        _write_codes(codes, first.attrs, first.probs.shape, _sample_cells(first.probs, n, rng))
        parent, order = rooted(self.neighbours, 0)
        for j in order[1:]:
            up = parent[j]
            assert up is not None
            _sample_given(codes, self.cliques[j], tuple(sorted(self._separator(j, up))), rng)


def _sample_cells(probs: AnyArray, n: int, rng: RandomSource) -> AnyArray:
    """``n`` cells of ``probs`` systematically (counts within one of n·p), in random order."""
    cdf = np.cumsum(probs.ravel())
    points = (rng.uniform(size=1)[0] + np.arange(n)) / n * cdf[-1]
    cells = np.minimum(np.searchsorted(cdf, points, side="right"), cdf.size - 1)
    del points
    shuffled: AnyArray = cells[np.argsort(rng.uniform(size=n))]
    return shuffled


def _write_codes(
    codes: AnyArray, attrs: tuple[int, ...], dims: tuple[int, ...], cells: AnyArray
) -> None:
    """Split cell indices into their attributes' codes digit by digit, in place (row-major).

    One column at a time, not a copy per attribute (randhie1m, 10^6 rows, a group of 9
    attributes: 289 MB of temporaries before, benchmarks/mwem_peers.py).
    """
    for a, k in reversed(list(zip(attrs, dims, strict=True))):
        codes[:, a] = cells % k
        cells //= k


def _sample_given(
    codes: AnyArray, clique: _Group, separator: tuple[int, ...], rng: RandomSource
) -> None:
    """Draw the clique's attributes outside ``separator`` given the separator's codes.

    Systematically within each separator value s (as ``_sample_cells`` does for the first
    clique): its m records, in random order, get the points (u_s + 0..m-1)/m of the
    conditional table's cumulative sum, so each cell's count is within one of m·p(cell | s).
    Independent draws instead raised the pair TVD of the 2^24-cell chain of
    tests/mechanisms/test_mwem_junction.py by 12% over the whole table's systematic sample.
    The conditional tables are laid end to end, row s shifted by s, so one search draws
    every record's cell from its own row.
    """
    rest = tuple(a for a in clique.attrs if a not in separator)
    if not rest:
        return
    probs = clique.probs
    dims = [probs.shape[clique.attrs.index(a)] for a in separator]
    # one copy of the clique, turned into the shifted conditional cumulative sums in place
    # (randhie1m, a clique of 1.8·10^7 cells: 600 MB of temporaries before, 144 MB now)
    moved = probs.transpose([clique.attrs.index(a) for a in (*separator, *rest)])
    copied: AnyArray = np.empty(moved.shape)
    np.copyto(copied, moved)  # a reshape of the transposed view would copy it once more
    cdf = copied.reshape(math.prod(dims), -1)
    np.cumsum(cdf, axis=1, out=cdf)
    totals = cdf[:, -1].copy()
    empty = totals <= 0
    cdf /= np.where(empty, 1, totals)[:, None]
    width = cdf.shape[1]
    cdf[empty] = np.linspace(1 / width, 1, width)
    cdf += np.arange(cdf.shape[0])[:, None]
    rows = np.ravel_multi_index(tuple(codes[:, a] for a in separator), dims)
    order = np.lexsort((rng.uniform(size=len(rows)), rows))  # by s, at random within s
    counts = np.bincount(rows, minlength=len(cdf))
    starts = np.cumsum(counts) - counts
    by_row = rows[order]
    rank = np.arange(len(rows)) - starts[by_row]
    points = by_row + (rng.uniform(size=len(cdf))[by_row] + rank) / counts[by_row]
    drawn = np.searchsorted(cdf.ravel(), points, side="right")
    cells = np.empty_like(rows)
    cells[order] = np.clip(drawn - by_row * width, 0, width - 1)
    _write_codes(codes, rest, tuple(probs.shape[clique.attrs.index(a)] for a in rest), cells)


class FactoredDistribution:
    """A product of independent blocks of attributes, each a junction tree of dense tables.

    A block is one dense table (one clique) unless ``join`` linked blocks whose whole table
    would exceed its ``whole_cells``; then it is a junction tree of smaller cliques
    (``Tree``), the same distribution (``junction``).
    """

    def __init__(self, shape: tuple[int, ...], groups: list[tuple[tuple[int, ...], AnyArray]]):
        self.shape = tuple(shape)
        self.tree_of: list[Tree] = [None] * len(shape)  # type: ignore[list-item]
        for attrs, probs in groups:
            self._install(Tree([_Group(attrs, probs / probs.sum())], [], self.shape))
        self._products: dict[tuple[int, ...], tuple[tuple[int, ...], AnyArray]] = {}
        self._clique_cells: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}

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
        """The cliques of every block, in attribute order."""
        return [c for t in self.trees() for c in t.cliques]

    def trees(self) -> list[Tree]:
        """The distinct blocks, in attribute order."""
        return list({id(t): t for t in self.tree_of}.values())

    def _install(self, tree: Tree) -> None:
        for a in tree.attrs:
            self.tree_of[a] = tree
        self._clique_cells = {}

    def trees_of(self, attrs: Any) -> list[Tree]:
        """The distinct blocks holding ``attrs``."""
        return list({id(self.tree_of[a]): self.tree_of[a] for a in attrs}.values())

    def merged_size(self, attrs: tuple[int, ...]) -> int:
        """Cells of the whole table of the blocks holding ``attrs``."""
        return math.prod(t.cells for t in self.trees_of(attrs))

    def block_cells(self, attrs: tuple[int, ...]) -> int:
        """Cells of the whole table of the block holding ``attrs`` (one block)."""
        return self.tree_of[attrs[0]].cells

    def clique_cells(self, attrs: tuple[int, ...], whole_cells: int | None) -> int:
        """Cells of the largest table that ``join(attrs, whole_cells)`` would need."""
        trees = self.trees_of(attrs)
        if len(trees) == 1 and trees[0].home(attrs) is not None:
            return max(c.size for c in trees[0].cliques)
        merged = self.merged_size(attrs)
        if whole_cells is None or merged <= whole_cells:
            return merged
        largest = max(c.size for t in trees for c in t.cliques)
        if all(t.home(tuple(a for a in attrs if a in t.attrs)) for t in trees):
            # glued to each block inside one of its cliques: the graph stays chordal, and its
            # cliques are the old ones and the query's (``junction.cliques_of`` adds no edge)
            return max(largest, math.prod(self.shape[a] for a in attrs))
        key = (attrs, tuple(t.structure for t in trees))
        if key not in self._clique_cells:
            blocks = [c.attrs for t in trees for c in t.cliques]
            self._clique_cells[key] = largest_clique(blocks, attrs, self.shape)
        return self._clique_cells[key]

    def marginal(self, attrs: tuple[int, ...]) -> AnyArray:
        """Probabilities of the marginal on sorted ``attrs`` (cached until a block changes)."""
        trees = self.trees_of(attrs)
        if len(trees) == 1:
            return trees[0].marginal(attrs)
        stamps = tuple(t.stamp for t in trees)
        cached = self._products.get(attrs)
        if cached is not None and cached[0] == stamps:
            return cached[1]
        wanted = set(attrs)
        result, order = np.ones(()), list[int]()
        for t in trees:
            keep = tuple(a for a in t.attrs if a in wanted)
            result = np.multiply.outer(result, t.marginal(keep))
            order += keep
        result = result.transpose(np.argsort(order))
        self._products[attrs] = (stamps, result)
        return result

    def join(self, attrs: tuple[int, ...], whole_cells: int | None = None) -> None:
        """Put ``attrs`` inside one clique, so that a query on them can be fitted.

        The blocks holding them become one: their whole table (outer product) when it has at
        most ``whole_cells`` cells (None: always), else a junction tree whose cliques hold the
        old cliques and ``attrs`` (``junction.cliques_of``), each clique's table the current
        model's marginal on it. Either way the distribution is unchanged, and so is every later
        update: the model factorises over the new tree (``junction``).
        """
        trees = self.trees_of(attrs)
        if len(trees) == 1 and trees[0].home(attrs) is not None:
            return
        if whole_cells is None or self.merged_size(attrs) <= whole_cells:
            joint, order = np.ones(()), []
            for t in trees:
                joint = np.multiply.outer(joint, t.joint())
                order += list(t.attrs)
            perm = np.argsort(order)
            group = _Group(tuple(sorted(order)), np.ascontiguousarray(joint.transpose(perm)))
            self._install(Tree([group], [], self.shape))
            return
        old = {c.attrs: c for t in trees for c in t.cliques}
        cliques, edges = cliques_of(list(old), attrs, self.shape)
        groups = [
            old[c] if c in old else _Group(c, np.ascontiguousarray(self.marginal(c)))
            for c in cliques
        ]
        self._install(Tree(groups, edges, self.shape))

    def replace_block(
        self, cliques: list[tuple[tuple[int, ...], AnyArray]], edges: list[tuple[int, int]]
    ) -> None:
        """Make the block of these cliques' attributes this junction tree.

        Each clique is its attributes (sorted) with its marginal; ``edges`` join them (none
        for one clique).
        """
        groups = [_Group(attrs, np.ascontiguousarray(probs)) for attrs, probs in cliques]
        self._install(Tree(groups, edges, self.shape))

    def reweight(self, attrs: tuple[int, ...], factor: AnyArray) -> None:
        """Multiply by ``factor`` (an array over ``attrs``) in one broadcast and renormalise.

        ``attrs`` must already lie in one clique (``join``).
        """
        factor = factor / float(np.sum(self.marginal(attrs) * factor))
        self.tree_of[attrs[0]].reweight(attrs, factor)

    def to_dense(self) -> AnyArray:
        """The full joint array (small domains only: tests and the averaged output)."""
        return self.marginal(tuple(range(len(self.shape)))).copy()

    def sample(self, n: int, rng: RandomSource) -> AnyArray:
        """``n`` records (cell codes, shape (n, d)) drawn from the distribution.

        Each block is sampled on its own (``Tree.sample``) and the blocks' rows are paired
        by independent random permutations.
        """
        codes = np.zeros((n, len(self.shape)), dtype=np.int64)
        for t in self.trees():
            t.sample(codes, rng)
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
