"""MWEM's last fit: the model that fits every noisy measurement at once, by least squares.

The rounds fit one measurement at a time (``fit.refit``); where measurements disagree, that
ends near whichever was fitted last, whatever their noise. After the last round,
``fit_least_squares`` minimises

    L(p) = Σ_m w_m ‖q_m(p) − y_m‖²,   w_m = 1 / σ_m²,

over the distributions p that factorise as the model does (the start times one factor per
measured query): q_m(p) is the model's answer to measurement m (a marginal's cells, or a box's
share), y_m its target (``fit.final_targets``), σ_m the standard deviation of its noise as a
fraction of n. So each measurement weighs by its precision, and all of them pull at once. This
is the loss private-PGM fits (McKenna, Sheldon & Miklau 2019), by the same method, entropic
mirror descent on a junction tree: each clique's potential is multiplied by exp(−η·∇L) (the
gradient in the marginals of the measurements it holds), the clique marginals follow by belief
propagation, and the step η is halved until the loss falls by at least half of what the
gradient predicts (backtracking), and grows by half after each accepted step.

The junction tree is the block's own where the model keeps it as one (``distribution.Tree``),
else the triangulated graph of the measured queries (``junction.cliques_of``) when its cliques
hold fewer cells than the block's whole table. The fit starts from the model itself (its
clique marginals over its separators' marginals), so it only lowers the loss, and a cell the
model holds at 0 stays at 0: the release empties the "(missing)" and "(other)" cells the noisy
counts do not support before this fit (``structural``), because emptying them after it moved
the rest of the fit (2-way TVD up to twice the rounds' alone on military and fertility at ε 1
and 10). It stops when a step lowers L by less than SETTLED (a tenth of one noise variance),
after MAX_STEPS propagations, or after WORK_CELLS clique cells propagated in all; a block
whose cliques hold more than WORK_CELLS / MIN_STEPS cells (3.4 million) is not fitted at all
and stays as the rounds left it. That last rule trades accuracy for speed and memory: such a
block would get only a few steps, at several copies of its tables. On the tune half of
benchmarks/heldout.py the fit lowered 2-way TVD to 0.96, 0.93 and 0.87 of the rounds' alone
(geometric means at ε .1, 1 and 10), at 1.2 to 1.7 times the CPU (docs/mwem.md, "A
least-squares fit after the last round").

Post-processing only: it sees the noisy answers, their public noise scales and the model,
never the data, and draws nothing; the release's guarantee is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mechanisms.accuracy import discrete_laplace_std
from mechanisms.arrays import AnyArray
from mechanisms.mwem.distribution import FactoredDistribution, Tree, box_slices, marginals_of
from mechanisms.mwem.junction import cliques_of, divide, neighbours_of, rooted, sum_product
from mechanisms.workload import Query

Attrs = tuple[int, ...]
Measurement = tuple[Query, AnyArray, float]

MAX_STEPS = 200  # belief propagations at most (accepted steps and rejected ones) ...
WORK_CELLS = 1 << 26  # ... and at most this many clique cells propagated over them all;
MIN_STEPS = 20  # a block that would get fewer is left as the rounds fitted it
SETTLED = 0.1  # stop when a step lowers the loss by less than this (in noise variances)
GROWTH = 1.5  # the step grows by this after an accepted step, and halves after a rejected one
_TINY = 1e-300  # a step's scale and a message's sum are at least this (never a division by 0)


@dataclass
class _Junction:
    """A junction tree rooted at clique 0: each clique's parent, children and separator."""

    cliques: list[Attrs]
    parent: list[int | None]
    children: list[list[int]]
    separator: list[Attrs]  # with the parent (the root's is empty)
    order: list[int]  # breadth-first from the root

    @classmethod
    def of(cls, cliques: list[Attrs], edges: list[tuple[int, int]]) -> _Junction:
        parent, order = rooted(neighbours_of(len(cliques), edges), 0)
        assert len(order) == len(cliques), "a junction tree is connected"
        children: list[list[int]] = [[] for _ in cliques]
        separator: list[Attrs] = [()] * len(cliques)
        for j in order[1:]:
            up = parent[j]
            assert up is not None
            children[up].append(j)
            separator[j] = tuple(sorted(set(cliques[j]) & set(cliques[up])))
        return cls(cliques, parent, children, separator, order)

    def home(self, attrs: Attrs) -> int:
        """The smallest clique holding ``attrs``."""
        holding = [i for i, c in enumerate(self.cliques) if set(attrs) <= set(c)]
        return min(holding, key=lambda i: len(self.cliques[i]))

    def calibrate(self, phi: list[AnyArray]) -> list[AnyArray]:
        """Each clique's marginal of the distribution ∝ Π φ (two passes of messages)."""
        up: list[AnyArray] = [np.ones(())] * len(self.cliques)
        for j in reversed(self.order[1:]):
            message = sum_product(self._incoming(j, phi, up, None), self.separator[j])
            up[j] = message / message.sum()
        beliefs: list[AnyArray] = [np.ones(())] * len(self.cliques)
        down: list[AnyArray | None] = [None] * len(self.cliques)
        for j in self.order:
            belief = sum_product(self._incoming(j, phi, up, down[j]), self.cliques[j])
            beliefs[j] = belief / belief.sum()
            for child in self.children[j]:
                held = self.separator[child]
                summed = sum_product([(self.cliques[j], beliefs[j])], held)
                message = divide((held, summed), (held, up[child]))
                down[child] = message / max(float(message.sum()), _TINY)
        return beliefs

    def _incoming(
        self, j: int, phi: list[AnyArray], up: list[AnyArray], down: AnyArray | None
    ) -> list[tuple[Attrs, AnyArray]]:
        tables = [(self.cliques[j], phi[j])]
        tables += [(self.separator[c], up[c]) for c in self.children[j]]
        if down is not None:
            tables.append((self.separator[j], down))
        return tables


