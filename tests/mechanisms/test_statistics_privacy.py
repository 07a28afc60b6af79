"""Event tests (docs/testing-privacy.md section 1) for each summary statistic's noise step.

Each case runs the statistic's own noise step (`Computer.noisy_counts`, `noisy_sums`, `select`,
`ends`: scales from the real code: OpenDP's stability maps for counts, the exact sums' own bound
on their noise grid for sums, `measures.sum_grid`) n = 10^5 times per side on add/remove
neighbours (one row at the upper bound against none; the quantile's selections over 3 candidates,
where a twin has the power to show), alpha = 10^-6 family-wise, and claims the epsilon the custodian
asked for: the count, the sum and the variance's sum of squares (on its own share) spend it all; the
mean's sum piece and the quantile's selections claim their share (epsilon / 2; the quantile's
estimate POINT_SHARE = 75% of epsilon, its interval's two ends, picked together, 25%). The whole
quantile (its interval's ends, then its estimate among the candidates inside them) is also audited
on replace-one neighbours at the requested epsilon, where the doubled rank sensitivity is what keeps
it private. Twins the same test must fail: noise scale x 0.85 (count, sum, sum of squares); declared
sensitivity x 0.85 for the mean's sum (its bound is one row's largest term, 50 on [-50, 50],
exactly the change the neighbours make); sensitivity / 4 for the
quantile's selections (the exponential mechanism's loss on monotone scores is half its claim).
Missing values, on replace-one neighbours without groups (one value turned missing): the count of
present values (twin: scale x 0.85) and the sum of present values (twin: its sized bounds not
widened to hold 0, so a value at the bound turned missing overspends). A sum's or quantile's own
count of values (`support`, when no released count decides its groups) claims a quarter of the
statistic's epsilon and the sum the rest (twins: scale x 0.85; the quarter not taken off).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from mechanisms import statistics
from mechanisms.noise import RandomSource, seeded_source
from mechanisms.schema import Schema
from mechanisms.statistics import Computer, measures, parse_request, quantiles, support
from mechanisms.statistics import compute as statistics_compute
from tests.mechanisms.privacy_audit import audit_neighbours, threshold_grid

N, ALPHA = 100_000, 1e-6
SCHEMA = Schema.from_dict(
    {
        "columns": [
            {
                "name": "x",
                "type": "numeric",
                "lower": 0,
                "upper": 100,
                "bins": 4,
                "missing": "reject",
            },
            {"name": "g", "type": "categorical", "categories": ["a", "b"], "unknown": "reject"},
        ]
    }
)
D = pd.DataFrame({"x": [100.0], "g": ["a"]})
D2 = D.iloc[:0]


class Batch(RandomSource):
    """Noise steps drawn `draws` times at once (leading axis); `factor` shrinks the noise."""

    def __init__(self, seed: int, draws: int, factor: float = 1.0):
        self.inner, self.draws, self.factor = seeded_source(seed), draws, factor

    def add_discrete_laplace(self, values, scale):
        values = np.asarray(values, dtype=np.int64)
        return values + self.inner.discrete_laplace(
            scale * self.factor, (self.draws, *values.shape)
        )

    def add_laplace(self, values, scale):
        values = np.asarray(values, dtype=np.float64)
        return values + self.inner.laplace(scale * self.factor, (self.draws, *values.shape))

    def report_noisy_max(self, scores, scale):
        scores = np.asarray(scores, dtype=np.float64)
        noise = self.inner.gumbel(scale * self.factor, (self.draws, scores.size))
        return np.argmax(scores + noise, axis=1)

    def permute_and_flip(self, scores, scale):
        """Exponential noise as |Laplace| (the same distribution)."""
        scores = np.asarray(scores, dtype=np.float64)
        noise = np.abs(self.inner.laplace(scale * self.factor, (self.draws, scores.size)))
        return np.argmax(scores + noise, axis=1)


def _computer(data, stat, seed, factor=1.0, draws=N):
    request = parse_request(SCHEMA, {"stat": [stat], "by": ["g"]}, epsilon=1.0,
                            neighbouring="add-remove")  # fmt: skip
    return Computer(data, SCHEMA, request, "add-remove", Batch(seed, draws, factor))


def _count(data, seed, factor, epsilon):
    counts, scale = _computer(data, "count", seed, factor).noisy_counts(epsilon)
    return counts[:, 0], scale


def _sum(data, seed, factor, epsilon):
    run = _computer(data, "sum:x", seed, factor)
    sums, grid = run.noisy_sums(run.values("x"), 0.0, 100.0, epsilon)
    return sums[:, 0], grid.scale(epsilon)


def _mean_sum_piece(data, seed, factor, epsilon):
    run = _computer(data, "mean:x", seed, factor)
    groups = [[v - 50 for v in g] for g in run.values("x")]
    sums, grid = run.noisy_sums(groups, -50.0, 50.0, epsilon / 2)
    return sums[:, 0], grid.scale(epsilon / 2)


def _variance_squares_piece(data, seed, factor, epsilon):
    """The variance's sum of (x - c)^2 over [0, r^2], which spends epsilon / 3 (so the test
    runs it at three times the claim it checks)."""
    run = _computer(data, "variance:x", seed, factor)
    squares = [[(v - 50) ** 2 for v in g] for g in run.values("x")]
    sums, grid = run.noisy_sums(squares, 0.0, 2500.0, epsilon)
    return sums[:, 0], grid.scale(epsilon)


@pytest.mark.audit
@pytest.mark.parametrize(
    "step, integer", [(_count, True), (_sum, False), (_variance_squares_piece, False)]
)
@pytest.mark.parametrize("factor, honest", [(1.0, True), (0.85, False)])
def test_count_and_sum_at_the_requested_epsilon(step, integer, factor, honest):
    epsilon = 1.0
    x, scale = step(D, 11, factor, epsilon)
    x2, _ = step(D2, 12, factor, epsilon)
    grid = threshold_grid(float(np.median(x)), float(np.median(x2)), scale, integer=integer)
    result = audit_neighbours(x, x2, epsilon=epsilon, thresholds=grid, discrete=integer,
                              alpha=ALPHA)  # fmt: skip
    assert result.passed is honest, result.summary()


@pytest.mark.audit
@pytest.mark.parametrize("factor, honest", [(1.0, True), (0.85, False)])
def test_mean_sum_piece_at_its_share(factor, honest, monkeypatch):
    epsilon = 2.0
    real = measures.sum_grid  # the sums' grid and sensitivity

    def shrunk(*args):
        grid = real(*args)
        return dataclasses.replace(grid, units=math.floor(grid.units * factor))

    monkeypatch.setattr(statistics_compute, "sum_grid", shrunk)
    x, scale = _mean_sum_piece(D, 13, 1.0, epsilon)
    x2, _ = _mean_sum_piece(D2, 14, 1.0, epsilon)
    grid = threshold_grid(50.0, 0.0, scale, integer=False)
    result = audit_neighbours(x, x2, epsilon=epsilon / 2, thresholds=grid, discrete=False,
                              alpha=ALPHA)  # fmt: skip
    assert result.passed is honest, result.summary()


def _quantile_picks(monkeypatch, divide, step, data=(D, D2)):
    """Picks of one quantile selection (`step(run, values, spec)`) on `data`, 3 candidates."""
    for module, name in ((measures, "group_sensitivity"), (quantiles, "rank_sensitivity")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real: real(*a) / divide)
    for name in ("CANDIDATES", "END_CANDIDATES", "INNER_CANDIDATES"):  # power; any K is fine
        monkeypatch.setattr(quantiles, name, 3)
    spec = SCHEMA.column("x")
    picks = []
    for table, seed in zip(data, (15, 16), strict=True):
        run = _computer(table, "median:x", seed)
        picks.append(np.asarray(step(run, run.values("x")[0], spec)))
    return picks


@pytest.mark.audit
@pytest.mark.parametrize("divide, honest", [(1.0, True), (4.0, False)])
def test_quantile_estimate_at_its_share(divide, honest, monkeypatch):
    epsilon = 4 / 3  # requested for the median; its estimate's share: 75% of it = 1
    point, _ = statistics.quantile_shares(epsilon)
    assert point <= 0.75 * epsilon
    picks = _quantile_picks(
        monkeypatch, divide, lambda run, v, spec: run.select(v, spec, 0.5, point)
    )
    result = audit_neighbours(*picks, epsilon=0.75 * epsilon, thresholds=np.arange(3), alpha=ALPHA)
    assert result.passed is honest, result.summary()


def pair_index(run, values, spec, alpha, epsilon):
    """The interval ends' pick (lo, hi) as one number, lo's candidate index * 3 + hi's."""
    lo, hi = run.ends(values, spec, alpha, epsilon)
    grid = list(statistics.candidates(spec, quantiles.END_CANDIDATES))
    return np.searchsorted(grid, lo) * 3 + np.searchsorted(grid, hi)


