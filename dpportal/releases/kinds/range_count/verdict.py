"""The custodian-only verdict on a range-count release: good / usable with care / not usable.

CUSTODIAN-ONLY: computed by the worker against the raw table, stored with the utility report,
shown to the dataset's owner alone, never in a package or on an auditor's page.

What is measured, on the release's own ranges (the workload in structure.json, answered in
answers.csv): the root-mean-square error (RMSE) of the released estimates against the true
count of raw rows in each range as asked (not rounded to the grid), and the share of ranges
whose 95% interval holds that true count. Two yardsticks, both computed here on the raw data:

- the **sampling floor**: the RMSE of a fresh sample (with replacement) of as many real rows.
  A range holding t of the n rows then counts Binomial(n, t/n) rows, off by t(1 − t/n) in
  mean square: computed exactly, not drawn. No release can be expected to do better;
- the **trivial baseline**, at the release's ε and pure ε-DP (so never with more budget than
  the release), `BASELINE_DRAWS` times: with two or more columns on a grid, the product of
  independent noisy one-way counts of each column over the grid's cells (ε split evenly,
  discrete Laplace of scale sensitivity·d/ε, clipped at zero) times their total; with one
  column or a list of points, one noisy count of all rows spread evenly over the grid's cells
  (the points). Each range is answered from the cells whose centres lie in it, as the release
  answers it. A release that does not beat it has learnt nothing about how the columns go
  together (one column: about where the rows lie).

Grades (in this order): an RMSE that does not beat the baseline's by at least `BEAT_MARGIN` ×
the floor, or above `UNUSABLE_SHARE` of the average true count: not usable; an RMSE within
`GOOD_FACTOR` × the floor and intervals holding the true count on at least `GOOD_COVERAGE` of
the ranges: good; otherwise usable with care. docs/accuracy.md states them in words.
"""

import json

import numpy as np

from dpportal.releases.kinds.synthetic_verdict import GRADES
from dpportal.releases.packaging import read_csv, with_numbers
from mechanisms.histogram import count_sensitivity
from mechanisms.noise import secure_source
from mechanisms.range_count import Support, incidence
from mechanisms.range_count.inputs import normalize_queries, records_in

BASELINE_DRAWS = 5
GOOD_FACTOR = 2.0
BEAT_MARGIN = 0.5  # beating the baseline by less than half the floor is within sampling noise
UNUSABLE_SHARE = 0.5  # typical error above half the average true count
# The ranges overlap and share their noise, so on one release the share of intervals holding
# swings well around 95% (1 in 20 releases below 70% on 100 boxes over one column of 64 cells,
# benchmarks/range_verdict_grades.py); below 80% this release's noise happened to run large.
GOOD_COVERAGE = 0.8
BLOCK = 32  # ranges whose centre incidence is unpacked at once (32 × 200,000 cells: 51 MB)


def assess(schema, columns, frame, files, *, epsilon, neighbouring, rng=None) -> dict | None:
    """The verdict on a release with answers.csv and structure.json (None for other releases).

    `rng`: the baseline's noise source (the secure source unless a test passes its own).
    """
    if "structure.json" not in files or "answers.csv" not in files:
        return None
    structure = json.loads(files["structure.json"])
    support = Support.from_dict(structure["support"])
    queries = normalize_queries(structure["workload"], support.dim)
    values = raw_values(columns, with_numbers(frame, schema))
    true = true_counts(support, values, queries)
    answers = read_csv(files["answers.csv"])
    estimate = answers["estimate"].astype(float).to_numpy()
    low = answers["ci_lower"].astype(float).to_numpy()
    high = answers["ci_upper"].astype(float).to_numpy()
    n = len(values)
    baseline, baseline_name = _baseline_rmse(
        support, values, queries, true, epsilon, neighbouring, rng or secure_source()
    )
    facts = {
        "kind": "range",
        "ranges": len(true),
        "rmse": _rms(estimate - true),
        "floor": float(np.sqrt(np.mean(true * (1 - true / max(n, 1))))) if len(true) else 0.0,
        "baseline": baseline,
        "baseline_name": baseline_name,
        "held": int(((low <= true) & (true <= high)).sum()),
        "coverage": float(np.mean((low <= true) & (true <= high))) if len(true) else 1.0,
        "average_count": float(np.mean(true)) if len(true) else 0.0,
    }
    return _grade(len(columns), facts)


def raw_values(columns, frame) -> np.ndarray:
    """(rows, d) raw values of the released columns, rows with a missing value left out (as the
    release leaves them out). `frame` has its numeric columns as numbers (`with_numbers`)."""
    values = np.column_stack([frame[c].to_numpy(float) for c in columns])
    return values[~np.isnan(values).any(axis=1)]


def true_counts(support, values, queries) -> np.ndarray:
    """The true count of raw rows in each range as asked (not the grid-rounded count)."""
    return np.array([records_in(support, values, q).sum() for q in queries], dtype=float)


