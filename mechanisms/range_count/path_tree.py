"""The low-crossing path + dyadic tree baseline (docs/range-count.md section 2.5).

Planning reads only the public support points: they are ordered along a Hilbert curve over their
bounding box (in 1-D, sorted), and a binary tree is laid over the path positions 0..n-1. Level l
(0 = root, H = leaves, H = ceil(log2 n)) has nodes of 2^(H-l) consecutive positions, the last one
cut at n, so every point lies in exactly h = H + 1 nodes. Release: every node's count plus
integer noise of one scale. A range restricted to the support is a union of runs of consecutive
path positions; its answer is post-processing of the noisy nodes:
  chain: the sum of the canonical dyadic nodes of each run (at most 2 log2 n per run); variance
         = (number of nodes) x the node variance, exactly.
  gls:   Hay-style consistency, i.e. least squares over the tree (all nodes have the same noise,
         so GLS = OLS); x_hat = (B'B)^-1 B'y, computed level by level with Sherman-Morrison in
         O(n h); variance = node variance x w'(B'B)^-1 w, exactly. Never larger than the chain's.

Privacy: unit one record (one support point's count changes by one); each point is in h nodes,
so the release has L2 sensitivity sqrt(h) (rho-zCDP with discrete Gaussian noise) or L1
sensitivity h (pure epsilon-DP with discrete Laplace noise); replace-one neighbours double it,
through PrivacyTarget.loss_budget as in the other plans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse

from mechanisms.arrays import AnyArray
from mechanisms.errors import MechanismError
from mechanisms.range_count.core import (
    PrivacyTarget,
    bits_key,
    draw_noise,
    memo,
    noise_variance,
    per_point_loss,
    scale_for,
)

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


_BLOCK_CELLS = 1 << 22  # queries x path positions expanded at once (32 MB of floats)


# ---------------------------------------------------------------- the path (public)


def hilbert_keys(cells: AnyArray, bits: int) -> AnyArray:
    """Position along a d-dimensional Hilbert curve of integer cells (N, d) in [0, 2^bits).

    Skilling's transpose method (AIP Conf. Proc. 707, 2004): undo the curve's rotations and
    reflections from the top bit down, Gray-encode, then interleave the bits (axis 0 first).
    """
    x = [cells[:, i].astype(np.uint64) for i in range(cells.shape[1])]
    dim = len(x)
    q = 1 << (bits - 1)
    while q > 1:
        p = np.uint64(q - 1)
        for i in range(dim):
            high = (x[i] & np.uint64(q)) != 0
            x[0] = np.where(high, x[0] ^ p, x[0])  # invert the low bits of axis 0
            swap = np.where(high, np.uint64(0), (x[0] ^ x[i]) & p)  # exchange them with axis i
            x[0], x[i] = x[0] ^ swap, x[i] ^ swap
        q >>= 1
    for i in range(1, dim):
        x[i] ^= x[i - 1]
    flip = np.zeros_like(x[0])
    q = 1 << (bits - 1)
    while q > 1:
        flip = np.where((x[dim - 1] & np.uint64(q)) != 0, flip ^ np.uint64(q - 1), flip)
        q >>= 1
    x = [xi ^ flip for xi in x]
    key = np.zeros_like(x[0])
    for b in range(bits - 1, -1, -1):
        for i in range(dim):
            key = (key << np.uint64(1)) | ((x[i] >> np.uint64(b)) & np.uint64(1))
    return key


def path_order(points: AnyArray) -> AnyArray:
    """Support indices in Hilbert-curve order over the points' bounding box (1-D: sorted).

    Public: uses the support coordinates only. Ties (points in one curve cell) keep index order.
    """
    points = np.asarray(points, dtype=float)
    if points.shape[1] == 1:
        return np.argsort(points[:, 0], kind="stable")
    bits = 63 // points.shape[1]
    lo, hi = points.min(axis=0), points.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    top = float(2**bits - 1)
    cells = np.clip(np.floor((points - lo) / span * top), 0, top).astype(np.uint64)
    return np.argsort(hilbert_keys(cells, bits), kind="stable")


# ---------------------------------------------------------------- the tree over the path


def tree_height(n: int) -> int:
    """H = ceil(log2 n): levels 0..H, so every point lies in H + 1 nodes."""
    return max(n - 1, 0).bit_length()


def level_sizes(n: int) -> list[int]:
    """Number of nodes at each level 0..H (the last node of a level is cut at position n)."""
    height = tree_height(n)
    return [-(-n // 2 ** (height - level)) for level in range(height + 1)]


@dataclass
class PathTreePlan:
    """A binary tree over a Hilbert path through the support, uniform noise on every node."""

    order: AnyArray  # support index at each path position
    noise: str
    scale: float
    name: str = "path_tree"
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, points: AnyArray, target: PrivacyTarget) -> PathTreePlan:
        """Plan from the public support points and the budget: h = H + 1 nodes per point."""
        points = np.asarray(points, dtype=float)
        if points.ndim != 2 or not 1 <= points.shape[1] <= 3 or len(points) == 0:
            raise MechanismError(
                f"path_tree needs 1 to 3 coordinates per support point, got "
                f"an array of shape {points.shape}"
            )
        depth = float(tree_height(len(points)) + 1)
        return cls(
            path_order(points), target.noise, scale_for(target.noise, depth, target.loss_budget)
        )

    @property
    def n(self) -> int:
        """Number of support points."""
        return len(self.order)

    @property
    def block(self) -> int:
        """Queries per block when query rows are expanded over the (padded) path."""
        return max(1, _BLOCK_CELLS >> self.height)

    @property
    def height(self) -> int:
        """H: the leaves are level H."""
        return tree_height(self.n)

    def node_variance(self) -> float:
        """Exact variance of one released node (public)."""
        return noise_variance(self.noise, self.scale)

    def point_loss(self) -> AnyArray:
        """Per-point loss: every point is in height + 1 released nodes."""
        return per_point_loss(self.noise, np.full(self.n, self.height + 1.0), self.scale)

    # -- release ----------------------------------------------------------
    def measure(self, counts: AnyArray, rng: RandomSource) -> dict[str, Any]:
        """Noisy count of every node, level by level from the root."""
        exact = np.concatenate(self._level_sums(np.asarray(counts, dtype=np.int64)[self.order]))
        return {"nodes": exact + draw_noise(rng, self.noise, self.scale, len(exact))}

    def _level_sums(self, path_values: AnyArray) -> list[AnyArray]:
        padded = self._pad(path_values)
        sizes = level_sizes(self.n)
        return [
            padded.reshape(2**level, -1).sum(axis=1)[:count] for level, count in enumerate(sizes)
        ]

    def _pad(self, path_values: AnyArray) -> AnyArray:
        out = np.zeros((2**self.height, *path_values.shape[1:]), dtype=path_values.dtype)
        out[: self.n] = path_values
        return out

    # -- answers ----------------------------------------------------------
    def answer(
        self, noisy: dict[str, Any], query_bits: AnyArray, estimator: str = "chain"
    ) -> tuple[AnyArray, AnyArray]:
        """(answers, exact predicted variances) of queries given as packed rows over the support."""
        y = np.asarray(noisy["nodes"], dtype=float)
        if estimator == "chain":
            total, nodes = self._chain(y, query_bits)
            return total, nodes * self.node_variance()
        estimate = self._estimate_points(y)
        answers = np.concatenate(
            [
                self._path_rows(query_bits[s : s + self.block]) @ estimate
                for s in range(0, len(query_bits), self.block)
            ]
            or [np.zeros(0)]
        )
        return answers, self.predicted_variance(query_bits, estimator)

    def predicted_variance(self, query_bits: AnyArray, estimator: str = "chain") -> AnyArray:
        """Exact variance of each answer under the estimator; public and data-independent.

        The default is the chain's, as for mn12, so `auto` compares the two decompositions on
        the same footing (each one's GLS variance is smaller still).
        """
        if estimator == "chain":
            return (
                self._chain(np.zeros(sum(level_sizes(self.n))), query_bits)[1]
                * self.node_variance()
            )
        variance: AnyArray = memo(
            self.cache,
            ("gls", bits_key(query_bits)),
            lambda: self._gls_quadratic(query_bits) * self.node_variance(),
        )
        return variance

    def _path_rows(self, query_bits: AnyArray) -> AnyArray:
        """Dense 0/1 rows (queries x n) with columns in path order."""
        return np.unpackbits(query_bits, axis=1, count=self.n)[:, self.order]

    def _chain(self, y: AnyArray, query_bits: AnyArray) -> tuple[AnyArray, AnyArray]:
        """Sum of the canonical nodes of every run of every query, and how many nodes that is.

        Small workloads keep their query-by-node matrices, so repeated releases reuse them.
        """
        blocks = range(0, len(query_bits), self.block)
        build = (self._canonical_nodes(query_bits[s : s + self.block]) for s in blocks)
        if query_bits.size * 8 <= _BLOCK_CELLS:
            build = memo(self.cache, ("chain", bits_key(query_bits)), lambda: list(build))
        parts = [(nodes @ y, nodes @ np.ones(len(y))) for nodes in build]
        if not parts:
            return np.zeros(0), np.zeros(0)
        return np.concatenate([a for a, _ in parts]), np.concatenate([c for _, c in parts])

    def _canonical_nodes(self, query_bits: AnyArray) -> scipy.sparse.csr_matrix:
        """0/1 matrix (queries x released nodes): the canonical dyadic nodes of each run.

        A run [start, stop) reaching the last point is extended to 2^H (the cut nodes cover
        it exactly); nodes past position n hold no point, are not released and are skipped.
        """
        rows = self._path_rows(query_bits).astype(np.int8)
        edges = np.diff(rows, axis=1, prepend=0, append=0)
        query, lo = np.nonzero(edges == 1)
        _, hi = np.nonzero(edges == -1)  # row-major order: starts and stops pair up
        hi = np.where(hi == self.n, 2**self.height, hi)
        sizes = level_sizes(self.n)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        picked_query: list[AnyArray] = []
        picked_node: list[AnyArray] = []
        for level in range(self.height, -1, -1):
            left = (lo < hi) & (lo % 2 == 1)  # an odd left end is a canonical node
            right = (lo + left < hi) & (hi % 2 == 1)  # so is the node before an odd right end
            for take, node in ((left, lo), (right, hi - 1)):
                take = take & (node < sizes[level])
                picked_query.append(query[take])
                picked_node.append(offsets[level] + node[take])
            lo, hi = (lo + left) >> 1, hi >> 1
        query_index, node_index = np.concatenate(picked_query), np.concatenate(picked_node)
        return scipy.sparse.csr_matrix(
            (np.ones(len(query_index)), (query_index, node_index)),
            shape=(len(rows), offsets[-1]),
        )

    def _estimate_points(self, y: AnyArray) -> AnyArray:
        """Least-squares estimate of every point's count, in path order."""
        sizes = level_sizes(self.n)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        projected = np.zeros(2**self.height)
        for level, count in enumerate(sizes):
            width = 2 ** (self.height - level)
            nodes = np.zeros(2**level)
            nodes[:count] = y[offsets[level] : offsets[level] + count]
            projected += np.repeat(nodes, width)
        projected[self.n :] = 0.0  # padding holds no point
        return self._solve(projected[:, None])[: self.n, 0]

    def _gls_quadratic(self, query_bits: AnyArray) -> AnyArray:
        """w'(B'B)^-1 w for every query w."""
        out = []
        for s in range(0, len(query_bits), self.block):
            w = self._pad(self._path_rows(query_bits[s : s + self.block]).T.astype(float))
            out.append((w * self._solve(w)).sum(axis=0))
        return np.concatenate(out) if out else np.zeros(0)

    def _solve(self, rhs: AnyArray) -> AnyArray:
        """(B'B)^-1 rhs for padded columns rhs (2^H x k), bottom-up by Sherman-Morrison.

        Below a node v, B'B is the block diagonal of its children's plus the all-ones block
        J_v on v's points, so (A + 1 1')^-1 r = A^-1 r - u (1' A^-1 r) / (1 + 1'u), u = A^-1 1.
        Padding positions stay zero throughout.
        """
        z = rhs.copy()
        u = np.zeros(len(z))
        u[: self.n] = 1.0  # leaves: B'B = I on the points
        for level in range(self.height - 1, -1, -1):
            nodes = 2**level
            zs = z.reshape(nodes, -1, z.shape[1])
            us = u.reshape(nodes, -1)
            shrink = 1.0 / (1.0 + us.sum(axis=1))
            zs -= us[:, :, None] * (zs.sum(axis=1) * shrink[:, None])[:, None, :]
            u = (us * shrink[:, None]).ravel()
        return z

    # -- serialisation ----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Public plan: the path order and the noise scale."""
        return {"n": self.n, "order": self.order.tolist(), "noise": self.noise, "scale": self.scale}

    @classmethod
    def from_dict(cls, d: dict[str, Any], **_: Any) -> PathTreePlan:
        """The plan saved by `to_dict`."""
        order = np.asarray(d["order"], dtype=np.int64)
        if len(order) != int(d["n"]) or sorted(order.tolist()) != list(range(len(order))):
            raise MechanismError(
                "structure is damaged (path_tree order is not a permutation of the support points)"
            )
        return cls(order, d["noise"], float(d["scale"]))
