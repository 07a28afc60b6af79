"""Event test (docs/testing-privacy.md section 1) of person-level bounding INSIDE an engine, at
the REQUESTED epsilon.

A person-level statistic on a Parquet table whose rows DuckDB bounds to K per person
(`EngineTable.bounded`, the path `run_release` takes for a source): D holds other people
(some with more than K rows) and person "p" with K + 3 rows; D' is D without p. The release's
randomness is the bounding secret and the noise: each side draws SEEDS seeds from the secure
source, runs the engine once per secret (the kept rows' count), and adds DRAWS noise draws of
the statistic's own noise step (`Computer.noisy_counts`, at the row-level budget
`persons.mechanism_budget` gives), so the samples are the mixture over seeds the release draws
from (SEEDS x DRAWS = 10^5 per side). Claim: the requested epsilon = 1. Broken twin: the engine
keeps K + 1 rows per person while the noise is calibrated for K (loss (K + 1) / K = 1.5 times
the claim), which the same audit must reject. False-alarm rate alpha = 1e-6 per audit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mechanisms import persons
from mechanisms.counting import TableSource, engine_table
from mechanisms.noise import secure_source
from mechanisms.schema import Schema
from mechanisms.statistics import Computer, parse_request
from tests.counting.engine_tables import write_parquet
from tests.mechanisms.privacy_audit import audit_neighbours, threshold_grid
from tests.mechanisms.test_statistics_privacy import Batch

K, EPSILON, ALPHA, SEEDS, DRAWS = 2, 1.0, 1e-6, 20, 5_000
SCHEMA = Schema.from_dict(
    {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 9, "bins": 3}]}
)
OTHERS = pd.DataFrame({"pid": [f"o{i % 5}" for i in range(23)], "x": np.arange(23) % 9 * 1.0})
D = pd.concat([OTHERS, pd.DataFrame({"pid": ["p"] * (K + 3), "x": [9.0] * (K + 3)})])


def samples(frame: pd.DataFrame, folder, kept: int, secret: int) -> np.ndarray:
    """SEEDS x DRAWS person-level noisy row counts, bounded to `kept` rows inside DuckDB."""
    source = TableSource(str(write_parquet(frame, folder / f"{len(frame)}.parquet")))
    table = engine_table(source, "duckdb")
    person = persons.PersonLevel("pid", K)
    row_epsilon = persons.mechanism_budget(person, EPSILON, 0.0, "add-remove")[0]
    request = parse_request(SCHEMA, {"stat": ["count"]}, epsilon=row_epsilon,
                            neighbouring="add-remove")  # fmt: skip
    out = []
    for i in range(SEEDS):
        bounded = table.bounded("pid", kept, persons.bounding_secret(secure_source()))
        run = Computer(bounded, SCHEMA, request, "add-remove", Batch(secret + i, DRAWS))
        counts, _ = run.noisy_counts(row_epsilon)
        out.append(counts[:, 0])
    return np.concatenate(out)


@pytest.mark.audit
@pytest.mark.parametrize("kept, honest", [(K, True), (K + 1, False)], ids=["honest", "twin"])
def test_bounding_inside_the_engine_at_the_requested_epsilon(kept, honest, tmp_path):
    x = samples(D, tmp_path, kept, 100)
    x2 = samples(OTHERS, tmp_path, kept, 200)
    grid = threshold_grid(float(np.median(x)), float(np.median(x2)), K / EPSILON)
    result = audit_neighbours(x, x2, epsilon=EPSILON, thresholds=grid, alpha=ALPHA)
    assert result.passed is honest, result.summary()