@pytest.mark.audit
@pytest.mark.parametrize("divide, honest", [(1.0, True), (4.0, False)])
def test_quantile_interval_ends_at_their_share(divide, honest, monkeypatch):
    """Both ends in one selection among the 6 pairs lo <= hi of 3 candidates. The offset M is
    public, so the guarantee holds for any M; M = 0 keeps the pairs' scores close (power: with
    the real M the pair of bounds wins nearly always)."""
    epsilon = 4.0  # requested for the median; the ends' share: 25% of it = 1
    _, ends = statistics.quantile_shares(epsilon)
    monkeypatch.setattr(quantiles, "quantile_rank_margin", lambda *a: 0.0)
    assert ends <= 0.25 * epsilon
    picks = _quantile_picks(
        monkeypatch, divide, lambda run, v, spec: pair_index(run, v, spec, 0.5, ends)
    )
    result = audit_neighbours(*picks, epsilon=0.25 * epsilon, thresholds=np.arange(9), alpha=ALPHA)
    assert result.passed is honest, result.summary()


FOUR = pd.DataFrame({"x": [0.0, 0.0, 100.0, 100.0], "g": ["a"] * 4})
FIVE = pd.concat([FOUR, D], ignore_index=True)  # one more row at the upper bound


def _true_size(self, group):
    return float(len(self.values("x")[group]))


