"""MWEM: multiplicative weights and the exponential mechanism (Hardt, Ligett & McSherry 2012).

Split along measure / post-process lines:

* ``distribution``: the synthetic distribution (factored or dense), its marginals, sampling;
* ``plan``: the budget split and rounds from public quantities only (``plan_budget``);
* ``measure``: the ONLY part that touches the data (true counts, noisy measurements, the
  exponential-mechanism selection), with its privacy guarantees;
* ``fit``: multiplicative-weights updates from the noisy measurements (post-processing);
* ``release``: the mechanism ``mwem`` (and the ``measure_all`` baseline) and ``_run_mwem``,
  which writes a release.

Every name of the former single module ``mechanisms/mwem.py`` is importable from here.
"""

from mechanisms.mwem.distribution import (
    _INTERMEDIATE_CELLS,
    FactoredDistribution,
    _answer,
    _box_slices,
    _cells_of,
    _Group,
    _spread,
    _stamps,
)
from mechanisms.mwem.fit import (
    _SETTLED,
    FINAL_PASSES,
    FLOOR_SHARE,
    _damped_factor,
    _floor,
    _linked,
    _mw_update,
    _paper_factor,
    _refit,
)
from mechanisms.mwem.measure import (
    BOX_SENSITIVITY,
    _estimate_n,
    _expected_abs_noise,
    _measure,
    _select,
    _selection_scores,
    _sensitivity,
    _start,
    _TrueAnswers,
    marginal_sensitivity,
)
from mechanisms.mwem.plan import (
    ADD_REMOVE_INIT_FRACTION,
    MAX_DEFAULT_ROUNDS,
    MIN_DEFAULT_ROUNDS,
    SELECT_FRACTION,
    SELECTION_GAP,
    MwemPlan,
    _check_args,
    _check_counts,
    _check_dense_fits,
    _check_fractions,
    _check_noise_fits,
    _share,
    _split,
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
    MwemResult,
    _measurement_record,
    _run_mwem,
    _trace_entry,
    _workload_spec,
    measure_all,
    mwem,
)

__all__ = [
    "FactoredDistribution",
    "MwemPlan",
    "MwemResult",
    "default_rounds",
    "measure_all",
    "mwem",
    "plan_budget",
]

# Explicit re-exports (mypy runs with implicit_reexport = false).
__all__ = [
    "_INTERMEDIATE_CELLS",
    "FactoredDistribution",
    "_answer",
    "_box_slices",
    "_cells_of",
    "_Group",
    "_spread",
    "_stamps",
    "_SETTLED",
    "FINAL_PASSES",
    "FLOOR_SHARE",
    "_damped_factor",
    "_floor",
    "_linked",
    "_mw_update",
    "_paper_factor",
    "_refit",
    "BOX_SENSITIVITY",
    "_estimate_n",
    "_expected_abs_noise",
    "_measure",
    "_select",
    "_selection_scores",
    "_sensitivity",
    "_start",
    "_TrueAnswers",
    "marginal_sensitivity",
    "ADD_REMOVE_INIT_FRACTION",
    "MAX_DEFAULT_ROUNDS",
    "MIN_DEFAULT_ROUNDS",
    "SELECT_FRACTION",
    "SELECTION_GAP",
    "MwemPlan",
    "_check_args",
    "_check_counts",
    "_check_dense_fits",
    "_check_fractions",
    "_check_noise_fits",
    "_share",
    "_split",
    "default_plan",
    "init_share",
    "default_rounds",
    "initial_fraction",
    "plan_budget",
    "CELL_ORDER",
    "DEFAULT_MEMORY_CELLS",
    "RELEASE_PARAMS",
    "MwemResult",
    "_measurement_record",
    "_run_mwem",
    "_trace_entry",
    "_workload_spec",
    "measure_all",
    "mwem",
]
