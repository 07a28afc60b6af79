"""T2: neighbouring-dataset event tests that the mechanism engineers' suites do not already run.

Every case runs the mechanism's own noise step (its scale computed by the real code), n = 10^5
draws per side, alpha = 10^-6 (family-wise false-alarm rate, union bound over all events), and
the claim is the epsilon the custodian asked for (or its share in MWEM's budget split), not a
number re-derived from the noise. Each case has a mutation twin drawing noise at 0.85 x the
scale (smoothed histogram: mixing 0.85 x as much; MWEM's selection: 0.5 x, see TWIN_FACTOR)
that the same test must FAIL.

Only tight cases are used (neighbours for which the mechanism spends its whole budget): a twin
can only be caught where the honest mechanism's real loss is close to its claim.
Existing coverage (not repeated here): tests/mechanisms/test_histogram.py (perturbed middle /
edge-bins replace-one, add-remove empty-vs-one; smoothed with a 0.5 twin), test_mwem.py
(replace-one selection and marginal measurement, sensitivity/2 twins),
test_range_count_event_audit.py (every range-count mechanism under both relations at the
requested budget, with a twin that drops the replace-one factor), test_noise.py (exponential
mechanism).
The long run (marked slow): n = 10^6 per side at epsilon = 0.1 with a 1/1.5-scale twin (0.85 is
not detectable at epsilon = 0.1 with 10^6 draws; docs/testing-privacy.md 1.5).
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pandas as pd
import pytest

from mechanisms import histogram
from mechanisms.accounting import approx_dp_to_zcdp, noise_scale
from mechanisms.noise import RandomSource, RecordingSource, seeded_source
from mechanisms.range_count import api as range_api
from mechanisms.range_count.core import privacy_target
from mechanisms.range_count.inputs import incidence
from mechanisms.schema import Schema
from mechanisms.workload import Query
from tests.mechanisms.privacy_audit import audit_neighbours
from tests.privacy.support import (
    ALPHA,
    N_NIGHTLY,
    N_PER_SIDE,
    TWIN_SCALE,
    BatchNoise,
    ZeroNoise,
    gaussian_tight_epsilon,
    laplace_loss_statistic,
    report,
)

mwem_module = importlib.import_module("mechanisms.mwem")  # the package exports a function `mwem`
mwem_measure = importlib.import_module("mechanisms.mwem.measure")  # the only code touching data

HIST = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 4},
            {"name": "g", "type": "categorical", "categories": ["a", "b"], "unknown": "other"},
        ]
    }
)
BASE = pd.DataFrame({"x": [0.1, 0.3, 0.6, 0.8, 0.2], "g": ["a", "b", "a", "b", "a"]})


def _rows(*rows):
    return pd.DataFrame(rows, columns=["x", "g"])


# ---------------------------------------------------------------- perturbed histogram

HISTOGRAM_CASES = {
    # a record exactly on a bin edge (0.5 opens bin 2) replaced by one just below it (bin 1)
    "bin-boundary, replace-one": (
        pd.concat([BASE, _rows((0.5, "a"))], ignore_index=True),
        pd.concat([BASE, _rows((0.4999999, "a"))], ignore_index=True),
        "replace-one",
    ),
    # the closed upper bound and a huge outlier clamped into the same top bin, vs the lower bound
    "edge bins, replace-one": (
        pd.concat([BASE, _rows((1.0, "b"))], ignore_index=True),
        pd.concat([BASE, _rows((0.0, "a"))], ignore_index=True),
        "replace-one",
    ),
    "edge bin outlier, add-remove": (
        BASE,
        pd.concat([BASE, _rows((1e12, "zz"))], ignore_index=True),
        "add-remove",
    ),
}


def histogram_samples(case, epsilon, factor, draws):
    d, d2, neighbouring = HISTOGRAM_CASES[case]
    exact = [HIST.cell_counts(x, ["x", "g"]) for x in (d, d2)]
    out = []
    for counts, seed in zip(exact, (101, 102), strict=True):
        noisy = histogram.perturb_counts(
            counts, epsilon=epsilon, neighbouring=neighbouring, rng=BatchNoise(seed, draws, factor)
        )
        out.append(laplace_loss_statistic(noisy, *exact))
    (x, l1), (x2, _) = out
    return x, x2, np.arange(-l1, l1 + 1), epsilon, 0.0, True


# ---------------------------------------------------------------- smoothed histogram

SMOOTH = Schema.from_dict(  # exactly two cells: no "(missing)" cell
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 2, "missing": "reject"}
        ]
    }
)
SMOOTH_D, SMOOTH_D2 = pd.DataFrame({"x": [0.1, 0.2]}), pd.DataFrame({"x": [0.1, 0.9]})


def smoothed_samples(case, epsilon, factor, draws):
    """One synthetic row (the worst case of eq. 6) from two rows in two bins: the mixing weight
    comes from the mechanism's own parameter rule; the twin mixes 0.85 x as much."""
    m = 2
    rows, mix = histogram._smoothed_parameters(epsilon, len(SMOOTH_D), m, 1, None)
    out = []
    for data, seed in ((SMOOTH_D, 103), (SMOOTH_D2, 104)):
        q = histogram.smoothed_distribution(SMOOTH.cell_counts(data, ["x"]), mix * factor)
        out.append(seeded_source(seed).choice(q, (draws, rows))[:, 0])
    return out[0], out[1], np.arange(m), epsilon, 0.0, True


