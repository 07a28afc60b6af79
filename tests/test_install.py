"""`pip install .` gives a working `dp-release` command outside the checkout (issue 12).

The sources the wheel is built from are copied to a temporary folder (the build writes
`build/` and `*.egg-info` beside them), built offline with the installed setuptools, installed
with `--target` into another temporary folder, and run from a third one with nothing of the
repository on the path. Dependencies come from the running environment; the wheel's metadata
must still declare every package of requirements.txt, in a range its pinned version meets.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO_ROOT

# The wheel is built once per module: under pytest-xdist all its tests run on one worker.
pytestmark = pytest.mark.xdist_group("wheel")

SOURCES = ["pyproject.toml", "README.md", "LICENSE", "mechanisms", "dpportal"]
SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 4},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
    ]
}


def pip(*args, cwd):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            *args,
            "--no-index",
            "--quiet",
            "--disable-pip-version-check",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel path, install folder) of the repository's wheel."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    wheels = tmp_path_factory.mktemp("wheels")
    pip(
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        str(wheels),
        str(source),
        cwd=source,
    )
    (wheel,) = wheels.glob("dpportal-*.whl")
    target = tmp_path_factory.mktemp("site")
    pip("install", "--no-deps", "--target", str(target), str(wheel), cwd=target)
    return wheel, target


def run_outside(installed, tmp_path, *args):
    """Run a command from an empty folder with only the installed copy on the path."""
    _, target = installed
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    env["PYTHONPATH"] = str(target)
    return subprocess.run(
        list(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_wheel_holds_both_packages_the_licence_the_command_and_the_dependencies(installed):
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert "mechanisms/__main__.py" in names and "mechanisms/range_count/mn12.py" in names
    assert "mechanisms/package/report.css" in names  # the report's stylesheet (package data)
    assert "dpportal/settings.py" in names and "dpportal/migrations/__init__.py" in names
    assert any(n.startswith(info) and "LICENSE" in n for n in names), names
    assert re.search(r"^dp-release = mechanisms\.__main__:main$", entry_points, re.M)
    declared = {}
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist: "):
            requirement = Requirement(line.removeprefix("Requires-Dist: "))
            declared[canonicalize_name(requirement.name)] = requirement.specifier
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split(" #", 1)[0].strip()  # pip allows a comment after the pin
        if line and not line.startswith("#"):
            pin = Requirement(line)
            (version,) = (s.version for s in pin.specifier)
            name = canonicalize_name(pin.name)
            assert name in declared, f"{pin.name} is pinned but not a dependency"
            assert declared[name].contains(version), (pin.name, version, str(declared[name]))


def test_dp_release_runs_a_release_from_a_folder_outside_the_repository(installed, tmp_path):
    _, target = installed
    command = target / "bin" / "dp-release"
    where = run_outside(
        installed, tmp_path, sys.executable, "-c", "import mechanisms; print(mechanisms.__file__)"
    )
    assert Path(where.stdout.strip()).is_relative_to(target), where.stdout + where.stderr

    help_text = run_outside(installed, tmp_path, str(command), "--help")
    assert help_text.returncode == 0, help_text.stderr
    assert "perturbed-histogram" in help_text.stdout and "mwem" in help_text.stdout

    pd.DataFrame({"age": [23, 35, 47, 61, 80], "sex": list("FMFMF")}).to_csv(
        tmp_path / "data.csv", index=False
    )
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    release = run_outside(
        installed,
        tmp_path,
        str(command),
        "perturbed-histogram",
        "--input",
        "data.csv",
        "--schema",
        "schema.json",
        "--epsilon",
        "1",
        "--out",
        "out",
    )
    assert release.returncode == 0, release.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["mechanism"] == "perturbed_histogram" and manifest["random_source"] == "secure"
    assert len(pd.read_csv(tmp_path / "out" / "synthetic.csv")) == 5
    assert (tmp_path / "out" / "report.pdf").read_bytes().startswith(b"%PDF")

    bad = run_outside(
        installed,
        tmp_path,
        str(command),
        "perturbed-histogram",
        "--input",
        "missing.csv",
        "--schema",
        "schema.json",
        "--epsilon",
        "1",
        "--out",
        "o2",
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