@pytest.mark.audit
@pytest.mark.parametrize("twin", [None, "true size", "sensitivity / 4"])
def test_quantile_whose_interval_pick_is_skipped_at_the_requested_epsilon(twin, monkeypatch):
    """One group's whole quantile (`Computer.interval`, then `Computer.estimate`) on add/remove
    neighbours of 5 and 4 rows (0, 0, 100, 100 and one more 100: the scores of the 3
    candidates stay close, where a twin shows), the skip rule replaced by "at most 4.5 rows"
    so that a data-dependent choice would differ between them. Honest: the choice reads the
    released count's upper end (`rows_at_most`; here a fixed 4, the same on both sides, as the
    count is released and accounted for before), so both skip the ends' pick and the estimate
    spends the whole requested epsilon. Projection: the estimate's candidate index * 2 +
    whether the interval is narrower than the declared range (6 values). Twins: the choice read
    from the group's true size (5 picks its ends, 4 does not: the narrowed interval shows),
    and the skipped estimate's sensitivity / 4."""
    epsilon = 1.0
    monkeypatch.setattr(quantiles, "ends_skipped", lambda spec, a, e, nb, rows: rows <= 4.5)
    monkeypatch.setattr(quantiles, "quantile_rank_margin", lambda *a: 0.0)  # power, as above
    if twin == "true size":
        monkeypatch.setattr(Computer, "rows_at_most", _true_size)

    def step(run, values, spec):
        run.count_upper = [4.0, 4.0]
        within = run.interval(values, spec, 0.5, epsilon, run.rows_at_most(0))
        estimate, lower, upper = run.estimate(values, spec, 0.5, epsilon, within)
        grid = list(statistics.candidates(spec, quantiles.CANDIDATES))
        narrowed = (np.asarray(lower) > spec.lower) | (np.asarray(upper) < spec.upper)
        return np.searchsorted(grid, estimate) * 2 + narrowed

    divide = 4.0 if twin == "sensitivity / 4" else 1.0
    _vectorised_select(monkeypatch)
    picks = _quantile_picks(monkeypatch, divide, step, data=(FIVE, FOUR))
    result = audit_neighbours(*picks, epsilon=epsilon, thresholds=np.arange(6), alpha=ALPHA)
    assert result.passed is (twin is None), result.summary()


# ------------------------------------------------------------ the whole quantile, replace-one