def fit_least_squares(
    model: FactoredDistribution,
    measured: list[Measurement],
    scales: list[float],
    n: int,
) -> None:
    """Refit ``model`` to every measurement by weighted least squares (module docstring).

    ``measured``: (query, target as a fraction of n, floor) as the rounds kept them (the floor
    is not used); ``scales``: each one's discrete Laplace noise scale. Nothing happens when a
    scale is 0 (ε infinite: the answers are exact, and the rounds' fit meets them).
    """
    if not measured or not all(scale > 0 for scale in scales):
        return
    weights = [(n / discrete_laplace_std(scale)) ** 2 for scale in scales]
    for tree in model.trees():
        inside = [
            (query, np.asarray(target, dtype=float), weight)
            for (query, target, _), weight in zip(measured, weights, strict=True)
            if set(query.attrs) <= set(tree.attrs)
        ]
        if inside:
            _fit_block(model, tree, inside, MAX_STEPS)


def _fit_block(
    model: FactoredDistribution,
    tree: Tree,
    inside: list[tuple[Query, AnyArray, float]],
    max_steps: int,
) -> None:
    """Fit one block of the model to the measurements inside it, and put the result in.

    ``max_steps`` bounds the belief propagations (accepted steps and rejected ones).
    """
    junction = _junction_of(model, tree, [query.attrs for query, *_ in inside])
    cells = sum(math.prod(model.shape[a] for a in clique) for clique in junction.cliques)
    max_steps = min(max_steps, WORK_CELLS // cells)
    if max_steps < MIN_STEPS:
        return  # too large a block to fit in time: left as the rounds fitted it
    homes = [junction.home(query.attrs) for query, *_ in inside]
    phi = _start(model, junction)
    beliefs = junction.calibrate(phi)
    answers = _answers(junction, beliefs, inside, homes)
    loss, gradients = _loss(inside, answers)
    step = 1 / max(max(float(np.abs(g).max()) for g in gradients), _TINY)
    pushes = _pushes(junction, inside, homes, gradients, model.shape)
    for _ in range(max_steps):
        moved = list(phi)
        for j, (attrs, push) in pushes.items():
            factor = np.exp(-step * (push - push.max()))
            dims = [model.shape[a] if a in attrs else 1 for a in junction.cliques[j]]
            moved[j] = phi[j] * factor.reshape(dims)
        new_beliefs = junction.calibrate(moved)
        new_answers = _answers(junction, new_beliefs, inside, homes)
        new_loss, new_gradients = _loss(inside, new_answers)
        predicted = sum(
            float(np.sum(g * (a - b)))
            for g, a, b in zip(gradients, answers, new_answers, strict=True)
        )
        if new_loss > loss - 0.5 * predicted:
            step /= 2
            continue
        settled = loss - new_loss <= SETTLED
        for j in pushes:
            moved[j] /= moved[j].max()  # a new array: the step's product
        phi = moved
        beliefs, answers, loss, gradients = new_beliefs, new_answers, new_loss, new_gradients
        pushes = _pushes(junction, inside, homes, gradients, model.shape)
        step *= GROWTH
        if settled:
            break
    _install(model, tree, junction, beliefs)


def _pushes(
    junction: _Junction,
    inside: list[tuple[Query, AnyArray, float]],
    homes: list[int],
    gradients: list[AnyArray],
    shape: tuple[int, ...],
) -> dict[int, tuple[Attrs, AnyArray]]:
    """Each clique's step direction: the sum of its measurements' gradients.

    As a table over the union of their attributes, so a step multiplies the clique by one
    broadcast factor.
    """
    held: dict[int, list[int]] = {}
    for m, home in enumerate(homes):
        held.setdefault(home, []).append(m)
    pushes = {}
    for j, ms in held.items():
        attrs = tuple(sorted({a for m in ms for a in inside[m][0].attrs}))
        table = np.zeros([shape[a] for a in attrs])
        for m in ms:
            table += _on_clique(inside[m][0], gradients[m], attrs, shape)
        pushes[j] = (attrs, table)
    return pushes


def _junction_of(model: FactoredDistribution, tree: Tree, measured: list[Attrs]) -> _Junction:
    """The block's own junction tree, or one of the measured queries when it is smaller."""
    if len(tree.cliques) > 1:
        edges = [(i, j) for i in range(len(tree.cliques)) for j in tree.neighbours[i] if i < j]
        return _Junction.of([c.attrs for c in tree.cliques], edges)
    covered = {a for attrs in measured for a in attrs}
    blocks = [*measured, *((a,) for a in tree.attrs if a not in covered)]
    cliques, edges = cliques_of(blocks, (), model.shape)
    cells = sum(math.prod(model.shape[a] for a in c) for c in cliques)
    if cells >= tree.cells:
        return _Junction.of([tree.attrs], [])
    return _Junction.of(cliques, edges)


def _start(model: FactoredDistribution, junction: _Junction) -> list[AnyArray]:
    """Potentials of the model itself: each clique's marginal over its separator's.

    0 where the model has no mass, and a step multiplies, so a cell emptied before the fit
    (the structural rule's) stays empty.
    """
    phi = []
    for j, clique in enumerate(junction.cliques):
        table = np.array(model.marginal(clique), dtype=float)
        held = junction.separator[j]
        if held:
            table = divide((clique, table), (held, model.marginal(held)))
        phi.append(table / table.max())
    return phi


def _answers(
    junction: _Junction,
    beliefs: list[AnyArray],
    inside: list[tuple[Query, AnyArray, float]],
    homes: list[int],
) -> list[AnyArray]:
    """The model's answer to each measurement, as its target is shaped."""
    wanted: dict[int, list[Attrs]] = {}
    for (query, *_), home in zip(inside, homes, strict=True):
        wanted.setdefault(home, []).append(query.attrs)
    found = {
        j: dict(zip(sets, marginals_of(junction.cliques[j], beliefs[j], sets), strict=True))
        for j, sets in wanted.items()
    }
    answers = []
    for (query, target, _), home in zip(inside, homes, strict=True):
        marginal = found[home][query.attrs]
        if query.box is None:
            answers.append(marginal.reshape(target.shape))
        else:
            answers.append(np.atleast_1d(marginal[box_slices(query)].sum()))
    return answers


def _loss(
    inside: list[tuple[Query, AnyArray, float]], answers: list[AnyArray]
) -> tuple[float, list[AnyArray]]:
    """L, and its gradient in each measurement's answer (2·w·residual)."""
    loss, gradients = 0.0, []
    for (_, target, weight), answer in zip(inside, answers, strict=True):
        residual = answer - target
        loss += weight * float(np.sum(residual**2))
        gradients.append(2 * weight * residual)
    return loss, gradients


def _on_clique(query: Query, gradient: AnyArray, into: Attrs, shape: tuple[int, ...]) -> AnyArray:
    """An answer's gradient as a table over the query's attributes, to broadcast into ``into``.

    A box's gradient is its value inside the box and 0 outside.
    """
    dims = [shape[a] for a in query.attrs]
    if query.box is None:
        table = gradient.reshape(dims)
    else:
        table = np.zeros(dims)
        table[box_slices(query)] = gradient[0]
    return table.reshape([shape[a] if a in query.attrs else 1 for a in into])


def _install(
    model: FactoredDistribution, tree: Tree, junction: _Junction, beliefs: list[AnyArray]
) -> None:
    """The fitted block into the model: the tree's calibrated cliques, or its whole table.

    The whole table is the root's marginal times each other clique's given its separator.
    """
    if len(tree.cliques) > 1:
        edges = [(j, p) for j, p in enumerate(junction.parent) if p is not None]
        model.replace_block(list(zip(junction.cliques, beliefs, strict=True)), edges)
        return
    tables = [(junction.cliques[0], beliefs[0])]
    for j in junction.order[1:]:
        clique, held = junction.cliques[j], junction.separator[j]
        given = divide((clique, beliefs[j]), (held, sum_product([(clique, beliefs[j])], held)))
        tables.append((clique, given))
    joint = sum_product(tables, tree.attrs)
    model.replace_block([(tree.attrs, joint / joint.sum())], [])
