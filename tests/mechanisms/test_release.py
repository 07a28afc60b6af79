"""The release entry point: validation, the one manifest shape, the spend check, writing files."""

import json

import pandas as pd
import pytest

from mechanisms import catalogue, release
from mechanisms.catalogue import CATALOGUE, MechanismSpec, pure_guarantee, run_release
from mechanisms.errors import MechanismError
from mechanisms.noise import seeded_source
from mechanisms.plans import perturbed_plan
from mechanisms.release import ReleaseOutput, file_sha256, public_manifest, write_release
from mechanisms.release_request import MechanismInputs
from mechanisms.schema import Schema

SCHEMA = Schema.from_dict(
    {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 2}]}
)
DATA = pd.DataFrame({"x": [0.1, 0.7]})


def toy_spec(name, run):
    return MechanismSpec(
        name=name,
        title=name,
        summary=name,
        run=run,
        parameters=(),
        plan=perturbed_plan,
        guarantee=pure_guarantee,
        files={"out.csv": "a file"},
    )


@pytest.fixture
def echo_mechanism(monkeypatch):
    seen = {}

    def echo(inputs: MechanismInputs):
        seen.update(vars(inputs))
        spent = {"epsilon": inputs.epsilon, "delta": 0.0}
        return ReleaseOutput({"out.csv": b"a\n"}, {"parameters": {}}, spent=spent)

    monkeypatch.setitem(CATALOGUE, "test_echo", toy_spec("test_echo", echo))
    return seen


def test_it_runs_a_registered_mechanism_and_completes_the_manifest(echo_mechanism):
    out = run_release("test_echo", DATA, SCHEMA, epsilon=0.5, params={"rows": 3})
    assert echo_mechanism["columns"] == ["x"] and echo_mechanism["params"] == {"rows": 3}
    assert echo_mechanism["neighbouring"] == "replace-one" and echo_mechanism["delta"] == 0
    assert out.manifest["mechanism"] == "test_echo"
    assert out.manifest["package_version"] == release.PACKAGE_VERSION
    assert "input_sha256" not in out.manifest  # nothing computed from the raw data
    assert public_manifest({**out.manifest, "input_sha256": "ab" * 32}) == out.manifest


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epsilon": 0}, r"epsilon \(0\) must be > 0"),
        ({"epsilon": 1, "delta": 2}, r"delta \(2\)"),
        ({"epsilon": 1, "neighbouring": "swap"}, "neighbouring"),
        ({"epsilon": 1, "columns": ["y"]}, r"column \('y'\) is not in the schema"),
    ],
)
def test_it_validates_common_parameters(echo_mechanism, kwargs, message):
    with pytest.raises(MechanismError, match=message):
        run_release("test_echo", DATA, SCHEMA, **kwargs)
    assert echo_mechanism == {}  # refused before the mechanism ran


def test_it_names_the_known_mechanisms_for_an_unknown_one():
    with pytest.raises(MechanismError, match=r"mechanism \('nope'\) is unknown; choose one of"):
        run_release("nope", DATA, SCHEMA, epsilon=1)


def test_it_writes_files_and_manifest(echo_mechanism, tmp_path):
    out = run_release("test_echo", DATA, SCHEMA, epsilon=1)
    out.manifest["input_sha256"] = "ab" * 32  # as an old stored manifest may carry
    paths = write_release(out, tmp_path / "pkg")
    assert sorted(p.name for p in paths) == ["manifest.json", "out.csv"]
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert "input_sha256" not in manifest and manifest["guarantee"]["epsilon"] == 1.0
    assert file_sha256(tmp_path / "pkg" / "out.csv") == (
        "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7"
    )


@pytest.mark.parametrize(
    "spent",
    [
        {"epsilon": 0.5000000000000001, "delta": 0.0},  # one float step above the request
        {"epsilon": 0.5, "delta": 1e-300},  # any delta above the requested 0
        {"epsilon": "inf", "delta": 0.0},
        {"delta": 0.0},  # no spend recorded at all
    ],
    ids=["epsilon-one-ulp-over", "delta-over", "infinite", "unreported"],
)
def test_it_refuses_an_output_whose_recorded_spend_exceeds_the_request(monkeypatch, spent):
    """A mechanism that lies (it spends more than it was given): nothing is returned."""

    def liar(inputs: MechanismInputs):
        return ReleaseOutput({"out.csv": b"a\n"}, {"parameters": {}}, spent=dict(spent))

    monkeypatch.setitem(CATALOGUE, "liar", toy_spec("liar", liar))
    with pytest.raises(MechanismError, match="nothing was released"):
        run_release("liar", DATA, SCHEMA, epsilon=0.5)