def _rms(errors) -> float:
    return float(np.sqrt(np.mean(np.square(errors)))) if len(errors) else 0.0


def _baseline_rmse(support, values, queries, true, epsilon, neighbouring, rng):
    """The baseline's RMSE, averaged over its draws, and its name in words."""
    scale = count_sensitivity(neighbouring) / epsilon
    marginals = support.grid_shape is not None and support.dim > 1
    weights = np.column_stack(
        [
            _marginal_weights(support, values, scale, rng)
            if marginals
            else _even_weights(support, len(values), scale, rng)
            for _ in range(BASELINE_DRAWS)
        ]
    )
    answers = _answer(support, queries, weights)
    rmse = float(np.mean([_rms(answers[:, k] - true) for k in range(BASELINE_DRAWS)]))
    name = "independent noisy one-way counts" if marginals else "a noisy total spread evenly"
    return rmse, name


def _even_weights(support, rows, scale, rng) -> np.ndarray:
    """Rows per support point: one noisy count of all rows (ε-DP), spread evenly."""
    total = max(float(rng.add_discrete_laplace(np.array([rows]), scale)[0]), 0.0)
    return np.full(support.n, total / support.n)


def _marginal_weights(support, values, scale, rng) -> np.ndarray:
    """Rows per grid point from the product of noisy one-way counts over the grid's cells
    (each column at ε/d, so ε in all), times their total."""
    shape, d = support.grid_shape, support.dim
    shares, totals = [], []
    for j, cells in enumerate(shape):
        counts = np.bincount(_cell(values[:, j], support, j), minlength=cells)
        noisy = rng.add_discrete_laplace(counts, scale * d).astype(float)
        totals.append(noisy.sum())
        kept = np.maximum(noisy, 0)
        shares.append(kept / kept.sum() if kept.sum() else np.full(cells, 1.0 / cells))
    product = np.ones(support.n)
    for j in range(d):
        product *= shares[j][_cell(support.points[:, j], support, j)]
    return product * max(float(np.mean(totals)), 0.0)


def _cell(numbers, support, j) -> np.ndarray:
    """The grid cell along column j of each value (clamped to the bounds, as the release)."""
    lower, upper, cells = support.lower[j], support.upper[j], support.grid_shape[j]
    index = np.floor((np.asarray(numbers, float) - lower) / (upper - lower) * cells)
    return np.clip(index, 0, cells - 1).astype(int)


def _answer(support, queries, weights) -> np.ndarray:
    """(ranges, draws): each range answered from the support points (cell centres) in it."""
    out = np.zeros((len(queries), weights.shape[1]))
    for start in range(0, len(queries), BLOCK):
        bits = incidence(support, queries[start : start + BLOCK])
        inside = np.unpackbits(bits, axis=1, count=support.n).astype(float)
        out[start : start + len(bits)] = inside @ weights
    return out


def _grade(d: int, facts: dict) -> dict:
    rmse, floor, baseline = facts["rmse"], facts["floor"], facts["baseline"]
    coverage, average = facts["coverage"], facts["average_count"]
    more = "spend more ε, use a coarser grid" + (" or release fewer columns" if d > 1 else "")
    held = f"its 95% intervals held the true count on {coverage:.0%} of them"
    typical = f"off by {rmse:,.0f} rows on a typical range (RMS over the {facts['ranges']} ranges)"
    if rmse > baseline - BEAT_MARGIN * floor:
        grade = "bad"
        reason = (
            f"Its answers are {typical}, no better than {facts['baseline_name']} at the same ε "
            f"({baseline:,.0f} rows): {more}."
        )
    elif rmse > UNUSABLE_SHARE * average:
        grade = "bad"
        reason = (
            f"Its answers are {typical}, more than half the average true count "
            f"({average:,.0f} rows): {more}."
        )
    elif rmse <= GOOD_FACTOR * floor and coverage >= GOOD_COVERAGE:
        grade = "good"
        reason = (
            f"Its answers are about as close to the true counts ({rmse:,.0f} rows RMS over the "
            f"{facts['ranges']} ranges) as a fresh sample of as many real rows would be "
            f"({floor:,.0f}), and {held}."
        )
    elif coverage < GOOD_COVERAGE:
        grade = "care"
        reason = (
            f"Its answers are {typical}, but {held} (95% to expect): its noise ran large on "
            f"the ranges, which share it, so read its margins of error with care (for more "
            f"accuracy, {more})."
        )
    else:
        grade = "care"
        reason = (
            f"Its answers are {typical}, {rmse / max(floor, 1e-9):.1f}× a fresh sample's "
            f"{floor:,.0f} but better than {facts['baseline_name']} ({baseline:,.0f}); {held}: "
            f"fine for large ranges, not for small ones (for more accuracy, {more})."
        )
    return {"grade": grade, "label": GRADES[grade], "reason": reason, **facts}
