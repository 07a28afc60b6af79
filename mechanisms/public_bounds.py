"""Bounds and categories for a schema, estimated with differential privacy ("estimate for me").

A custodian who has no code book can spend a small share of the budget on these instead of
reading the data. Both functions are differentially private for one row (the unit of every
release) under the dataset's neighbouring relation, and take their noise from the injected
random source (OpenDP's samplers by default, `mechanisms.noise`).

- `estimate_bounds`: a noisy histogram over a fixed, public grid of round numbers spanning
  orders of magnitude (..., -10, -5, -2, -1, 0, 1, 2, 5, 10, 20, 50, ...); the bounds are the
  outer edges of the cells whose noisy count clears a threshold. Pure epsilon-DP.
- `discover_categories`: the distinct values whose noisy count clears a threshold set from
  delta (the domain is unknown, so a value held by one row could otherwise be revealed).
  (epsilon, delta)-DP; it needs delta > 0.
- `estimate_column`: either of them for one column of a table, at the table's unit of privacy:
  one row, or (with a person column) one person, bounded to k rows exactly as a release is.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mechanisms import persons
from mechanisms.accounting import DEFAULT_NEIGHBOURING, check_delta, check_epsilon
from mechanisms.catalogue import UNIT as ROW_UNIT
from mechanisms.errors import MechanismError
from mechanisms.histogram import count_sensitivity
from mechanisms.noise import RandomSource, check_count_noise, resolve_rng

MANTISSAS = (1, 2, 5)
DECADES = range(-3, 13)  # 0.001 ... 5e12
FALSE_CELL_RATE = 0.05  # chance that any empty grid cell clears the threshold, at most
MAX_DISCOVERED = 200


def _grid() -> np.ndarray:
    positive = [m * 10.0**k for k in DECADES for m in MANTISSAS]
    return np.array(sorted([-p for p in positive] + [0.0] + positive))


GRID = _grid()


def bounds_grid() -> np.ndarray:
    """The public cell edges: 0 and +-m 10^k (m in 1, 2, 5), increasing.

    Values below the first or above the last edge fall in two open outer cells.
    """
    return GRID.copy()


@dataclass(frozen=True)
class BoundsEstimate:
    """DP bounds, and the public threshold and noise scale they were found with.

    `lower`/`upper` are None when no cell (or only an open outer one) cleared `threshold`;
    `scale` is the discrete Laplace scale on each cell count.
    """

    lower: float | None
    upper: float | None
    threshold: int
    scale: float
    epsilon: float


def bounds_threshold(scale: float, cells: int, false_rate: float = FALSE_CELL_RATE) -> int:
    """The count a cell needs (after noise) to count as holding rows; public inputs only.

    The smallest t with cells * P(Z >= t) <= false_rate for discrete Laplace Z of `scale`
    (P(Z >= t) = a^t / (1 + a) <= a^t, a = exp(-1/scale)).
    """
    return max(1, math.ceil(scale * math.log(cells / false_rate)))


def estimate_bounds(
    values: Iterable[float] | pd.Series,
    *,
    epsilon: float,
    neighbouring: str = DEFAULT_NEIGHBOURING,
    rng: RandomSource | None = None,
) -> BoundsEstimate:
    """Lower and upper bounds of a numeric column, pure epsilon-DP.

    Guarantee: pure epsilon-DP for one row under `neighbouring`. Each row adds 1 to the count of
    the one grid cell its value falls in (the grid is public and fixed, see `bounds_grid`;
    missing values count nowhere, infinities in the outer cells), so the vector of cell counts
    has L1 sensitivity 2 under replace-one and 1 under add-remove; every cell gets discrete
    Laplace noise of scale sensitivity / epsilon (one `add_discrete_laplace` call). The
    threshold and the choice of edges read only the noisy counts: post-processing.

    Accuracy: an empty cell clears the threshold with probability at most FALSE_CELL_RATE in
    all; a cell holding `threshold` + 3 * scale rows or more clears it with probability above
    0.95. Rows in cells that do not clear it lie outside the bounds and are clamped when a
    release runs: the estimate aims at where most rows are, not at the extremes.
    """
    epsilon = check_epsilon(epsilon, allow_infinite=False)
    scale = check_count_noise(count_sensitivity(neighbouring) / epsilon, epsilon)
    edges = GRID
    numbers = _as_floats(values)
    present = numbers[~np.isnan(numbers)]
    cells = np.searchsorted(edges, present, side="right")  # 0 and len(edges): the outer cells
    counts = np.bincount(cells, minlength=len(edges) + 1).astype(np.int64)
    noisy = resolve_rng(rng).add_discrete_laplace(counts, scale)
    threshold = bounds_threshold(scale, len(counts))
    passing = np.flatnonzero(noisy >= threshold)
    lower = upper = None
    if passing.size:
        low, high = int(passing[0]), int(passing[-1])
        lower = float(edges[low - 1]) if low > 0 else None
        upper = float(edges[high]) if high < len(edges) else None
    return BoundsEstimate(_plain(lower), _plain(upper), threshold, scale, epsilon)


@dataclass(frozen=True)
class CategoryEstimate:
    """DP categories (sorted), the count threshold they cleared and the noise scale."""

    categories: list[str]
    threshold: int
    scale: float
    epsilon: float
    delta: float


def category_threshold(scale: float, epsilon: float, delta: float, neighbouring: str) -> int:
    """The count a value needs (after noise) to be released; see `discover_categories`."""
    unshared = 1 + math.exp(epsilon) if neighbouring == "replace-one" else math.exp(epsilon)
    return 1 + max(0, math.ceil(scale * math.log(unshared / delta)))


def discover_categories(
    values: Iterable[object] | pd.Series,
    *,
    epsilon: float,
    delta: float,
    neighbouring: str = DEFAULT_NEIGHBOURING,
    rng: RandomSource | None = None,
    limit: int = MAX_DISCOVERED,
) -> CategoryEstimate:
    """The values of a categorical column held by enough rows, (epsilon, delta)-DP.

    Guarantee: (epsilon, delta)-DP for one row under `neighbouring`. Each distinct value present
    gets its count plus discrete Laplace noise of scale b = sensitivity / epsilon (sensitivity 2
    under replace-one, 1 under add-remove: one `add_discrete_laplace` call over the values
    present), and only values whose noisy count reaches tau = 1 + ceil(b ln(c / delta)) are
    released (names only), with c = 1 + e^epsilon under replace-one and e^epsilon under
    add-remove. On the values both neighbours hold, this is the Laplace mechanism (epsilon).
    A value held by one row of D and absent from D' is released with probability
    p = P(1 + Z >= tau) <= e^(-(tau - 1) / b) <= delta / c; a neighbour pair has at most one
    such value on each side (replace-one) or one in all (add-remove), so the total slack is at
    most p + e^epsilon p <= delta. Sorting and the cap of `limit` values (the largest noisy
    counts) are post-processing. Missing values ("" and nulls) are never released.
    """
    epsilon = check_epsilon(epsilon, allow_infinite=False)
    delta = check_delta(delta)
    if delta <= 0:
        raise MechanismError(
            "discovering categories needs delta > 0: without a list, a value held by a single "
            "row could be revealed; give the list from public knowledge instead"
        )
    scale = check_count_noise(count_sensitivity(neighbouring) / epsilon, epsilon)
    counts = Counter(str(v) for v in values if not _is_missing(v))
    counts.pop("", None)
    names = list(counts)
    exact = np.fromiter(counts.values(), dtype=np.int64, count=len(names))
    noisy = resolve_rng(rng).add_discrete_laplace(exact, scale)
    threshold = category_threshold(scale, epsilon, delta, neighbouring)
    kept = sorted(
        ((int(n), v) for n, v in zip(noisy, names, strict=True) if n >= threshold), reverse=True
    )[:limit]
    return CategoryEstimate(sorted(v for _n, v in kept), threshold, scale, epsilon, delta)


def estimate_column(
    frame: pd.DataFrame,
    column: str,
    kind: str,
    *,
    person: persons.PersonLevel | None,
    epsilon: float,
    delta: float = 0.0,
    neighbouring: str = DEFAULT_NEIGHBOURING,
    rng: RandomSource | None = None,
) -> dict[str, Any]:
    """Bounds ("numeric") or categories ("categorical") of a column, with their guarantee.

    Returns {"result": the public estimate, "guarantee": unit, relation, sensitivity, ...}.

    Guarantee: without a person column, `estimate_bounds` (pure epsilon-DP) or
    `discover_categories` ((epsilon, delta)-DP) for one row under `neighbouring`. With one
    (`person`, the column and its k), (epsilon, delta)-DP for one person, all rows with the same
    ID, under `neighbouring`, as every release at person level (mechanisms.persons): the rows are
    first bounded to k per person (`persons.bound_contributions`, before anything is counted),
    so one person changes at most g rows (k under add-remove, 2k under replace-one), and the
    row-level estimate runs under add-remove at what group privacy leaves for one row: bounds at
    epsilon / g (the count noise is then g / epsilon, the L1 sensitivity g of the person's rows);
    categories at `persons.approx_group_budget` (their threshold is not zCDP, so the group form
    of (epsilon, delta)-DP is used). A value held by one person is then released with at most
    the requested delta's slack, however many rows they have.
    """
    epsilon = check_epsilon(epsilon, allow_infinite=False)
    delta = check_delta(delta)
    rng = resolve_rng(rng)
    values, budget, guarantee = frame[column], (epsilon, delta, neighbouring), {}
    if person is not None:
        kept, _dropped = persons.bound_contributions(frame[[column, person.column]], person, rng)
        group = person.group_size(neighbouring)
        row_budget = (
            persons.row_level_budget(epsilon, 0.0, group)
            if kind == "numeric"
            else persons.approx_group_budget(epsilon, delta, group)
        )
        values, budget = kept[column], (*row_budget, "add-remove")
        guarantee = {"max_rows_per_person": person.max_rows, "per_row": _per_row(*budget)}
    result = _estimate(values, kind, *budget, rng)
    guarantee = {
        "unit": person.unit() if person is not None else ROW_UNIT,
        "neighbouring": neighbouring,
        "definition": result["definition"],
        "epsilon": epsilon,
        "delta": delta if kind == "categorical" else 0.0,
        "sensitivity": person.group_size(neighbouring)
        if person is not None
        else count_sensitivity(neighbouring),
        **guarantee,
    }
    return {"result": result, "guarantee": guarantee}


def _per_row(epsilon: float, delta: float, neighbouring: str) -> dict[str, Any]:
    return {"epsilon": epsilon, "delta": delta, "neighbouring": neighbouring}


def _estimate(
    values: pd.Series, kind: str, epsilon: float, delta: float, neighbouring: str, rng: RandomSource
) -> dict[str, Any]:
    """The row-level estimate of `kind`, as the public result the portal stores and shows."""
    if kind == "numeric":
        bounds = estimate_bounds(values, epsilon=epsilon, neighbouring=neighbouring, rng=rng)
        return {
            "lower": bounds.lower,
            "upper": bounds.upper,
            "threshold": bounds.threshold,
            "noise_scale": bounds.scale,
            "definition": "pure epsilon-DP",
        }
    if kind != "categorical":
        raise MechanismError(f"an estimate is of bounds or categories, not {kind!r}")
    found = discover_categories(
        values, epsilon=epsilon, delta=delta, neighbouring=neighbouring, rng=rng
    )
    return {
        "categories": found.categories,
        "threshold": found.threshold,
        "noise_scale": found.scale,
        "definition": "(epsilon, delta)-DP",
    }


def _as_floats(values: Iterable[float] | pd.Series) -> np.ndarray:
    """The values as floats; text that is not a number and missing values become NaN."""
    if isinstance(values, pd.Series | np.ndarray):
        array = values.to_numpy() if isinstance(values, pd.Series) else values
    else:
        array = np.asarray(list(values))
    if array.dtype.kind in "iufb":
        return array.astype(float)
    return pd.to_numeric(pd.Series(array), errors="coerce").to_numpy(dtype=float)


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value: float | None) -> float | None:
    """Grid edges as written (0.001, 20, 5e12), without float noise from 10.0**k."""
    return None if value is None else float(f"{value:.12g}")
