"""MWEM: multiplicative weights and the exponential mechanism (Hardt, Ligett & McSherry 2012).

Split along measure / post-process lines:

* ``distribution``: the synthetic distribution (factored or dense), its marginals, sampling;
* ``plan``: the budget split and rounds from public quantities only (``plan_budget``);
* ``measure``: the ONLY part that touches the data (true counts, noisy measurements, the
  exponential-mechanism selection), with its privacy guarantees;
* ``fit``: multiplicative-weights updates from the noisy measurements (post-processing);
* ``least_squares``: after the last round, the model fitted to every measurement at once by
  weighted least squares on a junction tree (post-processing);
* ``junction``: how the junction trees' cliques are chosen, and sums of products of tables;
* ``structural``: the "(missing)" and "(other)" cells, emptied where the noisy counts do not
  tell them from 0 (post-processing);
* ``release``: the mechanism ``mwem`` (and the ``measure_all`` baseline) and ``run_mwem``,
  which writes a release.

Exported here: what callers outside the package use. The submodules' other public names are
shared between the submodules; tests reach them (and private names) in their submodule.
"""

from mechanisms.mwem.distribution import QUICK_CELLS, FactoredDistribution
from mechanisms.mwem.fit import FINAL_PASSES, FLOOR_SHARE
from mechanisms.mwem.measure import (
    BOX_SENSITIVITY,
    expected_abs_noise,
    marginal_sensitivity,
    selection_candidates,
)
from mechanisms.mwem.plan import (
    ADD_REMOVE_INIT_FRACTION,
    MAX_DEFAULT_ROUNDS,
    MIN_DEFAULT_ROUNDS,
    SELECT_FRACTION,
    SELECTION_GAP,
    MwemPlan,
    default_plan,
    default_rounds,
    init_share,
    initial_fraction,
    plan_budget,
)
from mechanisms.mwem.release import (
    CELL_ORDER,
    DEFAULT_MEMORY_CELLS,
    RELEASE_PARAMS,
    WHOLE_TABLES,
    MwemResult,
    measure_all,
    mwem,
    parse_quick_cells,
    run_mwem,
    workload_spec,
)

# Explicit re-exports (mypy runs with implicit_reexport = false).
__all__ = [
    "ADD_REMOVE_INIT_FRACTION",
    "BOX_SENSITIVITY",
    "CELL_ORDER",
    "DEFAULT_MEMORY_CELLS",
    "FINAL_PASSES",
    "FLOOR_SHARE",
    "MAX_DEFAULT_ROUNDS",
    "MIN_DEFAULT_ROUNDS",
    "QUICK_CELLS",
    "RELEASE_PARAMS",
    "SELECTION_GAP",
    "SELECT_FRACTION",
    "WHOLE_TABLES",
    "FactoredDistribution",
    "MwemPlan",
    "MwemResult",
    "default_plan",
    "default_rounds",
    "expected_abs_noise",
    "init_share",
    "initial_fraction",
    "marginal_sensitivity",
    "measure_all",
    "mwem",
    "parse_quick_cells",
    "plan_budget",
    "run_mwem",
    "selection_candidates",
    "workload_spec",
]
