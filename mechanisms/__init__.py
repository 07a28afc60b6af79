"""Differentially private release mechanisms: pure Python + NumPy, never Django.

Public API. Every mechanism is a row of mechanisms.catalogue.CATALOGUE (no self-registration).
"""

from mechanisms.accounting import (
    NEIGHBOURING,
    approx_dp_to_zcdp,
    zcdp_to_approx_dp,
)
from mechanisms.catalogue import (
    CATALOGUE,
    Guarantee,
    MechanismSpec,
    Parameter,
    reads_in_chunks,
    run_release,
    runs_where_data_lives,
)
from mechanisms.chunks import ChunkedTable
from mechanisms.errors import MechanismError
from mechanisms.histogram import (
    max_rows,
    min_admissible_mix,
    perturbed_histogram,
    recommended_bins,
    smoothed_histogram,
)
from mechanisms.mwem import mwem
from mechanisms.noise import (
    RandomSource,
    RecordingSource,
    exponential_mechanism,
    resolve_rng,
    secure_source,
    seeded_source,
)
from mechanisms.plans import NoisePlan
from mechanisms.range_count import answer_queries, range_count
from mechanisms.release import (
    DEFAULT_SYNTHETIC_ROWS,
    PACKAGE_VERSION,
    ReleaseOutput,
    public_manifest,
    write_release,
)
from mechanisms.release_request import MechanismInputs, PlanInputs
from mechanisms.schema import Schema

__version__ = PACKAGE_VERSION

__all__ = [
    "CATALOGUE",
    "DEFAULT_SYNTHETIC_ROWS",
    "NEIGHBOURING",
    "ChunkedTable",
    "Guarantee",
    "MechanismError",
    "MechanismInputs",
    "MechanismSpec",
    "NoisePlan",
    "Parameter",
    "PlanInputs",
    "RandomSource",
    "RecordingSource",
    "ReleaseOutput",
    "Schema",
    "__version__",
    "answer_queries",
    "approx_dp_to_zcdp",
    "exponential_mechanism",
    "max_rows",
    "min_admissible_mix",
    "mwem",
    "perturbed_histogram",
    "public_manifest",
    "range_count",
    "reads_in_chunks",
    "runs_where_data_lives",
    "recommended_bins",
    "resolve_rng",
    "run_release",
    "secure_source",
    "seeded_source",
    "smoothed_histogram",
    "write_release",
    "zcdp_to_approx_dp",
]
