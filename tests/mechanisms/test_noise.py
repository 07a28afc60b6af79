"""Samplers: exact distributions (chi-square / KS, 10^5 draws), sources, recording, AST guard.

Each distribution test draws DRAWS = 10^5 samples at the true scale and requires p > 1e-6
against the exact distribution (false-alarm rate 1e-6 per test) and p < 1e-6 against the same
family at 0.7x and 1.3x the scale (the broken twins the test must tell apart).
"""

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from mechanisms import noise
from mechanisms.errors import MechanismError
from mechanisms.noise import (
    RecordingSource,
    exponential_mechanism,
    permute_and_flip,
    resolve_rng,
    secure_source,
    seeded_source,
)
from tests.helpers import randomness_uses
from tests.mechanisms.privacy_audit import audit_neighbours
from tests.mechanisms.stats_helpers import (
    DRAWS,
    P_ACCEPT,
    chi_square_p,
    discrete_gaussian_pmf,
    discrete_laplace_pmf,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
WRONG_FACTORS = (0.7, 1.3)
SOURCES = {"seeded": lambda: seeded_source(20261129), "secure": secure_source}


@pytest.mark.audit
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("scale", [0.5, 2.0, 20.0])
def test_it_draws_discrete_laplace_with_the_exact_pmf(source, scale):
    draws = SOURCES[source]().discrete_laplace(scale, DRAWS)
    assert draws.dtype == np.int64 and draws.shape == (DRAWS,)
    width = int(60 * scale) + 60

    def p_value(factor):
        return chi_square_p(draws, lambda k: discrete_laplace_pmf(scale * factor, k), width)

    assert p_value(1.0) > P_ACCEPT
    for factor in WRONG_FACTORS:
        assert p_value(factor) < P_ACCEPT, f"scale x{factor} not rejected"


@pytest.mark.audit
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("sigma", [1.5, 8.0])
def test_it_draws_discrete_gaussian_with_the_exact_pmf(source, sigma):
    draws = SOURCES[source]().discrete_gaussian(sigma, DRAWS)
    assert draws.dtype == np.int64
    width = int(60 * sigma) + 60

    def p_value(factor):
        return chi_square_p(draws, lambda k: discrete_gaussian_pmf(sigma * factor, k), width)

    assert p_value(1.0) > P_ACCEPT
    for factor in WRONG_FACTORS:
        assert p_value(factor) < P_ACCEPT, f"sigma x{factor} not rejected"


CONTINUOUS = {
    "laplace": stats.laplace,
    "gaussian": stats.norm,
    "gumbel": stats.gumbel_r,
}


@pytest.mark.audit
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("primitive", CONTINUOUS)
def test_it_draws_continuous_noise_with_the_exact_cdf(source, primitive):
    scale = 3.0
    draws = getattr(SOURCES[source](), primitive)(scale, DRAWS)
    assert stats.kstest(draws, CONTINUOUS[primitive](scale=scale).cdf).pvalue > P_ACCEPT
    for factor in WRONG_FACTORS:
        wrong = CONTINUOUS[primitive](scale=scale * factor).cdf
        assert stats.kstest(draws, wrong).pvalue < P_ACCEPT, f"scale x{factor} not rejected"


SELECTIONS = 20_000


def _exponential_probabilities(scores, epsilon, sensitivity):
    weights = np.exp(epsilon * np.asarray(scores) / (2 * sensitivity))
    return weights / weights.sum()


def _permute_and_flip_probabilities(scores, epsilon, sensitivity):
    """Exact, from permute-and-flip's definition: in a uniformly random order, candidate r is
    accepted with probability exp(epsilon (u_r - max u) / (2 sensitivity)); the first accepted
    is returned (McKenna and Sheldon 2020)."""
    u = np.asarray(scores, dtype=float)
    accept = np.exp(epsilon * (u - u.max()) / (2 * sensitivity))
    out = np.zeros(u.size)
    orders = list(itertools.permutations(range(u.size)))
    for order in orders:
        left = 1.0
        for r in order:
            out[r] += left * accept[r]
            left *= 1 - accept[r]
    return out / len(orders)


SELECTORS = {
    "exponential mechanism": (exponential_mechanism, _exponential_probabilities),
    "permute-and-flip": (permute_and_flip, _permute_and_flip_probabilities),
}


@pytest.mark.audit
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("selector", SELECTORS)
def test_it_selects_with_the_exact_probabilities(source, selector):
    """20,000 selections, chi-square against the exact probabilities: the true epsilon must give
    p > P_ACCEPT (1e-6, the false-alarm rate); the twins (epsilon x0.7, x1.3) must give p below
    it. At 20,000 draws each twin's noncentrality is 671 against a critical value of 33 (3
    degrees of freedom) for the exponential mechanism, so a twin is missed with probability <
    1e-100, as at 10^5 draws; permute-and-flip (report-noisy-max with exponential noise) has its
    own exact probabilities, the same check."""
    select, probabilities = SELECTORS[selector]
    scores, epsilon, sensitivity = [0.0, 1.0, 2.0, 3.5], 1.0, 1.0
    rng = SOURCES[source]()
    picks = [
        select(scores, epsilon=epsilon, sensitivity=sensitivity, rng=rng) for _ in range(SELECTIONS)
    ]
    observed = np.bincount(picks, minlength=len(scores))
    for factor, should_accept in ((1.0, True), (0.7, False), (1.3, False)):
        expected = probabilities(scores, epsilon * factor, sensitivity) * SELECTIONS
        p = stats.chisquare(observed, expected).pvalue
        assert (p > P_ACCEPT) == should_accept, f"epsilon x{factor}: p={p}"


@pytest.mark.parametrize(
    "scores", [[0.0, 1.0, 2.0, 3.5], [5.0, 5.0, -1.0, 4.0, 0.5, 5.0], [-40.0, 0.0, -0.25]]
)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 8.0])
def test_permute_and_flips_chances_are_its_exact_probabilities(scores, epsilon):
    """`permute_and_flip_chances` (the integral, for accuracy statements) equals the chances
    from permute-and-flip's own definition (every order enumerated) to 1e-9, ties and distant
    scores included; at infinite epsilon all on the first best. Twin: the chances at 0.7 times
    epsilon, which differ."""
    exact = _permute_and_flip_probabilities(scores, epsilon, 1.5)
    chances = noise.permute_and_flip_chances(scores, epsilon=epsilon, sensitivity=1.5)
    assert np.allclose(chances, exact, rtol=1e-9, atol=1e-12), (chances, exact)
    twin = noise.permute_and_flip_chances(scores, epsilon=0.7 * epsilon, sensitivity=1.5)
    assert not np.allclose(twin, exact, rtol=1e-9, atol=1e-12)
    at_infinity = noise.permute_and_flip_chances(scores, epsilon=np.inf, sensitivity=1.5)
    assert at_infinity.tolist() == [float(i == int(np.argmax(scores))) for i in range(len(scores))]


