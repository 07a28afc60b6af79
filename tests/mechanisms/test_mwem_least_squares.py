"""MWEM's last fit by weighted least squares (issue 44, item 1; mechanisms.mwem.least_squares).

Post-processing of the noisy answers: these tests check the arithmetic (belief propagation on
a junction tree against the brute-force joint), that the fit reaches the weighted
least-squares answer where it is known in closed form (two measurements of one marginal: their
inverse-variance mean), that it never grows a cell the model holds at exactly 0 (the structural
rule's emptied cells), and that a block kept as a junction tree stays one, its cliques agreeing.
Each check has a twin that it catches. All are deterministic.
"""

import importlib

import numpy as np
import pytest

from mechanisms.accuracy import discrete_laplace_std
from mechanisms.mwem import FactoredDistribution, mwem
from mechanisms.mwem.fit import refit
from mechanisms.mwem.least_squares import _Junction, fit_least_squares
from mechanisms.mwem.structural import unsupported_cells
from mechanisms.noise import seeded_source
from mechanisms.workload import Query, expand_workload, marginals_spec

least_squares = importlib.import_module("mechanisms.mwem.least_squares")
SHAPE = (2, 3, 4, 2)
CHAIN = [(0, 1), (1, 2), (2, 3)]  # cliques of a junction tree over four attributes, a chain


def _brute_force(potentials):
    """Each clique's marginal of the normalised product of the potentials, from the joint."""
    joint = np.einsum("ab,bc,cd->abcd", *potentials)
    joint /= joint.sum()
    return [joint.sum(axis=(2, 3)), joint.sum(axis=(0, 3)), joint.sum(axis=(0, 1))]


def _chain_potentials():
    gen = np.random.default_rng(3)
    return [gen.uniform(0.1, 2.0, [SHAPE[a] for a in clique]) for clique in CHAIN]


def test_belief_propagation_gives_every_clique_its_marginal():
    junction = _Junction.of(CHAIN, [(0, 1), (1, 2)])
    potentials = _chain_potentials()
    for belief, wanted in zip(junction.calibrate(potentials), _brute_force(potentials)):
        assert np.allclose(belief, wanted, rtol=0, atol=1e-12)


def _upward_only(potentials):
    """The twin: each clique's potential times the messages from below it only (the chain
    rooted at its first clique): right at the root, wrong below it."""
    first, middle, leaf = potentials
    middle = middle * leaf.sum(axis=1)[None, :]
    first = first * middle.sum(axis=1)[None, :]
    return [table / table.sum() for table in (first, middle, leaf)]


def test_twin_without_the_downward_pass_is_caught():
    potentials = _chain_potentials()
    twin, wanted = _upward_only(potentials), _brute_force(potentials)
    assert np.allclose(twin[0], wanted[0], atol=1e-12)
    assert not all(np.allclose(b, w, atol=1e-12) for b, w in zip(twin, wanted))


def _two_measurements():
    """One attribute of 4 cells measured twice: scales 1 and 3 (the first 9 times as
    precise, about), on n = 100 rows; the targets disagree."""
    first = np.array([0.1, 0.2, 0.3, 0.4])
    second = np.array([0.4, 0.3, 0.2, 0.1])
    measured = [(Query((0,)), first, 1e-9), (Query((0,)), second, 1e-9)]
    return measured, [1.0, 3.0], 100


def _inverse_variance_mean(measured, scales):
    weights = [1 / discrete_laplace_std(s) ** 2 for s in scales]
    return sum(w * t for w, (_, t, _) in zip(weights, measured)) / sum(weights)


def test_the_fit_reaches_the_inverse_variance_mean_of_two_measurements():
    measured, scales, n = _two_measurements()
    model = FactoredDistribution.independent([np.ones(4)])
    fit_least_squares(model, measured, scales, n)
    wanted = _inverse_variance_mean(measured, scales)
    # within 5% of the more precise measurement's noise (the fit stops when a step gains less
    # than least_squares.SETTLED noise variances)
    close = 0.05 * discrete_laplace_std(scales[0]) / n
    assert np.allclose(model.marginal((0,)), wanted, atol=close), (model.marginal((0,)), wanted)


