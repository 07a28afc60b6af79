"""A default grid fine enough that rounding is small against the noise, from public inputs.

A finer grid moves a range's cut edges less (less rounding) but spreads the budget over more
cells (more noise). For each candidate size, `suggest_grid` plans the release `auto` would
make for 16 fixed boxes with edges off the grid and adds the noise's 95% half-width to the
rounding part of the interval if the n rows were spread evenly (`plans.range_rounding`); the
size with the smallest sum wins. It reads bounds, epsilon, delta, the relation and n only
(n must be public: replace-one neighbours), never the data.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from mechanisms.range_count.core import half_width, privacy_target
from mechanisms.range_count.inputs import grid_support, spread_points
from mechanisms.range_count.intervals import answer_kurtosis, answered_sets

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)  # finer: the tree's matrices grow as cells^2
SAMPLE_BOXES = 16


@lru_cache(maxsize=256)
def suggest_grid(
    bounds: tuple[tuple[float, float], ...],
    epsilon: float,
    delta: float,
    neighbouring: str,
    n: int,
    max_cells: int,
) -> int:
    """Cells per column minimising noise half-width + rounding for a typical off-grid box."""
    from mechanisms.plans import range_rounding
    from mechanisms.range_count.api import choose_plan

    d = len(bounds)
    target = privacy_target(epsilon=epsilon, delta=delta, neighbouring=neighbouring)
    lower = np.array([lo for lo, _ in bounds])
    span = np.array([hi - lo for lo, hi in bounds])
    corners = lower + spread_points(SAMPLE_BOXES, 2 * d).reshape(SAMPLE_BOXES, 2, d) * span
    boxes = [
        {"type": "box", "lo": c.min(axis=0).tolist(), "hi": c.max(axis=0).tolist()} for c in corners
    ]
    best: tuple[float, int] | None = None
    columns = [f"c{j}" for j in range(d)]
    for g in (s for s in SIZES if s**d <= max_cells):
        support = grid_support(columns, list(bounds), (g,) * d)
        bits = answered_sets(support, boxes)
        plan, predicted = choose_plan("auto", support, boxes, bits, target)
        sd = math.sqrt(predicted[plan.name])
        kurtosis = float(np.mean(answer_kurtosis(plan, bits)))
        noise = float(half_width(np.array(sd), np.array(kurtosis)))
        total = noise + range_rounding(support, boxes, n)["rounding_rows"]
        if best is None or total < best[0]:
            best = (total, g)
    return best[1] if best else SIZES[0]
