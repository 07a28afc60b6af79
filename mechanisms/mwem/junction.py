"""Junction trees of MWEM's model: how cliques are chosen, and sums over products of tables.

When a measured query spans blocks of the model whose joint table would be large, the model
keeps them as a junction tree of cliques instead (``distribution.Tree``): every measured
query inside one clique, each clique's table its marginal, the joint their product divided by
the separators' marginals. Multiplicative weights make the model proportional to the start
times one factor per measured query, a distribution that factorises over any junction tree
whose cliques hold the measured queries; so the tree is the same distribution as the whole
table, not an approximation. Here: the triangulation that picks the cliques, the tree that
joins them, and labelled sums of products (einsum over attribute numbers). Post-processing
only: no data, no draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mechanisms.arrays import AnyArray

Attrs = tuple[int, ...]
Table = tuple[Attrs, AnyArray]  # a table and its axes' attributes (any order)


def cliques_of(
    blocks: Sequence[Attrs], query: Attrs, shape: Sequence[int]
) -> tuple[list[Attrs], list[tuple[int, int]]]:
    """The cliques of a junction tree holding every block and ``query``, and its edges.

    The graph joins the attributes of each block and of the query; it is triangulated by
    greedy elimination (the vertex whose elimination adds the fewest edges, then the smallest
    clique in cells). A graph of cliques of junction trees plus one edge between two trees
    is already chordal, so a pair across blocks adds no edge. The edges are a maximum
    spanning tree of the cliques weighted by how many attributes they share (a junction tree
    of a chordal graph's maximal cliques).
    """
    adjacent: dict[int, set[int]] = {}
    for block in [*blocks, query]:
        for a in block:
            adjacent.setdefault(a, set()).update(b for b in block if b != a)
    found: list[Attrs] = []
    left = {a: set(neighbours) for a, neighbours in adjacent.items()}
    while left:
        vertex = min(left, key=lambda v: (_fill(left, v), _cells(left[v] | {v}, shape), v))
        neighbours = left.pop(vertex)
        found.append(tuple(sorted(neighbours | {vertex})))
        for a in neighbours:
            left[a].discard(vertex)
            left[a].update(b for b in neighbours if b != a)
    maximal = [c for c in dict.fromkeys(found) if not any(set(c) < set(o) for o in found)]
    return maximal, _spanning_tree(maximal)


def _fill(adjacent: dict[int, set[int]], vertex: int) -> int:
    """Edges that eliminating ``vertex`` adds between its neighbours."""
    neighbours = list(adjacent[vertex])
    return sum(
        1 for i, a in enumerate(neighbours) for b in neighbours[i + 1 :] if b not in adjacent[a]
    )


def _cells(attrs: set[int] | Attrs, shape: Sequence[int]) -> int:
    return math.prod(shape[a] for a in attrs)


def _spanning_tree(cliques: list[Attrs]) -> list[tuple[int, int]]:
    """Kruskal's maximum spanning tree on the number of shared attributes (ties: lower index)."""
    pairs = sorted(
        (
            (-len(set(cliques[i]) & set(cliques[j])), i, j)
            for i in range(len(cliques))
            for j in range(i + 1, len(cliques))
        ),
    )
    root = list(range(len(cliques)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    edges = []
    for _, i, j in pairs:
        if find(i) != find(j):
            root[find(i)] = find(j)
            edges.append((i, j))
    return edges


def neighbours_of(count: int, edges: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Each of ``count`` cliques' neighbours along the tree's ``edges``."""
    neighbours: list[list[int]] = [[] for _ in range(count)]
    for i, j in edges:
        neighbours[i].append(j)
        neighbours[j].append(i)
    return neighbours


def rooted(neighbours: Sequence[Sequence[int]], root: int) -> tuple[list[int | None], list[int]]:
    """Each clique's parent toward ``root`` (None at the root), and the cliques breadth-first."""
    parent: list[int | None] = [None] * len(neighbours)
    order, seen = [root], {root}
    for i in order:
        for j in neighbours[i]:
            if j not in seen:
                seen.add(j)
                parent[j] = i
                order.append(j)
    return parent, order


def largest_clique(blocks: Sequence[Attrs], query: Attrs, shape: Sequence[int]) -> int:
    """Cells of the largest clique ``cliques_of`` would make."""
    return max(_cells(c, shape) for c in cliques_of(blocks, query, shape)[0])


def sum_product(tables: Sequence[Table], keep: Attrs) -> AnyArray:
    """Σ over every attribute not in ``keep`` of the product of ``tables`` (axes in ``keep``)."""
    label = {a: i for i, a in enumerate(dict.fromkeys([*keep, *(a for t in tables for a in t[0])]))}
    operands: list[Any] = []
    for attrs, array in tables:
        operands += [array, [label[a] for a in attrs]]
    result: AnyArray = np.einsum(*operands, [label[a] for a in keep], optimize=True)
    return result


def divide(table: Table, by: Table) -> AnyArray:
    """``table`` divided by ``by`` (whose attributes are among the table's); 0 where ``by`` is."""
    attrs, array = table
    spread = np.transpose(by[1], [by[0].index(a) for a in attrs if a in by[0]]).reshape(
        [array.shape[i] if a in by[0] else 1 for i, a in enumerate(attrs)]
    )
    result: AnyArray = np.divide(array, spread, out=np.zeros_like(array), where=spread > 0)
    return result
