"""95% intervals of range answers: the grid bounds bracket the raw count, and the intervals
cover it over many noise draws (docs/range-count.md section 5)."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mechanisms.noise import seeded_source
from mechanisms.range_count import (
    all_prefixes,
    answer_intervals,
    grid_support,
    incidence,
    load_workload,
    random_boxes,
    random_halfspaces,
    range_count,
)
from mechanisms.range_count.api import (
    build_plan,
    choose_plan,
    range_count_release,
    resolve_estimator,
)
from mechanisms.range_count.core import half_width, noise_kurtosis, popcount, privacy_target
from mechanisms.range_count.inputs import _halfspace_masks, grid_edges, rounding_bounds, snap_box
from mechanisms.range_count.intervals import answer_sets, answered_sets, noise_half_widths
from mechanisms.release_request import MechanismInputs
from mechanisms.schema import Schema

BOUNDS = [(0.0, 10.0), (-5.0, 5.0)]


def _records(n: int, seed: int) -> np.ndarray:
    """Clustered points (dense and sparse cells) inside BOUNDS, never on a grid edge."""
    rng = np.random.default_rng(seed)
    centres = np.array([[2.0, -2.0], [7.3, 1.1], [5.0, 3.9]])
    pts = centres[rng.integers(3, size=n)] + rng.normal(scale=1.2, size=(n, 2))
    return np.clip(pts, [0.0, -5.0], [10.0, 5.0])


def _raw_counts(records: np.ndarray, queries: list[dict]) -> np.ndarray:
    """True count of raw records: lo <= v < hi (a box reaching the upper bound includes it),
    a·v <= b for halfspaces."""
    upper = np.array([hi for _, hi in BOUNDS])
    out = []
    for q in queries:
        if q["type"] == "halfspace":
            out.append(int((records @ np.asarray(q["a"]) <= q["b"]).sum()))
            continue
        lo, hi = np.asarray(q["lo"]), np.asarray(q["hi"])
        below = (records < hi) | ((hi >= upper) & (records <= upper))
        out.append(int(((records >= lo) & below).all(axis=1).sum()))
    return np.array(out)


def _cell_sum(support, bits, counts) -> np.ndarray:
    return np.unpackbits(bits, axis=1, count=support.n).astype(np.int64) @ counts


def _off_grid_boxes(m: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    corners = rng.uniform([0, -5], [10, 5], size=(m, 2, 2))
    return [
        {"type": "box", "lo": c.min(axis=0).tolist(), "hi": c.max(axis=0).tolist()} for c in corners
    ]


def test_inner_and_outer_cells_bracket_the_raw_count_while_centres_alone_do_not():
    """Deterministic: for 400 off-grid boxes and 200 halfspaces over 5,000 clustered records,
    inner-cell count <= raw count <= outer-cell count, on three grids. The centre-only count
    (the old answer) misses the raw count on most boxes: the check has teeth."""
    records = _records(5000, 1)
    for shape in [(8, 8), (16, 10), (33, 7)]:
        support = grid_support(["x", "y"], BOUNDS, shape)
        counts = support.counts(records)
        queries = _off_grid_boxes(400, 2) + random_halfspaces(support, 200, seeded_source(3))
        for q in queries[400:]:  # move the lines off the cell corners
            q["b"] += 0.0123
        inner, outer = rounding_bounds(support, queries)
        low = _cell_sum(support, inner, counts)
        high = _cell_sum(support, outer, counts)
        truth = _raw_counts(records, queries)
        assert (low <= truth).all() and (truth <= high).all()
        centres = _cell_sum(support, incidence(support, queries), counts)
        assert (centres != truth).mean() > 0.5


def test_halfspaces_taken_one_at_a_time_get_the_same_cells_as_taken_together():
    """Deterministic: the halfspace masks are computed in blocks of at most ``cells`` floats;
    one halfspace per block (cells = the grid's size) gives the same inner and outer cells as
    all 300 in one block, on a 3-axis grid with integer and real coefficients."""
    support = grid_support(["x", "y", "z"], [*BOUNDS, (1.0, 4.0)], (6, 5, 4))
    rng = np.random.default_rng(4)
    a = rng.normal(size=(300, 3))
    a[::3] = np.round(a[::3] * 2)
    b = rng.normal(scale=3, size=300)
    edges = [grid_edges(support, j) for j in range(3)]
    together = _halfspace_masks((6, 5, 4), edges, a, b)
    alone = _halfspace_masks((6, 5, 4), edges, a, b, cells=support.n)
    assert together[0].shape == (300, 120)
    assert (together[0] == alone[0]).all() and (together[1] == alone[1]).all()
    assert together[0].any() and not together[0].all() and (together[1] >= together[0]).all()


def test_boxes_on_grid_edges_prefixes_and_random_boxes_are_answered_exactly():
    """Snapped boxes, prefixes and generated random boxes have inner = outer = centre cells,
    and the raw count equals the cell count (no rounding at all)."""
    records = _records(3000, 4)
    support = grid_support(["x", "y"], BOUNDS, (12, 9))
    counts = support.counts(records)
    snapped = [snap_box(support, q["lo"], q["hi"]) for q in _off_grid_boxes(100, 5)]
    queries = snapped + all_prefixes(support) + random_boxes(support, 50, seeded_source(6))
    inner, outer = rounding_bounds(support, queries)
    assert (inner == outer).all() and (inner == incidence(support, queries)).all()
    truth = _raw_counts(records, queries)
    assert (_cell_sum(support, inner, counts) == truth).all()


CASES = [  # (mechanism, delta): Laplace (pure ε) and Gaussian (δ > 0) noise
    ("tree", 0.0),
    ("tree", 1e-6),
    ("identity", 0.0),
    ("per_query", 0.0),
    ("path_tree", 1e-6),
    ("mn12", 1e-6),
]
DRAWS = 2000


def _coverage(plan, draws, sets, widths, truth, shrink=1.0):
    """Share of (query, draw) pairs with truth in [x̂(I) - h_I, x̂(O) + h_O], half-widths ×
    shrink, the estimate x̂(C) always inside (as `answer_with_intervals` builds it)."""
    return float(np.mean(_hits(plan, draws, sets, widths, truth, shrink)))


def _laplace_sum_coverage(scale: float, terms: int, half_width: float) -> float:
    """Exact P(|S| <= half_width) for S the sum of `terms` independent discrete Laplace draws of
    `scale`, from the distribution's own form, not the code's Fourier sum: a discrete Laplace
    draw is the difference of two independent geometric draws (failure chance a = e^(-1/scale)),
    so S = X - Y with X, Y independent negative binomial (terms, 1 - a)."""
    a, k = math.exp(-1.0 / scale), math.floor(half_width)
    x = np.arange(int(stats.nbinom.ppf(1 - 1e-15, terms, 1 - a)) + k + 2)
    within = stats.nbinom.cdf(x + k, terms, 1 - a) - stats.nbinom.cdf(x - k - 1, terms, 1 - a)
    return float((stats.nbinom.pmf(x, terms, 1 - a) * within).sum())


def _hits(plan, draws, sets, widths, truth, shrink=1.0):
    """(draws × queries) booleans: the interval of each query in each draw holds its truth."""
    inner, outer, centre = sets
    estimator = resolve_estimator("auto", plan, len(centre))
    hits = []
    for noisy in draws:
        est = answer_sets(plan, noisy, centre, estimator)[0]
        low = answer_sets(plan, noisy, inner, estimator)[0] - shrink * widths[0]
        high = answer_sets(plan, noisy, outer, estimator)[0] + shrink * widths[1]
        hits.append((np.minimum(est, low) <= truth) & (truth <= np.maximum(est, high)))
    return np.array(hits)


def _queries(support, mechanism, seed):
    """Boxes for the grid methods; halfspaces (their own domain) for path_tree and mn12."""
    if mechanism in ("path_tree", "mn12"):
        lines = random_halfspaces(support, 20, seeded_source(seed))
        return [{**q, "b": q["b"] + 0.0123} for q in lines]
    return _off_grid_boxes(20, seed)


@pytest.mark.audit
@pytest.mark.parametrize(("mechanism", "delta"), CASES)
def test_intervals_cover_the_raw_count_95_percent_and_a_narrow_twin_is_caught(mechanism, delta):
    """Coverage over DRAWS = 2,000 noise draws on a fixed table (4,000 records, 16×16 grid,
    ε = 1, replace-one) of 20 ranges: boxes, or halfspaces for path_tree and mn12.

    Noise part: for the cells answered (inner = outer = centre cells, each non-empty centre
    set as its own query), pooled coverage over ~30,000 (range, draw) pairs must be 95% ± 1%
    (binomial sd 0.13% if independent; overlap between ranges in one draw at most triples it,
    so the false alarm is below 1e-6). Broken twin: every half-width × 0.7 must fail it
    (coverage ~84%). Noise plus rounding: the full interval against the raw count, edges off
    the grid (union bound), coverage >= 94%.

    Identity and per_query (whole-number sums of discrete Laplace draws, exact half-widths):
    each range's coverage over the 2,000 draws must also match its exact nominal coverage
    (`_laplace_sum_coverage`, >= 95%) within 5.5 binomial sds (false alarm 3.8e-8 per range,
    below 2e-6 for the 40 ranges), and the 0.7× twin must not. The tree, path_tree and mn12
    have no exact nominal to match: their answers are weighted sums of many draws, whose
    half-widths are a Cornish-Fisher approximation (docs/range-count.md §5).
    """
    records = _records(4000, 7)
    support = grid_support(["x", "y"], BOUNDS, (16, 16))
    counts = support.counts(records)
    target = privacy_target(epsilon=1.0, delta=delta, neighbouring="replace-one")
    queries = _queries(support, mechanism, 8)
    plan = build_plan(mechanism, support, queries, answered_sets(support, queries), target)
    inner, outer = rounding_bounds(support, queries)
    centre = incidence(support, queries)
    draws = [plan.measure(counts, seeded_source(100 + i)) for i in range(DRAWS)]
    estimator = resolve_estimator("auto", plan, len(centre))
    asked = centre[popcount(centre) > 0]  # an empty set is answered 0 with no noise
    checks = {
        "noise": ((asked, asked, asked), _cell_sum(support, asked, counts)),
        "rounded": ((inner, outer, centre), _raw_counts(records, queries)),
    }
    for name, (sets, truth) in checks.items():
        variances = [answer_sets(plan, draws[0], s, estimator)[1] for s in sets[:2]]
        widths = [noise_half_widths(plan, s, v) for s, v in zip(sets[:2], variances)]
        real = _coverage(plan, draws, sets, widths, truth)
        if name == "noise":
            twin = _coverage(plan, draws, sets, widths, truth, shrink=0.7)
            assert abs(real - 0.95) <= 0.01, (mechanism, real)
            assert not abs(twin - 0.95) <= 0.01, (mechanism, twin)
            if mechanism in ("identity", "per_query"):
                _assert_matches_exact(plan, draws, sets, widths, truth)
        else:
            assert (inner != outer).any(axis=1).mean() > 0.5  # most ranges cut cells
            assert real >= 0.94, (mechanism, real)


def _assert_matches_exact(plan, draws, sets, widths, truth):
    """Per range: coverage within 5.5 binomial sds of the exact nominal; the 0.7× twin not."""
    terms = popcount(sets[0]) if plan.name == "identity" else np.ones(len(sets[0]), dtype=int)
    nominal = np.array(
        [
            _laplace_sum_coverage(plan.scale, int(t), h)
            for t, h in zip(terms, widths[0], strict=True)
        ]
    )
    assert (nominal >= 0.95).all(), nominal
    sd = np.sqrt(nominal * (1 - nominal) / len(draws))
    for shrink in (1.0, 0.7):
        rates = _hits(plan, draws, sets, widths, truth, shrink).mean(axis=0)
        matches = np.abs(rates - nominal) <= 5.5 * sd
        assert matches.all() if shrink == 1 else not matches.any(), (plan.name, shrink, rates)


def test_answer_intervals_matches_the_pieces_the_coverage_test_checks():
    """The released structure's intervals are the formula the coverage test evaluates."""
    records = _records(2000, 10)
    support = grid_support(["x", "y"], BOUNDS, (16, 16))
    queries = _off_grid_boxes(15, 11)
    r = range_count(
        support.counts(records),
        support,
        queries,
        epsilon=1.0,
        delta=0.0,
        mechanism="tree",
        rng=seeded_source(12),
    )
    again = answer_intervals(r.structure, queries)
    assert np.allclose(again.ci_lower, r.intervals.ci_lower)
    assert np.allclose(again.ci_upper, r.intervals.ci_upper)
    truth = _raw_counts(records, queries)
    assert (r.intervals.ci_lower <= r.intervals.estimate).all()
    assert (r.intervals.estimate <= r.intervals.ci_upper).all()
    assert not r.intervals.exact_region.any()
    assert np.mean((r.intervals.ci_lower <= truth) & (truth <= r.intervals.ci_upper)) > 0.8


def test_answers_csv_is_tidy_and_reads_back_as_the_same_workload():
    """One row per query; words and lo_/hi_/a_/b columns; estimate, ci_lower, ci_upper,
    noise_sd; no JSON in any cell; the file is a valid workload CSV of the same ranges."""
    schema = Schema.from_dict(
        {
            "columns": [
                {"name": c, "type": "numeric", "lower": lo, "upper": hi, "bins": 8}
                for c, (lo, hi) in zip(["x", "y"], BOUNDS, strict=True)
            ]
        }
    )
    frame = pd.DataFrame(_records(500, 13), columns=["x", "y"])
    boxes = _off_grid_boxes(5, 14)
    lines = [{"type": "halfspace", "a": [1.0, -2.0], "b": 0.5}]
    out = range_count_release(
        MechanismInputs(
            data=frame,
            schema=schema,
            columns=["x", "y"],
            params={"grid": "16x16", "workload": boxes + lines},
            epsilon=1.0,
            delta=0.0,
            neighbouring="replace-one",
            rng=seeded_source(15),
        )
    )
    text = out.files["answers.csv"].decode()
    table = pd.read_csv(io.StringIO(text))
    assert len(table) == 6 and "{" not in text and "[" not in text
    for column in (
        "description",
        "lo_x",
        "hi_y",
        "a_x",
        "b",
        "estimate",
        "ci_lower",
        "ci_upper",
        "noise_sd",
        "exact_region",
    ):
        assert column in table.columns
    assert table.loc[0, "description"].startswith("x from ")
    assert "≤ 0.5" in table.loc[5, "description"]
    assert (table["ci_lower"] <= table["estimate"]).all()
    assert (table["estimate"] <= table["ci_upper"]).all()
    reread = load_workload(text, ("x", "y"), fmt="csv")
    assert reread == [{"type": "box", "lo": q["lo"], "hi": q["hi"]} for q in boxes] + lines


def test_auto_never_picks_a_method_that_cannot_answer_new_ranges():
    """One box: per_query (one noisy answer) beats every structure, so auto took it before;
    a release promising new ranges (reusable, the default) must not."""
    support = grid_support(["x", "y"], BOUNDS, (32, 32))
    queries = [snap_box(support, [1.0, -4.0], [9.0, 4.0])]
    target = privacy_target(epsilon=1.0, delta=0.0, neighbouring="replace-one")
    bits = answered_sets(support, queries)
    reusable, _ = choose_plan("auto", support, queries, bits, target)
    once, _ = choose_plan("auto", support, queries, bits, target, reusable=False)
    assert once.name == "per_query" and reusable.name != "per_query"


def test_half_width_of_one_discrete_laplace_draw_covers_at_least_95_percent():
    """Exact tails: one discrete Laplace draw of scale b has P(X > k) = q^(k+1) / (1 + q);
    the exact integer half-width keeps each tail <= 2.5% (and one less would not), for b
    from 0.3 to 300, and the 0.7× twin does not. Cornish-Fisher for the same draw is at most
    3% wider than exact (continuous limit 2.166 against 2.118 sd)."""
    from mechanisms.range_count.core import integer_sum_half_width, noise_variance

    for b in (0.3, 1.0, 3.0, 10.0, 30.0, 300.0):
        q = math.exp(-1.0 / b)
        h = integer_sum_half_width("laplace", b, 1)
        tail = q ** (math.floor(h) + 1) / (1 + q)
        assert h == 0 or q**h / (1 + q) > 0.025, (b, h)
        assert tail <= 0.025, (b, tail)
        twin = q ** (math.floor(0.7 * h) + 1) / (1 + q)
        assert b < 1 or twin > 0.025, (b, twin)
        sd = math.sqrt(noise_variance("laplace", b))
        cf = float(half_width(np.array(sd), np.array(noise_kurtosis("laplace", b))))
        assert b < 3 or h - 1 <= cf <= 1.03 * h + 1, (b, cf, h)


def test_the_default_grid_is_finer_when_rounding_weighs_more_than_noise():
    """More rows (more rows per cut cell) or a larger ε (less noise) never coarsen the
    suggested grid, and the extremes differ (it does respond to both)."""
    from mechanisms.range_count.grid_choice import suggest_grid

    bounds = ((17.0, 90.0), (1.0, 99.0))
    few = suggest_grid(bounds, 0.1, 0.0, "replace-one", 2_000, 65_536)
    more_rows = suggest_grid(bounds, 0.1, 0.0, "replace-one", 100_000, 65_536)
    more_eps = suggest_grid(bounds, 4.0, 0.0, "replace-one", 2_000, 65_536)
    assert few <= more_rows and few <= more_eps and few < max(more_rows, more_eps)


def test_a_near_noiseless_answer_gets_a_near_zero_half_width():
    """At ε = 100 a tree's discrete Laplace draws are almost always 0, so their kurtosis is huge
    and Cornish-Fisher gave ±618 million rows to an answer whose noise sd is 1e-10. The factor
    is capped at √39 sds: by Cantelli's inequality no noise of that sd exceeds it with
    probability above 2.5%, so the one-sided coverage holds whatever the noise's shape."""
    scale = 0.02  # one draw: 0 with probability 1 - 2e-22
    kurtosis = noise_kurtosis("laplace", scale)
    assert kurtosis > 1e20
    sd = 1e-10
    assert float(half_width(np.array(sd), np.array(kurtosis))) == pytest.approx(sd * math.sqrt(39))
    z = 1.959963984540054
    assert float(half_width(np.array(1.0), np.array(0.0))) == pytest.approx(z)  # as before