# ---------------------------------------------------------------- range counts

RANGE = Schema.from_dict(
    {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 8}]}
)
RANGE_BASE = [0.05, 0.3, 0.3, 0.55, 0.8]
RANGE_CASES = {
    # (mechanism, delta, neighbouring, values of D, values of D')
    # 0.5 is the boundary between grid points 3 and 4: the record moves across it
    "identity, range boundary, replace-one": (
        "identity",
        0.0,
        "replace-one",
        RANGE_BASE + [0.5],
        RANGE_BASE + [0.49999],
    ),
    "identity, empty vs one, add-remove": ("identity", 0.0, "add-remove", [], [0.5]),
    # point 0 lies in two of the three boxes: the point of largest load
    "per_query, empty vs one at the lower bound, add-remove": (
        "per_query",
        0.0,
        "add-remove",
        [],
        [0.0],
    ),
    "tree, clamped outlier, add-remove": (
        "tree",
        0.0,
        "add-remove",
        RANGE_BASE,
        RANGE_BASE + [-1e12],
    ),
    "identity zCDP, range boundary, replace-one": (
        "identity",
        1e-6,
        "replace-one",
        RANGE_BASE + [0.5],
        RANGE_BASE + [0.49999],
    ),
}
# Gaussian plans are audited at delta = 0.1, where the tight epsilon of a 1-sd shift (1.16)
# is far enough from the twin's (1.55) for 10^5 draws; at 1e-3 (3.14 vs 3.84) it is not.
EVENT_DELTA = 0.1


# per_query adds noise to every workload answer at the scale of the most loaded point; with
# all prefixes (load 8) the loss spreads over 8 answers, too thin an edge for 10^5 draws, so
# its audit uses three boxes (load 2).
RANGE_WORKLOADS = {
    "per_query": {
        "workload": [
            {"type": "box", "lo": [0], "hi": [0.5]},
            {"type": "box", "lo": [0], "hi": [0.25]},
            {"type": "box", "lo": [0.5], "hi": [1]},
        ]
    }
}


def range_plan(mechanism, epsilon, delta, neighbouring):
    """The plan the release entry builds: support from the schema, all prefixes as workload."""
    support = range_api.support_from_schema(RANGE, ["x"], {})
    params = RANGE_WORKLOADS.get(mechanism, {"prefixes": True})
    queries = range_api.workload_from_params(support, params, seeded_source(1))
    target = privacy_target(epsilon=epsilon, delta=delta, neighbouring=neighbouring)
    plan = range_api.build_plan(mechanism, support, queries, incidence(support, queries), target)
    return support, plan


def _measurement(plan, counts, source):
    (vector,) = plan.measure(counts, source).values()
    return np.asarray(vector)


def range_samples(case, epsilon, factor, draws):
    mechanism, delta, neighbouring, values, values2 = RANGE_CASES[case]
    if delta:  # audit the Gaussian at a budget where one changed count moves mu ~ 1 sd
        epsilon = 5.75 * epsilon
    support, plan = range_plan(mechanism, epsilon, delta, neighbouring)
    counts = [support.counts(np.array(v, dtype=float)) for v in (values, values2)]
    exact = [_measurement(plan, c, BatchNoise(0, 1, 0.0))[0] for c in counts]
    noisy = [
        _measurement(plan, c, BatchNoise(s, draws, factor)).reshape(draws, -1)
        for c, s in zip(counts, (105, 106), strict=True)
    ]
    if not delta:
        (x, l1), (x2, _) = (laplace_loss_statistic(y, *exact) for y in noisy)
        return x, x2, np.arange(-l1, l1 + 1), epsilon, 0.0, True
    # zCDP: the release's whole rho (from the requested epsilon, delta) allows a shift of
    # mu = sqrt(2 rho) noise sds between neighbours; audit the tight (epsilon, EVENT_DELTA) of that.
    mu = math.sqrt(2 * approx_dp_to_zcdp(epsilon, delta))
    diff = exact[1] - exact[0]
    changed = np.flatnonzero(diff)
    stats = [
        ((y[:, changed] - exact[0][changed]) ** 2 - (y[:, changed] - exact[1][changed]) ** 2).sum(
            axis=1
        )
        for y in noisy
    ]
    spread = 2 * plan.scale * math.sqrt(float((diff**2).sum())) * 12 + (diff**2).sum()
    grid = np.arange(-math.ceil(spread), math.ceil(spread) + 1)
    return stats[0], stats[1], grid, gaussian_tight_epsilon(mu, EVENT_DELTA), EVENT_DELTA, True