def test_it_is_exact_at_infinite_epsilon():
    assert exponential_mechanism([3, 9, 1, 9], epsilon=float("inf"), sensitivity=1) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scores": [1, 2], "epsilon": -1, "sensitivity": 1}, "epsilon (-1.0) must be > 0"),
        ({"scores": [1, 2], "epsilon": 1, "sensitivity": 0}, "sensitivity (0.0)"),
        ({"scores": [], "epsilon": 1, "sensitivity": 1}, "non-empty"),
        ({"scores": [1, float("nan")], "epsilon": 1, "sensitivity": 1}, "finite"),
    ],
)
def test_it_refuses_bad_exponential_mechanism_input(kwargs, message):
    scores = kwargs.pop("scores")
    with pytest.raises(MechanismError, match=message.replace("(", r"\(").replace(")", r"\)")):
        exponential_mechanism(scores, **kwargs)


@pytest.mark.parametrize("source", SOURCES)
def test_it_returns_zeros_at_scale_zero_and_refuses_bad_scales(source):
    rng = SOURCES[source]()
    assert not rng.discrete_laplace(0, (2, 3)).any()
    for bad in (float("inf"), -1.0, float("nan")):
        with pytest.raises(MechanismError, match="must be a finite number >= 0"):
            rng.discrete_laplace(bad, 3)


