"""The release registry: validation, manifest completion, writing files."""

import json

import pandas as pd
import pytest

from mechanisms import release
from mechanisms.errors import MechanismError
from mechanisms.release import (
    MECHANISMS,
    ReleaseOutput,
    file_sha256,
    public_manifest,
    register,
    run_release,
    write_release,
)
from mechanisms.schema import Schema

SCHEMA = Schema.from_dict(
    {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 2}]}
)
DATA = pd.DataFrame({"x": [0.1, 0.7]})


@pytest.fixture
def echo_mechanism():
    seen = {}

    def echo(data, schema, **kw):
        seen.update(kw)
        return ReleaseOutput({"out.csv": b"a\n"}, {"guarantee": {"epsilon": kw["epsilon"]}})

    register("test_echo", echo)
    yield seen
    del MECHANISMS["test_echo"]


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
    assert "input_sha256" not in manifest and manifest["guarantee"] == {"epsilon": 1.0}
    assert file_sha256(tmp_path / "pkg" / "out.csv") == (
        "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7"
    )
