"""Hierarchical b-ary tree over a grid support, with least-squares (GLS) consistency.

In d dimensions the tree is the product of one b-ary tree per axis (a range tree): a node is a
product of one node per axis, so a box is a product of interval decompositions and costs
polylog noise. Each axis picks its branching factor by the Qardaji-Yang-Li rule. All nodes get
the same noise, so the least-squares estimate factorises over axes (Kronecker structure) and
answers any subset of grid cells, boxes and halfspaces alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

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
    unpack,
)

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


MAX_AXIS_CELLS = 8192


def qyl_branching(cells: int) -> tuple[int, int]:
    """Branching b and height h minimising (b-1)h^3 - 2(b+1)h^2/3 with h = ceil(log_b N)."""
    if cells <= 1:
        return 1, 0
    best: tuple[float, int, int] | None = None
    for b in range(2, cells + 1):
        h = max(1, math.ceil(math.log(cells) / math.log(b) - 1e-12))
        cost = (b - 1) * h**3 - 2 * (b + 1) * h**2 / 3
        if best is None or cost < best[0]:
            best = (cost, b, h)
    assert best is not None  # the loop runs at least once since cells >= 2
    return best[1], best[2]


def axis_tree(cells: int, branching: int, height: int) -> AnyArray:
    """0/1 matrix (nodes x cells) of levels 1..height of a b-ary tree over `cells` leaves."""
    if height == 0:
        return np.ones((1, cells))
    rows = []
    for level in range(1, height + 1):
        width = branching ** (height - level)
        for start in range(0, cells, width):
            row = np.zeros(cells)
            row[start : start + width] = 1.0
            rows.append(row)
    return np.array(rows)


@dataclass
class TreePlan:
    """Product b-ary tree with uniform noise on every node."""

    grid_shape: tuple[int, ...]
    branching: tuple[int, ...]
    heights: tuple[int, ...]
    noise: str
    scale: float
    name: str = "tree"

    def __post_init__(self) -> None:
        self.axes: list[AnyArray] = [
            axis_tree(g, b, h)
            for g, b, h in zip(self.grid_shape, self.branching, self.heights, strict=True)
        ]
        self.gram_inverse: list[AnyArray] = [np.linalg.inv(a.T @ a) for a in self.axes]
        self.whole_axes: list[AnyArray] = [a.astype(np.int64) for a in self.axes]  # exact counts
        self.cache: dict[Any, Any] = {}

    @classmethod
    def build(cls, grid_shape: Sequence[int] | None, target: PrivacyTarget) -> TreePlan:
        if grid_shape is None:
            raise MechanismError("the tree mechanism needs a grid support; use --grid")
        if max(grid_shape) > MAX_AXIS_CELLS:
            raise MechanismError(
                f"grid axis of {max(grid_shape)} cells is above "
                f"{MAX_AXIS_CELLS} for the tree; use a coarser grid"
            )
        shape = tuple(int(g) for g in grid_shape)
        bh = [qyl_branching(g) for g in shape]
        branching, heights = tuple(b for b, _ in bh), tuple(h for _, h in bh)
        depth = math.prod(max(h, 1) for h in heights)  # nodes containing each cell
        return cls(
            shape,
            branching,
            heights,
            target.noise,
            scale_for(target.noise, float(depth), target.loss_budget),
        )

    @property
    def n(self) -> int:
        return math.prod(self.grid_shape)

    def point_loss(self) -> AnyArray:
        loads = np.ones(())
        for a in self.axes:
            loads = np.multiply.outer(loads, a.sum(axis=0))
        return per_point_loss(self.noise, loads.ravel(), self.scale)

    def _apply(self, tensor: AnyArray, mats: Sequence[AnyArray], first_axis: int) -> AnyArray:
        for j, mat in enumerate(mats):
            tensor = np.moveaxis(
                np.tensordot(mat, tensor, axes=([1], [first_axis + j])), 0, first_axis + j
            )
        return tensor

    def measure(self, counts: AnyArray, rng: RandomSource) -> dict[str, Any]:
        exact = self._apply(counts.reshape(self.grid_shape).astype(np.int64), self.whole_axes, 0)
        return {"nodes": (exact + draw_noise(rng, self.noise, self.scale, exact.shape)).ravel()}

    def estimate_cells(self, noisy: dict[str, Any]) -> AnyArray:
        """Least-squares (consistent) estimate of every grid cell's count."""
        shape = tuple(len(a) for a in self.axes)
        y = np.asarray(noisy["nodes"], dtype=float).reshape(shape)
        return self._apply(
            y, [k @ a.T for k, a in zip(self.gram_inverse, self.axes, strict=True)], 0
        ).ravel()

    def predicted_variance(self, query_bits: AnyArray, block: int = 256) -> AnyArray:
        v = noise_variance(self.noise, self.scale)
        out = []
        for s in range(0, len(query_bits), block):
            w = unpack(query_bits[s : s + block], self.n).astype(float)
            wt = w.reshape((len(w), *self.grid_shape))
            kw = self._apply(wt, self.gram_inverse, 1)
            out.append((kw * wt).reshape(len(w), -1).sum(axis=1) * v)
        return np.concatenate(out) if out else np.zeros(0)

    def weight_ratio(self, query_bits: AnyArray, block: int = 256) -> AnyArray:
        """sum w^4 / (sum w^2)^2 of each answer's weights w on the noisy nodes (public).

        An answer is w·y with w = (kron of A_i K_i) q for the query's cells q, so its noise
        has excess kurtosis (this ratio) x (one draw's): the inverse of the effective number
        of noise terms averaged.
        """
        mats = [a @ k for a, k in zip(self.axes, self.gram_inverse, strict=True)]
        out = []
        for s in range(0, len(query_bits), block):
            q = unpack(query_bits[s : s + block], self.n).astype(float)
            w = self._apply(q.reshape((len(q), *self.grid_shape)), mats, 1).reshape(len(q), -1)
            s2, s4 = (w**2).sum(axis=1), (w**4).sum(axis=1)
            out.append(np.where(s2 > 0, s4 / np.where(s2 > 0, s2, 1.0) ** 2, 0.0))
        return np.concatenate(out) if out else np.zeros(0)

    def answer(
        self, noisy: dict[str, Any], query_bits: AnyArray, estimator: str = "gls"
    ) -> tuple[AnyArray, AnyArray]:
        cells = self.estimate_cells(noisy)
        answers = np.concatenate(
            [
                unpack(query_bits[s : s + 4096], self.n).astype(float) @ cells
                for s in range(0, len(query_bits), 4096)
            ]
        )
        variance = memo(
            self.cache, bits_key(query_bits), lambda: self.predicted_variance(query_bits)
        )
        return answers, variance

    def to_dict(self) -> dict[str, Any]:
        return {
            "grid": list(self.grid_shape),
            "branching": list(self.branching),
            "heights": list(self.heights),
            "noise": self.noise,
            "scale": self.scale,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], **_: Any) -> TreePlan:
        return cls(
            tuple(d["grid"]),
            tuple(d["branching"]),
            tuple(d["heights"]),
            d["noise"],
            float(d["scale"]),
        )