def test_it_reproduces_draws_from_the_same_seed():
    a, b = seeded_source(7), seeded_source(7)
    for rng in (a, b):
        rng.discrete_laplace(3, 5)
    assert np.array_equal(a.discrete_laplace(3, 50), b.discrete_laplace(3, 50))
    assert not np.array_equal(seeded_source(8).uniform(50), seeded_source(7).uniform(50))


def test_it_gives_fresh_unpredictable_secure_sources():
    assert not np.array_equal(secure_source().uniform(20), secure_source().uniform(20))
    assert not np.array_equal(
        secure_source().discrete_laplace(50, 20), secure_source().discrete_laplace(50, 20)
    )
    assert isinstance(resolve_rng(None), noise._SecureSource)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_it_refuses_bad_seeds(bad):
    with pytest.raises(MechanismError, match="seed"):
        seeded_source(bad)


def test_it_refuses_foreign_random_generators():
    with pytest.raises(MechanismError, match="seeded_source"):
        resolve_rng(np.random.default_rng(1))


def test_it_records_every_call_in_order():
    rec = RecordingSource(seeded_source(1))
    rec.discrete_laplace(2.0, (3, 4))
    rec.uniform(5)
    exponential_mechanism([1, 2], epsilon=2, sensitivity=1, rng=rec)
    assert [(c.primitive, c.scale, c.size) for c in rec.calls] == [
        ("discrete_laplace", 2.0, (3, 4)),
        ("uniform", None, (5,)),
        ("report_noisy_max", 1.0, (2,)),
    ]
    assert [c.primitive for c in rec.noise_calls()] == ["discrete_laplace", "report_noisy_max"]


def test_recording_does_not_change_the_draws():
    plain = seeded_source(3).discrete_laplace(4, 30)
    assert np.array_equal(RecordingSource(seeded_source(3)).discrete_laplace(4, 30), plain)


def test_no_mechanism_module_but_noise_touches_random_state():
    modules = sorted((REPO_ROOT / "mechanisms").rglob("*.py"))
    assert len(modules) >= 5
    noise_module = REPO_ROOT / "mechanisms" / "noise.py"
    offenders = {
        str(m.relative_to(REPO_ROOT)): uses
        for m in modules
        if m != noise_module and (uses := randomness_uses(ast.parse(m.read_text())))
    }
    assert offenders == {}


def test_the_ast_guard_catches_forbidden_randomness():
    for source in (
        "import random",
        "import numpy.random",
        "from numpy import random",
        "np.random.rand()",
        "rng = default_rng(1)",
        "from random import choice",
    ):
        assert randomness_uses(ast.parse(source)), source
    assert randomness_uses(ast.parse((REPO_ROOT / "mechanisms" / "noise.py").read_text()))


def _selections(select, scores, claimed_sensitivity, seed, n=100_000):
    rng = seeded_source(seed)
    return np.array(
        [select(scores, epsilon=1.0, sensitivity=claimed_sensitivity, rng=rng) for _ in range(n)]
    )


@pytest.mark.audit
@pytest.mark.parametrize("selector", SELECTORS)
@pytest.mark.parametrize("claimed, should_pass", [(1.0, True), (0.5, False)])
def test_selection_event_test_and_its_broken_twin(selector, claimed, should_pass):
    """Event test, n = 10^5 per side, alpha = 1e-6; neighbours move every score by 1 (the true
    sensitivity) in opposite directions. The twin claims sensitivity 1/2."""
    select = SELECTORS[selector][0]
    scores_d = np.zeros(20)
    scores_d2 = np.full(20, -1.0)
    scores_d2[0] = 1.0
    x = _selections(select, scores_d, claimed, seed=41) == 0
    x2 = _selections(select, scores_d2, claimed, seed=42) == 0
    result = audit_neighbours(x.astype(int), x2.astype(int), epsilon=1.0, thresholds=[0, 1])
    assert result.passed == should_pass, result.summary()