class ProbeNoise(RandomSource):
    """Noise of round(1000 sigma) on every coordinate: shows which sigma each output gets."""

    def __init__(self):
        self.sigmas: dict[int, float] = {}

    def discrete_gaussian(self, sigma, size):
        self.sigmas[round(1000 * sigma)] = float(sigma)
        return np.full(size, round(1000 * sigma), dtype=np.int64)


MN12_SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 8},
            {"name": "y", "type": "numeric", "lower": 0, "upper": 1, "bins": 8},
        ]
    }
)


def _flat(measured: dict) -> np.ndarray:
    parts = [v for r in measured["rounds"] for v in (r["pieces"], r["points"])]
    return np.concatenate([*parts, measured["leftover"]]).astype(np.int64)


def mn12_samples(case, epsilon, factor, draws):
    """mn12's measurement (rounds of pieces and points, then the leftover points) on empty data
    vs one record at its most loaded point. Its outputs carry discrete Gaussian noise of
    several sigmas; a probe run reveals each coordinate's sigma, and the draws are made at
    those sigmas (the twin at 0.85 x). mn12's measure writes noise into preallocated arrays,
    so it cannot be batched; the exact part and the sigmas are the real plan's."""
    epsilon = 5.75 * epsilon
    support = range_api.support_from_schema(MN12_SCHEMA, ["x", "y"], {})
    queries = range_api.workload_from_params(support, {"random_halfspaces": 40}, seeded_source(3))
    target = privacy_target(epsilon=epsilon, delta=1e-6, neighbouring="add-remove")
    plan = range_api.build_plan("mn12", support, queries, incidence(support, queries), target)
    counts = np.zeros(support.n, dtype=np.int64)
    counts2 = counts.copy()
    counts2[int(np.argmax(plan.point_loss()))] = 1
    probe = ProbeNoise()
    exact = [_flat(plan.measure(c, ZeroNoise(0))) for c in (counts, counts2)]
    coded = _flat(plan.measure(counts, probe))
    sigma = np.array([probe.sigmas[int(k)] for k in coded])
    changed = np.flatnonzero(exact[0] != exact[1])
    weights = 1 / sigma[changed] ** 2
    stats = []
    for base, seed in zip(exact, (113, 114), strict=True):
        y = np.empty((draws, len(changed)))
        for s in np.unique(sigma[changed]):
            cols = np.flatnonzero(sigma[changed] == s)
            y[:, cols] = base[changed][cols] + seeded_source(seed).discrete_gaussian(
                s * factor, (draws, len(cols))
            )
        stats.append(
            (((y - exact[0][changed]) ** 2 - (y - exact[1][changed]) ** 2) * weights).sum(axis=1)
        )
    mu2 = float((weights * (exact[1][changed] - exact[0][changed]) ** 2).sum())
    grid = np.linspace(-mu2 - 20 * math.sqrt(mu2), mu2 + 20 * math.sqrt(mu2), 201)
    mu = math.sqrt(2 * approx_dp_to_zcdp(epsilon, 1e-6))
    claim = gaussian_tight_epsilon(mu, EVENT_DELTA)
    return stats[0], stats[1], grid, claim, EVENT_DELTA, False


# ---------------------------------------------------------------- MWEM

MWEM_SHAPE = (4, 3)  # column 0: 4 ordered bins; column 1: 3 categories
MWEM_WORKLOAD = [Query((0,)), Query((1,)), Query((0,), box=((1, 2),))]
# D' adds a record in bin 1 of column 0 (the lower boundary of the box [1, 2]) and category 0.
# Under D the model (uniform) overestimates column 0's bin 1 and underestimates category 0,
# so the added record lowers one L1-error score and raises another: the worst case.
MWEM_D = np.array([[0, 0]] * 12 + [[3, 0]] * 6 + [[2, 1]] * 1 + [[3, 2]] * 1)
MWEM_ADDED = np.vstack([MWEM_D, [[1, 0]]])


