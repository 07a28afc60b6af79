"""The planner's promise for a dataset's release, and whether a release kept it (custodian only).

`plan_request` turns a dataset and release settings into the one plan request of
`mechanisms.planner`: the form's planner, the API's and the verdicts all go through it, so the
promise the planner makes before anything is spent is the one the verdict checks after (the
kinds' `planning_params` say what the form re-chooses at each ε).
`promised` gives that promise for a finished release at its own ε (range counts: on the
release's own ranges, from structure.json). The checks (`check`, `counts_check`) compare the
released outputs with the raw table: CUSTODIAN-ONLY, stored with the utility report.

The promise (`mechanisms.planner`): at least C of the outputs within ±H of the truth, as an
expected share. On one release with independent outputs (histogram cells, MWEM's measured
counts, statistics) the number within is judged with the exact binomial tail
(`planner.kept`: a release keeping the promise is called broken with probability below
1e-3). Range answers share their noise, so `range_verdict` judges them its own way.

Person level: the truth the promise is about is the table after bounding each person to k
rows, which is random and not stored. When bounding dropped rows (`utility.judged` counts them
from the raw person column) the check is not judged (`kept` None) and says why.
"""

import numpy as np

import mechanisms
from mechanisms import planner
from mechanisms.accounting import float_at_most


def plan_request(dataset, mechanism, columns, params, delta=0) -> planner.PlanRequest:
    """The plan request of a release of `dataset` with these settings (no ε: the planner's)."""
    return planner.PlanRequest(
        kind=mechanism,
        schema=mechanisms.Schema.from_dict(dataset.schema),
        columns=tuple(columns),
        params=dict(params),
        n=max(int(dataset.row_count or 0), 0),
        delta=float_at_most(delta),
        neighbouring=dataset.neighbouring,
    )


def promised(release) -> tuple[planner.Promise, ...] | None:
    """What the planner promises for this release at its ε; None when it cannot be planned."""
    request = plan_request(
        release.dataset, release.mechanism, release.columns, release.params or {}, release.delta
    )
    try:
        return planner.accuracy_at(request, float_at_most(release.epsilon))
    except (mechanisms.MechanismError, ArithmeticError):
        return None


def check(promise: planner.Promise, errors, *, dropped: int = 0) -> dict:
    """The promise against the outputs' absolute errors: how many within ±H, and its judgement.

    `kept`: the binomial judgement (`planner.kept`); None when rows were dropped by bounding
    (`dropped` > 0), as the truth is then unknown here. `vacuous`: ±H at least an average
    output, so the outputs say nothing (`Promise.vacuous`).
    """
    errors = np.asarray(errors, dtype=float)
    within = int(np.sum(errors <= promise.half_width + 1e-9))
    outputs = int(errors.size)
    return {
        "sentence": promise.sentence(),
        "half_width": promise.half_width,
        "unit": promise.unit,
        "confidence": promise.confidence,
        "outputs": outputs,
        "within": within,
        "share": within / outputs if outputs else 1.0,
        "kept": None if dropped else planner.kept(within, outputs, promise.confidence),
        "dropped_by_bounding": dropped,
        "vacuous": promise.vacuous(),
    }
