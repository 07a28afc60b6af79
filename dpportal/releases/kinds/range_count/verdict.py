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

Each answer's error is split in two, from the raw rows: the grid rounding (the true count of
the cells whose centres lie in the range, minus the true count of the range as asked) and the
noise (the estimate minus that cell count). The advice follows the larger: rounding, a finer
grid (more ε changes nothing); noise, more ε (or, when rounding is small, a coarser grid).

The planner's promise (`promised`: at least C of the answers within ±H, with its rounding
bound for cells holding at most `crowding` times an even share): vacuous (±H at least an
average answer): not usable. Otherwise the share it promises is computed for this data: the
release's noise (each answer's public sd and kurtosis, `range_count.promise`) plus the
rounding the raw rows actually give. When that is at least C the promise holds on this data
and the release is never graded not usable (the grades below that would say so say usable with
care); when it is below C, the rows are more crowded in the cut cells than the planner
assumed: usable with care, with the advice of the larger error.

Grades without a promise, or under a promise that holds (in this order): an RMSE that does
not beat the baseline's by at least `BEAT_MARGIN` × the floor, or above `UNUSABLE_SHARE` of
the average true count: not usable; an RMSE within `GOOD_FACTOR` × the floor and intervals
holding the true count on at least `GOOD_COVERAGE` of the ranges: good; otherwise usable with
care. docs/accuracy.md states them in words.
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
SHARE_TOLERANCE = 0.005  # the promised share is computed to about this (numerical search)


def assess(
    schema, columns, frame, files, *, epsilon, neighbouring, rng=None, promise=None
) -> dict | None:
    """The verdict on a release with answers.csv and structure.json (None for other releases).

    `rng`: the baseline's noise source (the secure source unless a test passes its own).
    `promise`: the planner's promise for this release (`promise_check.promised`), or None.
    """
    if "structure.json" not in files or "answers.csv" not in files:
        return None
    structure = json.loads(files["structure.json"])
    support = Support.from_dict(structure["support"])
    queries = normalize_queries(structure["workload"], support.dim)
    values = raw_values(columns, with_numbers(frame, schema))
    true = true_counts(support, values, queries)
    cells = cell_counts(support, values, queries)
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
        "rounding_rms": _rms(cells - true),
        "noise_rms": _rms(estimate - cells),
    }
    if promise is not None:
        facts["promise"] = _promise_facts(promise, structure, answers, estimate, true, cells)
    return _grade(len(columns), facts)


def cell_counts(support, values, queries) -> np.ndarray:
    """The true count of raw rows in the cells each range is answered from (centres inside)."""
    counts = support.counts(values).astype(float)
    out = np.zeros(len(queries))
    for start in range(0, len(queries), BLOCK):
        bits = incidence(support, queries[start : start + BLOCK])
        out[start : start + len(bits)] = np.unpackbits(bits, axis=1, count=support.n) @ counts
    return out


def _promise_facts(promise, structure, answers, estimate, true, cells) -> dict:
    """The promise, how many answers were within ±H, and the share it promises on this data:
    the release's own noise model with the rounding these rows give (`within_share`)."""
    from mechanisms.range_count.api import load_structure
    from mechanisms.range_count.inputs import normalize_queries
    from mechanisms.range_count.intervals import answer_kurtosis
    from mechanisms.range_count.promise import within_share

    support, plan, _ = load_structure(structure)
    bits = incidence(support, normalize_queries(structure["workload"], support.dim))
    kurtosis = answer_kurtosis(plan, bits)
    sd = answers["noise_sd"].astype(float).to_numpy()
    half = promise.half_width
    expected = within_share(sd, kurtosis, cells - true, half)
    return {
        "sentence": promise.sentence(),
        "half_width": half,
        "confidence": promise.confidence,
        "within": int(np.sum(np.abs(estimate - true) <= half + 1e-9)),
        "outputs": len(true),
        "expected_share": expected,
        "holds": expected >= promise.confidence - SHARE_TOLERANCE,
        "vacuous": promise.vacuous(),
    }


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
    promise = facts.get("promise")
    if promise is not None and promise["vacuous"]:
        reason = (
            f"The planner's promise at this ε, {promise['sentence']}, is at least an average "
            f"answer: the answers say nothing ({advice(d, facts)})."
        )
        return _graded("bad", reason, facts)
    grade, reason = _quality(d, facts)
    if promise is None:
        return _graded(grade, reason, facts)
    if not promise["holds"]:
        reason = (
            f"On these rows the planner's promise ({promise['sentence']}) does not hold: with "
            f"the grid rounding they give, {promise['expected_share']:.0%} of the answers would "
            f"be within ±{promise['half_width']:,.0f}, not {promise['confidence']:.0%} (the "
            f"cells the ranges cut hold more rows than the planner assumed). {reason}"
        )
        return _graded("care", reason, facts)
    seen = f"{promise['within']} of the {promise['outputs']} answers were within"
    reason = f"It keeps the planner's promise ({promise['sentence']}; {seen}). {reason}"
    return _graded("care" if grade == "bad" else grade, reason, facts)


def advice(d: int, facts: dict) -> str:
    """What to do for more accuracy, from the larger of the two errors."""
    rounding, noise = facts["rounding_rms"], facts["noise_rms"]
    if rounding > noise:
        return (
            f"use a finer grid: its rounding errs {rounding:,.0f} rows RMS against the noise's "
            f"{noise:,.0f}, and more ε would not change that"
        )
    coarser = ", use a coarser grid" if rounding < noise / 3 else ""
    fewer = " or release fewer columns" if d > 1 else ""
    return f"spend more ε{coarser}{fewer} (the noise errs {noise:,.0f} rows RMS)"


def _graded(grade: str, reason: str, facts: dict) -> dict:
    return {"grade": grade, "label": GRADES[grade], "reason": reason, **facts}


def _quality(d: int, facts: dict) -> tuple[str, str]:
    rmse, floor, baseline = facts["rmse"], facts["floor"], facts["baseline"]
    coverage, average = facts["coverage"], facts["average_count"]
    more = advice(d, facts)
    held = f"its 95% intervals held the true count on {coverage:.0%} of them"
    typical = f"off by {rmse:,.0f} rows on a typical range (RMS over the {facts['ranges']} ranges)"
    if rmse > baseline - BEAT_MARGIN * floor:
        return "bad", (
            f"Its answers are {typical}, no better than {facts['baseline_name']} at the same ε "
            f"({baseline:,.0f} rows): {more}."
        )
    if rmse > UNUSABLE_SHARE * average:
        return "bad", (
            f"Its answers are {typical}, more than half the average true count "
            f"({average:,.0f} rows): {more}."
        )
    if rmse <= GOOD_FACTOR * floor and coverage >= GOOD_COVERAGE:
        return "good", (
            f"Its answers are about as close to the true counts ({rmse:,.0f} rows RMS over the "
            f"{facts['ranges']} ranges) as a fresh sample of as many real rows would be "
            f"({floor:,.0f}), and {held}."
        )
    if coverage < GOOD_COVERAGE:
        return "care", (
            f"Its answers are {typical}, but {held} (95% to expect): its noise ran large on "
            f"the ranges, which share it, so read its margins of error with care (for more "
            f"accuracy, {more})."
        )
    return "care", (
        f"Its answers are {typical}, {rmse / max(floor, 1e-9):.1f}× a fresh sample's "
        f"{floor:,.0f} but better than {facts['baseline_name']} ({baseline:,.0f}); {held}: "
        f"fine for large ranges, not for small ones (for more accuracy, {more})."
    )
