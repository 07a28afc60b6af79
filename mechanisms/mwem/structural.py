"""The "(missing)" and "(other)" cells of MWEM's synthetic data: kept only where measured.

The schema gives every column a "(missing)" cell and every categorical column an "(other)"
cell whether or not the data has such values (the domain never depends on the data). On a
complete column the cell's true count is 0, but the model MWEM fits from noisy measurements
gives it the mass of their noise: at ε = .1 up to 15% of a census sample's synthetic rows had
a blank (issue 44). The rule here, post-processing of the published measurements only:

    A structural cell (a "(missing)" or "(other)" cell) gets zero mass in the synthetic data
    unless its noisy count is distinguishable from zero: above the one-sided (1 - ZERO_LEVEL)
    quantile of the count's noise when the true count is 0.

The count is read from the published measurement that holds it with the fewest noisy cells: a
1-way marginal (the start of every plan with rounds or none) gives it as one noisy count, whose
discrete Laplace noise has an exact quantile (`accuracy.zero_threshold`); the full
table (the `measures_joint` plan) gives it as the sum of the m cells of its slice, whose noise
quantile is taken from the normal approximation of that sum (m independent counts of variance
2p/(1-p)², p = exp(-1/scale)). Everything else in the model is left as fitted, and the rest of
that column's mass is scaled up to make up for it. On a complete column the cell survives with
probability at most ZERO_LEVEL (per cell); a column with real missing values keeps its blanks
wherever the noisy count tells them from zero. Privacy: none spent; the decision is a function
of the noisy answers in measurements.json and of public scales.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mechanisms.accuracy import ZERO_LEVEL, told_from_zero
from mechanisms.arrays import AnyArray
from mechanisms.schema import MISSING_LABEL, OTHER_LABEL

if TYPE_CHECKING:
    from mechanisms.mwem.distribution import FactoredDistribution
    from mechanisms.schema import Schema

STRUCTURAL_LABELS = (MISSING_LABEL, OTHER_LABEL)


def structural_cells(schema: Schema, columns: list[str]) -> dict[int, list[int]]:
    """Positions of the "(missing)" and "(other)" cells along each column that has them."""
    cells = {}
    for a, name in enumerate(columns):
        found = [
            i for i, label in enumerate(schema.axis_labels(name)) if label in STRUCTURAL_LABELS
        ]
        if found:
            cells[a] = found
    return cells


def unsupported_slices(
    noisy: AnyArray, axis: int, found: list[int], scale: float, level: float = ZERO_LEVEL
) -> list[int]:
    """The cells of `found` along `axis` of a noisy table whose slice sum is not told from 0.

    Each slice sums noisy.size / noisy.shape[axis] counts, each with discrete Laplace noise of
    `scale`; the rule is `accuracy.told_from_zero` on that sum (a complete column's cell
    survives in at most ZERO_LEVEL of releases).
    """
    terms = noisy.size // noisy.shape[axis]
    return [
        c
        for c in found
        if not told_from_zero(float(np.take(noisy, c, axis=axis).sum()), scale, terms, level)
    ]


def unsupported_cells(
    measurements: list[dict[str, Any]],
    shape: tuple[int, ...],
    cells: dict[int, list[int]],
    level: float = ZERO_LEVEL,
) -> list[tuple[int, int]]:
    """The structural (column, cell) pairs whose noisy count is not told from zero.

    Each is judged on the marginal measurement of the column with the fewest noisy cells in
    the cell's slice (a 1-way marginal when there is one). A column no marginal measured keeps
    its model as fitted.
    """
    out = []
    for a, found in cells.items():
        held = [m for m in measurements if m["query"].box is None and a in m["query"].attrs]
        if not held:
            continue
        best = min(held, key=lambda m: (len(m["noisy_answer"]), m["noise_scale"]))
        attrs = best["query"].attrs
        noisy = np.asarray(best["noisy_answer"], dtype=float).reshape([shape[b] for b in attrs])
        zero = unsupported_slices(noisy, attrs.index(a), found, best["noise_scale"], level)
        out += [(a, c) for c in zero]
    return out


def zero_cells(model: FactoredDistribution, cells: list[tuple[int, int]]) -> None:
    """Give each (column, cell) zero mass; the rest of the column's mass scales up to 1."""
    for a, cell in cells:
        factor = np.ones(model.shape[a])
        factor[cell] = 0.0
        if float(np.sum(model.marginal((a,)) * factor)) > 0:
            model.reweight((a,), factor)


def rule_text(level: float = ZERO_LEVEL) -> str:
    """The rule as the manifest states it."""
    return (
        'a "(missing)" or "(other)" cell gets zero mass in the synthetic data unless its '
        "noisy count (from the published marginal holding it with the fewest noisy cells) is "
        f"above the one-sided {1 - level:.1%} quantile of its noise at a true count of 0"
    )