def test_its_honest_twin_at_exactly_the_request_is_accepted(monkeypatch):
    def honest(inputs: MechanismInputs):
        spent = {"epsilon": 0.5, "delta": 0.0}
        return ReleaseOutput({"out.csv": b"a\n"}, {"parameters": {}}, spent=spent)

    monkeypatch.setitem(CATALOGUE, "honest", toy_spec("honest", honest))
    out = run_release("honest", DATA, SCHEMA, epsilon=0.5)
    assert out.manifest["accounting"] == {"epsilon": 0.5, "delta": 0.0}


ADULT_LIKE = Schema.from_dict(
    {
        "columns": [
            {
                "name": "age",
                "type": "numeric",
                "lower": 0,
                "upper": 100,
                "bins": 4,
                "missing": "reject",
            },
            {
                "name": "size",
                "type": "numeric",
                "lower": 0,
                "upper": 10,
                "bins": 4,
                "missing": "reject",
            },
            {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
        ]
    }
)
ROWS = pd.DataFrame(
    {
        "age": [5.0, 25, 45, 65, 85, 30, 50, 70] * 5,
        "size": [1.0, 3, 5, 7, 9, 2, 4, 6] * 5,
        "sex": ["F", "M"] * 20,
    }
)
REAL_RUNS = [
    ("perturbed_histogram", ["age", "sex"], {}, 0.0, "replace-one"),
    ("perturbed_histogram", ["age", "sex"], {}, 0.0, "add-remove"),
    ("smoothed_histogram", ["age", "sex"], {"rows": 10}, 0.0, "replace-one"),
    ("mwem", ["age", "sex"], {"rounds": 2}, 0.0, "replace-one"),
    ("mwem", ["age", "sex"], {"rounds": 2}, 0.0, "add-remove"),
    ("range_count", ["age", "size"], {"prefixes": True}, 0.0, "replace-one"),
    (
        "range_count",
        ["age", "size"],
        {"random_halfspaces": 5, "mechanism": "mn12"},
        1e-6,
        "add-remove",
    ),
    ("range_count", ["age"], {"prefixes": True, "mechanism": "mn12_laplace"}, 1e-6, "replace-one"),
    ("statistics", ["age", "sex"], {"stat": ["count", "median:age"]}, 0.0, "replace-one"),
    ("statistics", ["age", "sex"], {"stat": ["mean:age"], "by": ["sex"]}, 0.0, "add-remove"),
    ("dp_schema_estimate", ["age", "size"], {"kind": "numeric"}, 0.0, "replace-one"),
    ("dp_schema_estimate", ["sex"], {"kind": "categorical"}, 1e-6, "add-remove"),
]


def test_every_real_mechanism_writes_the_one_manifest_shape():
    """Same top-level keys and the same guarantee block for every mechanism of the catalogue
    (each run at least once), the guarantee at the requested epsilon and delta, and a recorded
    spend within them."""
    real = {
        name for name, spec in CATALOGUE.items() if spec.run.__module__.startswith("mechanisms")
    }
    assert {run[0] for run in REAL_RUNS} == real  # test_sleep: tests only
    for name, columns, params, delta, neighbouring in REAL_RUNS:
        out = run_release(
            name,
            ROWS,
            ADULT_LIKE,
            epsilon=0.7,
            delta=delta,
            neighbouring=neighbouring,
            columns=columns,
            params=params,
            rng=seeded_source(1),
        )
        manifest = json.loads(release.json_bytes(out.manifest))
        assert tuple(manifest) == tuple(sorted(catalogue.MANIFEST_KEYS)), name
        guarantee = manifest["guarantee"]
        assert set(guarantee) == {
            "unit",
            "neighbouring",
            "definition",
            "epsilon",
            "delta",
            "rho",
            "sensitivity",
        }, name
        assert guarantee["unit"] == "one row of the input table"
        assert (guarantee["epsilon"], guarantee["delta"]) == (0.7, delta), name
        assert guarantee["neighbouring"] == neighbouring
        assert manifest["accounting"]["epsilon"] <= 0.7 and manifest["accounting"]["delta"] <= delta
        assert set(manifest["files"]) == set(out.files), name