def mwem_budget(codes, epsilon, neighbouring, init_fraction=None):
    """Run the real MWEM (one round) and return its budget split and recorded noise calls."""
    source = RecordingSource(seeded_source(7))
    result = mwem_module.mwem(
        codes,
        MWEM_SHAPE,
        MWEM_WORKLOAD,
        epsilon=epsilon,
        rounds=1,
        neighbouring=neighbouring,
        init_fraction=init_fraction,
        rng=source,
    )
    return result.budget, source.noise_calls()


def mwem_selection_samples(case, epsilon, factor, draws):
    """The round-1 selection under add-remove, against a fixed public model and n (what the
    earlier, already-private outputs fix): Gumbel report-noisy-max at the recorded scale."""
    # add-remove: 0.2 of epsilon initialises, one round selects with a quarter of the rest
    budget, calls = mwem_budget(MWEM_D, epsilon / (0.8 * 0.25), "add-remove")
    scale = next(c.scale for c in calls if c.primitive == "report_noisy_max")
    model = mwem_module.FactoredDistribution.independent([np.ones(k) for k in MWEM_SHAPE])
    out = []
    for codes, seed in ((MWEM_D, 107), (MWEM_ADDED, 108)):
        true = mwem_measure.TrueAnswers(codes, MWEM_SHAPE)
        scores = mwem_measure._selection_scores(
            model, true, MWEM_WORKLOAD, len(MWEM_D), budget["per_round_measure"][0], 1
        )
        gumbel = seeded_source(seed).gumbel(scale * factor, (draws, len(scores)))
        out.append(np.argmax(scores + gumbel, axis=1))
    return out[0], out[1], np.arange(len(MWEM_WORKLOAD)), budget["per_round_select"][0], 0.0, True


def mwem_box_measurement_samples(case, epsilon, factor, draws):
    """The round's measurement of the box query at the recorded scale (add-remove, boundary)."""
    budget, _ = mwem_budget(MWEM_D, epsilon / (0.8 * 0.75), "add-remove")
    box = MWEM_WORKLOAD[2]
    expected_scale = noise_scale(mwem_measure._sensitivity(box, 1), budget["per_round_measure"][0])
    out, exact = [], []
    for codes, seed in ((MWEM_D, 109), (MWEM_ADDED, 110)):
        true = mwem_measure.TrueAnswers(codes, MWEM_SHAPE)
        exact.append(true.answer(box))
        noisy, scale = mwem_measure.measure_query(
            true, box, budget["per_round_measure"][0], 1, BatchNoise(seed, draws, factor)
        )
        assert scale == expected_scale
        out.append(noisy)
    (x, l1), (x2, _) = (laplace_loss_statistic(y, *exact) for y in out)
    return x, x2, np.arange(-l1, l1 + 1), budget["per_round_measure"][0], 0.0, True


def mwem_init_samples(case, epsilon, factor, draws):
    """The initial 1-way marginals (one joint measurement of d marginals) at the scale the real
    run drew, against the initial share of the budget."""
    neighbouring = "replace-one" if "replace-one" in case else "add-remove"
    if neighbouring == "replace-one":  # the last cell of every column replaced by the first
        d, d2 = MWEM_D, np.vstack([MWEM_D[:-1], [[0, 0]]])
    else:
        d, d2 = MWEM_D[:0], MWEM_D[:1]
    # the scale is data-independent; MWEM refuses empty data, so it is read from a run on D'
    budget, calls = mwem_budget(d2, 2 * epsilon, neighbouring, init_fraction=0.5)
    init_scale = calls[0].scale
    out, exact = [], []
    for codes, seed in ((d, 111), (d2, 112)):
        true = mwem_measure.TrueAnswers(codes, MWEM_SHAPE)
        exact.append(np.concatenate([true.marginal((a,)) for a in range(len(MWEM_SHAPE))]))
        _n, parts, _weights, scale = mwem_measure.measure_one_way(
            true,
            len(codes),
            budget["initial_one_way"],
            neighbouring,
            BatchNoise(seed, draws, factor),
        )
        assert scale == init_scale
        out.append(np.concatenate(parts, axis=1))
    (x, l1), (x2, _) = (laplace_loss_statistic(y, *exact) for y in out)
    return x, x2, np.arange(-l1, l1 + 1), budget["initial_one_way"], 0.0, True