# Replace-one neighbours within group a: the value 0 replaced by 100. Chosen by computing the
# exact output distributions (permute-and-flip over the 6 pairs of ends, then over the
# candidates inside them) for every pair of tables of at most 4 values in {0, 25, 50, 75, 100}
# differing in one value: here the honest quantile's privacy loss was 0.83 at epsilon 1, and the
# twin's (rank sensitivity not doubled) 1.67, the largest of all those pairs, with the ends
# scored by ranks counting ties on neither side (before d12f55f's successor judged lo by the
# values below it and hi by those at or below it); the twin is still caught.
REPLACED = pd.DataFrame({"x": [0.0, 25.0, 25.0, 75.0], "g": ["a"] * 4})
REPLACING = REPLACED.assign(x=[100.0, 25.0, 25.0, 75.0])


def _vectorised_select(monkeypatch):
    """`Computer.select` on N draws of the interval's ends at once: for each pair (lo, hi) that
    came up, the real select on that pair, drawn as many times as the pair came up."""
    real = Computer.select

    def select(self, values, spec, alpha, epsilon, within=None):
        if within is None:
            return real(self, values, spec, alpha, epsilon)
        batch, (lo, hi) = self.rng, within
        out = np.empty(len(lo))
        for pair in np.unique(np.stack([lo, hi]), axis=1).T:
            chosen = (lo == pair[0]) & (hi == pair[1])
            self.rng = Batch(int(pair.sum()) + 7, int(chosen.sum()))
            out[chosen] = real(self, values, spec, alpha, epsilon, tuple(pair))
        self.rng = batch
        return out

    monkeypatch.setattr(Computer, "select", select)


def _whole_quantile(data, seed, epsilon):
    """One group's whole median (the real `Computer.interval` and `Computer.estimate`, N draws
    at once through `_vectorised_select`) under replace-one at the requested `epsilon`, over 3
    candidates: the pair of ends (lo, hi), then the estimate among the candidates inside them.
    Projection: lo's candidate index * 9 + hi's * 3 + the estimate's."""
    request = parse_request(SCHEMA, {"stat": ["median:x"], "by": ["g"]}, epsilon=epsilon,
                            neighbouring="replace-one")  # fmt: skip
    spec = SCHEMA.column("x")
    run = Computer(data, SCHEMA, request, "replace-one", Batch(seed, N))
    values = run.values("x")[0]
    estimate, lo, hi = run.estimate(
        values, spec, 0.5, epsilon, run.interval(values, spec, 0.5, epsilon, None)
    )
    grid = np.asarray(statistics.candidates(spec, quantiles.CANDIDATES))
    return sum(np.searchsorted(grid, v) * w for v, w in ((lo, 9), (hi, 3), (estimate, 1)))


@pytest.mark.audit
@pytest.mark.parametrize("twin", [False, True], ids=["honest", "sensitivity not doubled"])
def test_whole_quantile_under_replace_one_at_the_requested_epsilon(twin, monkeypatch):
    """Issue 41 item 6. The whole median of one group (ends, then estimate: 18 outputs) on
    replace-one neighbours (REPLACED, REPLACING), n = 10^5 draws per side, alpha = 10^-6
    family-wise, claiming the epsilon requested for the statistic (1). The ends' public rank
    offset M is set to 0 and the candidates to 3 (power; the guarantee holds for any public M
    and candidates). Twin: the rank sensitivity without the replace-one doubling (its
    add/remove value max(alpha, 1 - alpha)), which spends about 1.67 epsilon here."""
    epsilon = 1.0
    for name in ("CANDIDATES", "END_CANDIDATES", "INNER_CANDIDATES"):
        monkeypatch.setattr(quantiles, name, 3)
    monkeypatch.setattr(quantiles, "quantile_rank_margin", lambda *a: 0.0)
    _vectorised_select(monkeypatch)
    if twin:
        real = quantiles.rank_sensitivity
        monkeypatch.setattr(quantiles, "rank_sensitivity", lambda a, nb: real(a, "add-remove"))
    draws = [_whole_quantile(d, seed, epsilon) for d, seed in ((REPLACED, 31), (REPLACING, 32))]
    result = audit_neighbours(*draws, epsilon=epsilon, thresholds=np.arange(27), alpha=ALPHA)
    assert result.passed is not twin, result.summary()


