"""A release at epsilon = inf writes valid files, and reads sensibly, for every kind that takes it.

epsilon = inf (no noise) is for tests: the Python API allows it, the command line and the
portal refuse it. JSON has no infinity: MWEM ("Out of range float values are not JSON
compliant: inf" while writing measurements.json) and range counts (rho and point losses in the
manifest) used to fail. Every infinite value is now the text "inf", as histograms already wrote
their epsilon, and the reports say "infinity". Summary statistics refuse inf with words.
"""

import json
import math

import numpy as np
import pandas as pd
import pytest

from mechanisms.catalogue import run_release
from mechanisms.errors import MechanismError
from mechanisms.noise import seeded_source
from mechanisms.package import PackageContext, build_package
from mechanisms.release import write_release
from mechanisms.schema import Schema

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 10, "bins": 8},
            {"name": "y", "type": "numeric", "lower": 0, "upper": 10, "bins": 8},
            {"name": "c", "type": "categorical", "categories": ["a", "b"]},
        ]
    }
)
DATA = pd.DataFrame(
    {"x": np.linspace(0, 10, 120), "y": np.linspace(10, 0, 120), "c": ["a", "b", "a"] * 40}
)
# kind: (mechanism, columns, params, delta, neighbouring)
KINDS = {
    "perturbed histogram": ("perturbed_histogram", ["x", "c"], {}, 0.0, "replace-one"),
    "smoothed histogram": ("smoothed_histogram", ["x", "c"], {}, 0.0, "replace-one"),
    "mwem, replace-one": ("mwem", ["x", "c"], {}, 0.0, "replace-one"),
    "mwem, add-remove": ("mwem", ["x", "c"], {}, 0.0, "add-remove"),
    "range count, pure": (
        "range_count",
        ["x", "y"],
        {"mechanism": "tree", "prefixes": True},
        0.0,
        "replace-one",
    ),
    "range count, zCDP": (
        "range_count",
        ["x", "y"],
        {"mechanism": "identity", "random_boxes": 5},
        1e-6,
        "add-remove",
    ),
}


def strict_json(content: bytes):
    """Parse as JSON proper: NaN, Infinity and -Infinity are not JSON."""

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(content, parse_constant=refuse)


@pytest.mark.parametrize("kind", KINDS)
def test_a_release_at_infinite_epsilon_writes_json_and_a_report_that_say_infinity(kind, tmp_path):
    mechanism, columns, params, delta, neighbouring = KINDS[kind]
    output = run_release(
        mechanism,
        DATA,
        SCHEMA,
        epsilon=math.inf,
        delta=delta,
        neighbouring=neighbouring,
        columns=columns,
        params=params,
        rng=seeded_source(3),
    )
    paths = write_release(output, tmp_path / "release")
    documents = {p.name: strict_json(p.read_bytes()) for p in paths if p.suffix == ".json"}
    manifest = documents["manifest.json"]
    assert manifest["guarantee"]["epsilon"] == "inf"
    assert manifest["accounting"]["epsilon"] == "inf"
    assert output.manifest == manifest  # the same text in memory, for the reports
    package = build_package(output.files, output.manifest, PackageContext(title="t"))
    for name, content in package.items():
        if name.endswith(".json"):
            strict_json(content)
    readme = package["README.txt"].decode()
    assert "infinity" in readme and "inf " not in readme.replace("infinity", "")


def test_summary_statistics_refuse_an_infinite_epsilon_with_words():
    with pytest.raises(MechanismError, match="epsilon must be finite for summary statistics"):
        run_release("statistics", DATA, SCHEMA, epsilon=math.inf, columns=["x"])