def test_twin_the_rounds_passes_alone_miss_it():
    """The twin: the last round's multiplicative passes (fit.refit) without the fit, which
    meet the two targets between them whatever their noise: far from the weighted mean."""
    measured, scales, _ = _two_measurements()
    model = FactoredDistribution.independent([np.ones(4)])
    refit(model, measured, None, "damped", last_round=True, every_target=True)
    wanted = _inverse_variance_mean(measured, scales)
    assert np.abs(model.marginal((0,)) - wanted).max() > 0.05


def _emptied_model(empty: float):
    """Two attributes, uniform but for cell (0, 2), which holds `empty`; a 2-way target
    that asks for 10% there."""
    joint = np.ones((2, 3))
    joint[0, 2] = empty
    model = FactoredDistribution((2, 3), [((0, 1), joint)])
    target = np.full(6, 0.9 / 5)
    target[2] = 0.1
    return model, [(Query((0, 1)), target, 1e-9)]


def test_a_cell_at_zero_stays_empty():
    model, measured = _emptied_model(0.0)
    fit_least_squares(model, measured, [2.0], 1000)
    fitted = model.marginal((0, 1))
    assert fitted[0, 2] == 0
    assert np.allclose(np.delete(fitted.ravel(), 2), 0.2, atol=1e-3)  # the rest fitted


def test_twin_a_fit_from_uniform_potentials_fills_it(monkeypatch):
    """What the test above rules out: a fit started from uniform potentials (private-PGM's
    default start) instead of the model gives the emptied cell most of the 10% asked."""
    monkeypatch.setattr(
        least_squares, "_start", lambda model, junction: [np.ones((2, 3))] * len(junction.cliques)
    )
    model, measured = _emptied_model(0.0)
    fit_least_squares(model, measured, [2.0], 1000)
    assert model.marginal((0, 1))[0, 2] > 0.05


def test_a_junction_tree_block_stays_a_junction_tree_with_cliques_that_agree():
    """A block kept as cliques (quick_cells small) is fitted on its own tree: after the
    release, neighbouring cliques have the same separator marginals."""
    gen = np.random.default_rng(5)
    a = gen.integers(0, 5, 4000)
    codes = np.stack([a, (a + gen.integers(0, 2, 4000)) % 5, gen.integers(0, 4, 4000)], axis=1)
    codes = np.concatenate([codes, codes[:, :1] % 3], axis=1)
    shape = (5, 5, 4, 3)
    workload = expand_workload(marginals_spec(2), ["a", "b", "c", "d"], shape, set())
    result = mwem(codes, shape, workload, epsilon=5.0, rng=seeded_source(2), quick_cells=40)
    trees = [t for t in result.distribution.trees() if len(t.cliques) > 1]
    assert trees, "the release kept a block as a junction tree"
    for tree in trees:
        for i, clique in enumerate(tree.cliques):
            for j in tree.neighbours[i]:
                held = tuple(sorted(set(clique.attrs) & set(tree.cliques[j].attrs)))
                if held:
                    assert np.allclose(
                        clique.marginal(held), tree.cliques[j].marginal(held), atol=1e-9
                    )


@pytest.mark.parametrize("structural", [True, False])
def test_the_release_empties_unsupported_structural_cells_before_the_fit(structural):
    """mwem with `structural` (the release's rule, given each column's "(missing)" cell)
    leaves the cells it zeroes at exactly 0 after the least-squares fit; without it, the
    fit puts mass there (the twin: the rule applied only after the fit, as before)."""
    gen = np.random.default_rng(11)
    codes = np.stack([gen.integers(0, 4, 5000), gen.integers(0, 3, 5000)], axis=1)
    shape = (5, 4)  # the last cell of each column is "(missing)", which no row holds
    cells = {0: [4], 1: [3]}
    workload = expand_workload(marginals_spec(2), ["a", "b"], shape, set())
    result = mwem(
        codes,
        shape,
        workload,
        epsilon=0.5,
        rng=seeded_source(4),
        rounds=2,
        structural=cells if structural else None,
    )
    zeroed = unsupported_cells(result.measurements, shape, cells)
    assert zeroed, "the noisy counts do not tell the empty cells from 0"
    fitted = [float(result.distribution.marginal((a,))[c]) for a, c in zeroed]
    if structural:
        assert fitted == [0.0] * len(zeroed)
    else:
        assert min(fitted) > 0