# ------------------------------------------------- missing values under replace-one, no groups

SCHEMA_MISSING = Schema.from_dict(
    {"columns": [{"name": "x", "type": "numeric", "lower": 50, "upper": 100, "bins": 5}]}
)
# replace-one neighbours: the first row's value (at the upper bound) turned missing
PRESENT = pd.DataFrame({"x": [100.0, 50.0]})
TURNED_MISSING = pd.DataFrame({"x": [np.nan, 50.0]})


def _missing_computer(data, stat, seed, factor):
    request = parse_request(SCHEMA_MISSING, {"stat": [stat]}, epsilon=1.0,
                            neighbouring="replace-one")  # fmt: skip
    return Computer(data, SCHEMA_MISSING, request, "replace-one", Batch(seed, N, factor))


@pytest.mark.audit
@pytest.mark.parametrize("factor, honest", [(1.0, True), (0.85, False)])
def test_count_of_present_values_under_replace_one(factor, honest):
    """The mean's count of present values: sensitivity 1 (OpenDP's sized 0/1 sum); twin:
    noise scale x 0.85."""
    epsilon = 1.0
    draws = []
    for data, seed in ((PRESENT, 21), (TURNED_MISSING, 22)):
        counts, scale = _missing_computer(data, "mean:x", seed, factor).noisy_counts(epsilon, "x")
        draws.append(counts[:, 0])
    grid = threshold_grid(2.0, 1.0, scale, integer=True)
    result = audit_neighbours(*draws, epsilon=epsilon, thresholds=grid, discrete=True,
                              alpha=ALPHA)  # fmt: skip
    assert result.passed is honest, result.summary()


@pytest.mark.audit
@pytest.mark.parametrize("widen, honest", [(True, True), (False, False)])
def test_sum_of_present_values_under_replace_one(widen, honest):
    """A value at the upper bound 100 turned missing moves the sum by 100, more than upper -
    lower = 50 (the sized bound for a changed value): the sum is sized on bounds widened
    to hold 0 (sensitivity 100). Twin: the bounds not widened (sensitivity 50)."""
    epsilon = 1.0
    draws = []
    for data, seed in ((PRESENT, 23), (TURNED_MISSING, 24)):
        run = _missing_computer(data, "sum:x", seed, 1.0)
        sums, sum_grid = run.noisy_sums(run.values("x"), 50.0, 100.0, epsilon, missing=widen)
        draws.append(sums[:, 0])
    scale = sum_grid.scale(epsilon)
    grid = threshold_grid(150.0, 50.0, scale, integer=False)
    result = audit_neighbours(*draws, epsilon=epsilon, thresholds=grid, discrete=False,
                              alpha=ALPHA)  # fmt: skip
    assert result.passed is honest, result.summary()


@pytest.mark.audit
@pytest.mark.parametrize("factor, honest", [(1.0, True), (0.85, False)])
def test_a_sums_own_count_at_a_quarter_of_its_epsilon(factor, honest):
    """A sum or quantile with no released count to read counts its own values (`support`),
    claimed here at a quarter of the epsilon asked for the statistic; twin: scale x 0.85."""
    epsilon = 4.0  # requested for the sum; its own count's claim: a quarter of it = 1
    own, _ = support.own_shares(epsilon)
    draws = []
    for data, seed in ((D, 25), (D2, 26)):
        counts, scale = _computer(data, "sum:x", seed, factor).noisy_counts(own, "x")
        draws.append(counts[:, 0])
    grid = threshold_grid(1.0, 0.0, scale, integer=True)
    result = audit_neighbours(*draws, epsilon=epsilon / 4, thresholds=grid, discrete=True,
                              alpha=ALPHA)  # fmt: skip
    assert result.passed is honest, result.summary()