def mwem_whole_start_samples(case, epsilon, factor, draws):
    """The default plan at small n·ε spends the whole requested ε on the 1-way start (no
    rounds, issue 16): the start's draws at the scale the real default run used, against the
    REQUESTED ε."""
    d, d2 = MWEM_D, np.vstack([MWEM_D[:-1], [[0, 0]]])  # replace-one, as mwem_init_samples
    source = RecordingSource(seeded_source(7))
    result = mwem_module.mwem(d2, MWEM_SHAPE, MWEM_WORKLOAD, epsilon=epsilon, rng=source)
    assert result.rounds == 0 and result.budget["initial_one_way"] == epsilon
    init_scale = source.noise_calls()[0].scale
    out, exact = [], []
    for codes, seed in ((d, 113), (d2, 114)):
        true = mwem_measure.TrueAnswers(codes, MWEM_SHAPE)
        exact.append(np.concatenate([true.marginal((a,)) for a in range(len(MWEM_SHAPE))]))
        *_, parts, _weights, scale = mwem_measure.measure_one_way(
            true, len(codes), epsilon, "replace-one", BatchNoise(seed, draws, factor)
        )
        assert scale == init_scale
        out.append(np.concatenate(parts, axis=1))
    (x, l1), (x2, _) = (laplace_loss_statistic(y, *exact) for y in out)
    return x, x2, np.arange(-l1, l1 + 1), epsilon, 0.0, True


CASES = {
    **{f"perturbed histogram: {c}": histogram_samples for c in HISTOGRAM_CASES},
    "smoothed histogram: one row, edge bin, replace-one": smoothed_samples,
    **{f"range count: {c}": range_samples for c in RANGE_CASES},
    "range count: mn12 zCDP, empty vs one at its most loaded point, add-remove": mn12_samples,
    "MWEM selection: box boundary, add-remove": mwem_selection_samples,
    "MWEM measurement: box boundary, add-remove": mwem_box_measurement_samples,
    "MWEM initial 1-way marginals: edge cells, replace-one": mwem_init_samples,
    "MWEM initial 1-way marginals: empty vs one, add-remove": mwem_init_samples,
    "MWEM whole-epsilon 1-way start (no round pays): edge cells, replace-one": (
        mwem_whole_start_samples
    ),
}


def _subcase(label: str) -> str:
    return label.split(": ", 1)[1]


# The exponential mechanism reaches its full epsilon only on rare events, so a 0.85 twin is
# beyond 10^5 draws there (measured: honest eps_hat 0.76, twin 0.93 < 1); its twin halves the
# declared sensitivity (scale x 0.5), the other twin docs/testing-privacy.md allows.
TWIN_FACTOR = {label: 0.5 if label.startswith("MWEM selection") else TWIN_SCALE for label in CASES}


def run_case(label, *, epsilon, factor, draws, twin):
    x, x2, grid, claim, delta, discrete = CASES[label](_subcase(label), epsilon, factor, draws)
    result = audit_neighbours(
        x, x2, epsilon=claim, delta=delta, alpha=ALPHA, thresholds=grid, discrete=discrete
    )
    ok = report(label, result, epsilon=claim, delta=delta, twin=twin, expect_pass=factor == 1.0)
    return ok, result


@pytest.mark.parametrize("broken", [False, True], ids=["honest", "twin"])
@pytest.mark.parametrize("label", CASES)
def test_event_audit(label, broken):
    factor = TWIN_FACTOR[label]
    ok, result = run_case(
        label,
        epsilon=1.0,
        factor=factor if broken else 1.0,
        draws=N_PER_SIDE,
        twin=f"scale x {factor}",
    )
    assert ok, result.summary()


# MWEM's selection is not in the long run: at epsilon = 0.1 the exponential mechanism is far
# from its bound on every event (measured eps_hat 0.046), so no twin is detectable there.
NIGHTLY = [
    "perturbed histogram: edge bin outlier, add-remove",
    "smoothed histogram: one row, edge bin, replace-one",
    "range count: per_query, empty vs one at the lower bound, add-remove",
    "range count: identity, range boundary, replace-one",
    "range count: tree, clamped outlier, add-remove",
    "MWEM measurement: box boundary, add-remove",
    "MWEM initial 1-way marginals: empty vs one, add-remove",
]


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["honest", "twin-1/1.5"])
@pytest.mark.parametrize("label", NIGHTLY)
def test_event_audit_at_small_epsilon_with_a_million_draws(label, broken):
    ok, result = run_case(
        label, epsilon=0.1, factor=1 / 1.5 if broken else 1.0, draws=N_NIGHTLY, twin="scale / 1.5"
    )
    assert ok, result.summary()
