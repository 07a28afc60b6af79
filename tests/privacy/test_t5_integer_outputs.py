"""T5 (the numerics half; the AST rule is tests/mechanisms/test_noise.py, bandit is
tests/dpportal/test_static_rules_bandit.py): released noisy values are integers, and the only
privacy primitives a release draws are the exact integer samplers (discrete Laplace, discrete
Gaussian) and report-noisy-max. Real-valued outputs (range answers, synthetic values) are
post-processing of those. The twin draws float Laplace noise and must be flagged.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

import mechanisms
from mechanisms.noise import RandomSource, RecordingSource, seeded_source
from mechanisms.range_count import api as range_api
from mechanisms.range_count import random_halfspaces
from tests.privacy.replay import _leaves
from tests.privacy.test_t3_t4_record_replay import SCHEMA

DATA = pd.DataFrame(
    {"x": np.linspace(0, 100, 60), "y": np.linspace(10, 0, 60), "g": list("abcz") * 15}
)
EXACT_PRIMITIVES = {"discrete_laplace", "discrete_gaussian", "report_noisy_max"}
# random_halfspaces draws its public directions with the source's (float) gaussian: drawn here
# beforehand, so that the release's recording holds only the noise added to data.
HALFSPACES = random_halfspaces(
    range_api.support_from_schema(SCHEMA, ["x", "y"], {}), 12, seeded_source(2)
)
RELEASES = [  # (name, columns, params, delta)
    ("perturbed_histogram", ["x", "g"], {}, 0.0),
    ("smoothed_histogram", ["x", "g"], {"rows": 30}, 0.0),
    ("mwem", ["x", "g"], {"rounds": 3}, 0.0),
    ("range_count", ["x", "y"], {"mechanism": "tree", "prefixes": True}, 0.0),
    ("range_count", ["x", "y"], {"mechanism": "mn12", "workload": HALFSPACES}, 1e-6),
    ("range_count", ["x", "y"], {"mechanism": "identity", "prefixes": True}, 1e-6),
]


def released_noisy_values(name: str, output) -> np.ndarray:
    """The values that carry privacy noise, as published."""
    if name in ("perturbed_histogram", "smoothed_histogram"):
        table = pd.read_csv(io.BytesIO(output.files["noisy_counts.csv"]))
        value = "noisy_count" if name == "perturbed_histogram" else "synthetic_count"
        return table[value].to_numpy()
    if name == "mwem":
        measurements = json.loads(output.files["measurements.json"])["measurements"]
        return np.concatenate([np.asarray(m["noisy_answer"]) for m in measurements])
    noisy = json.loads(output.files["structure.json"])["noisy"]
    return np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in _leaves(noisy)])


def integer_valued(values: np.ndarray) -> bool:
    values = np.asarray(values)
    return values.dtype.kind in "iu" or bool(np.all(np.mod(values.astype(float), 1) == 0))


def run(name, columns, params, delta, source):
    return mechanisms.run_release(
        name, DATA, SCHEMA, columns=columns, params=params, epsilon=1.0, delta=delta, rng=source
    )


@pytest.mark.parametrize(
    "name, columns, params, delta",
    RELEASES,
    ids=[f"{r[0]}-{r[2].get('mechanism', '')}" for r in RELEASES],
)
def test_released_noisy_values_are_integers_from_exact_samplers(name, columns, params, delta):
    source = RecordingSource(seeded_source(4))
    output = run(name, columns, params, delta, source)
    values = released_noisy_values(name, output)
    primitives = {c.primitive for c in source.noise_calls()}
    print(
        f"\nFIGURE T5 {name} {params.get('mechanism', '')}: {values.size} released noisy "
        f"values, all integers; primitives {sorted(primitives) or ['none (sampling)']}"
    )
    assert values.size > 0 and integer_valued(values)
    assert primitives <= EXACT_PRIMITIVES


class FloatLaplace(RandomSource):
    """Twin: continuous Laplace noise where integer noise is required."""

    def __init__(self):
        self.inner = seeded_source(4)

    def discrete_laplace(self, scale, size):
        return self.inner.laplace(scale, size)

    def uniform(self, size):
        return self.inner.uniform(size)

    def multinomial(self, n, probabilities):
        return self.inner.multinomial(n, probabilities)

    def shuffle(self, values):
        self.inner.shuffle(values)


def test_float_noise_is_flagged():
    output = run("perturbed_histogram", ["x", "g"], {}, 0.0, FloatLaplace())
    assert not integer_valued(released_noisy_values("perturbed_histogram", output))