@pytest.mark.audit
@pytest.mark.parametrize("taken_off, honest", [(True, True), (False, False)])
def test_a_sum_after_its_own_count_at_the_rest_of_its_epsilon(taken_off, honest):
    """The sum itself then claims three quarters of the epsilon asked; twin: the count's quarter
    not taken off (the sum spends the whole epsilon again)."""
    epsilon = 4 / 3  # requested for the sum; the rest after its own count: 3/4 of it = 1
    rest = support.own_shares(epsilon)[1] if taken_off else epsilon
    draws = []
    for data, seed in ((D, 27), (D2, 28)):
        run = _computer(data, "sum:x", seed)
        sums, sum_grid = run.noisy_sums(run.values("x"), 0.0, 100.0, rest)
        draws.append(sums[:, 0])
    scale = sum_grid.scale(rest)
    grid = threshold_grid(100.0, 0.0, scale, integer=False)
    result = audit_neighbours(*draws, epsilon=0.75 * epsilon, thresholds=grid, discrete=False,
                              alpha=ALPHA)  # fmt: skip
    assert result.passed is honest, result.summary()


def _grid_changes(low, high, seed, trials=2_000):
    """The largest change of the grid sums S >> GRID_SHIFT that one row makes, over `trials`
    random neighbouring tables (values at, near, between and beyond the bounds, some missing
    in the sized case): (add-remove, replace-one with two groups in L1, replace-one sized
    without missing values, the same with missing values)."""
    from mechanisms.statistics.aggregates import fixed_sum

    gen = np.random.default_rng(seed)
    picks = np.array([low, high, np.nextafter(high, low), np.nextafter(low, high), 2 * high - low])

    def values(size):
        inside = gen.uniform(low, high, size)
        return np.where(gen.random(size) < 0.5, gen.choice(picks, size), inside)

    def grid(v):
        return fixed_sum(v, low, high) >> measures.GRID_SHIFT

    worst = [0, 0, 0, 0]
    for _ in range(trials):
        a, b, (one, other) = values(int(gen.integers(0, 40))), values(5), values(2)
        worst[0] = max(worst[0], abs(grid(np.append(a, one)) - grid(a)))
        moved = abs(grid(np.append(a, one)) - grid(a)) + abs(grid(np.append(b, one)) - grid(b))
        worst[1] = max(worst[1], moved)
        worst[2] = max(worst[2], abs(grid(np.append(a, one)) - grid(np.append(a, other))))
        worst[3] = max(worst[3], abs(grid(np.append(a, one)) - grid(a)))  # `one` turned missing
    return worst


@pytest.mark.parametrize(
    "low, high", [(0.0, 100.0), (-5.0, 5.0), (0.3, 1.9999), (-1e6, 3.0), (18.0, 95.0)]
)
def test_one_rows_change_of_the_grid_sums_is_within_their_sensitivity(low, high):
    """`measures.sum_grid`'s bound, by brute force: on 2,000 random neighbouring tables per
    relation, one row moves the grid sums (S >> 32 of the exact fixed-point sums, L1 over
    groups) by at most the units the noise is scaled to, and on [0, 100] a row at the bound
    added or removed by exactly that (the bound is a whole number of units). Twin: the bound
    rounded down instead of up, which a row's change exceeds on bounds that are not whole units
    ([0.3, 1.9999])."""
    kinds = [("add-remove", None, False), ("replace-one", None, False),
             ("replace-one", 40, False), ("replace-one", 40, True)]  # fmt: skip
    worst = _grid_changes(low, high, seed=int(high * 7) % 1000)
    for change, (neighbouring, public_n, missing) in zip(worst, kinds, strict=True):
        units = measures.sum_grid(low, high, neighbouring, public_n, missing).units
        assert change <= units, (neighbouring, public_n, missing)
        if (low, high) == (0.0, 100.0) and neighbouring == "add-remove":
            assert change == units  # a row at 100 adds exactly 100 2^22 units
        if (low, high) == (0.3, 1.9999):
            twin = _rounded_down(low, high, neighbouring, public_n, missing)
            assert twin < units and change > twin, (neighbouring, public_n, missing)


def _rounded_down(low, high, neighbouring, public_n, missing):
    """The twin of `sum_grid`'s units: one row's largest change of S floored to the grid."""
    k = measures.sum_exponent(low, high)
    a, b = math.floor(math.ldexp(low, k)), math.floor(math.ldexp(high, k))
    if public_n is not None:
        return (max(b, 0 if missing else b) - min(a, 0 if missing else a)) >> measures.GRID_SHIFT
    moved = 1 if neighbouring == "add-remove" else 2
    return moved * (max(abs(a), abs(b)) >> measures.GRID_SHIFT)
