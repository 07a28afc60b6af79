"""The package checks the browser test relies on: a good package passes, each planted fault is
caught (so a passing end-to-end run means the downloaded zip really was checked)."""

import hashlib
import io
import json
import zipfile

import pytest

from tests.e2e.package_checks import problems_in_package

pytestmark = pytest.mark.e2e

SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
        {"name": "sex", "type": "categorical", "categories": ["Female", "Male"]},
        {"name": "fnlwgt", "type": "ignored"},
    ]
}
RAW = b"age,sex,fnlwgt\r\n39,Male,77516\r\n50,Female,83311\r\n"
RAW_SHA = hashlib.sha256(RAW).hexdigest()
MANIFEST = {
    "mechanism": "mwem",
    "guarantee": {"epsilon": "0.5", "delta": 0, "unit": "one row", "neighbouring": "replace-one"},
}
SYNTHETIC = b"age,sex\r\n23.5,Female\r\n88,(other)\r\n"


def package(**changes) -> bytes:
    files = {
        "manifest.json": json.dumps(MANIFEST).encode(),
        "README.txt": b"read me",
        "synthetic.csv": SYNTHETIC,
    }
    files.update(changes)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in files.items():
            if content is not None:
                archive.writestr(f"release-7/{name}", content)
    return buffer.getvalue()


def check(zip_bytes, epsilon="0.5"):
    return problems_in_package(
        zip_bytes,
        epsilon=epsilon,
        columns=["age", "sex"],
        schema=SCHEMA,
        raw_bytes=RAW,
        raw_sha256=RAW_SHA,
    )


def test_a_good_package_has_no_problems():
    assert check(package()) == []


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ({"README.txt": None}, "missing README.txt"),
        ({"synthetic.csv": None}, "no data file"),
        ({"original.csv": RAW}, "custodian-only file original.csv"),
        ({"data.csv": RAW}, "contains the raw file"),
        (
            {"manifest.json": json.dumps({**MANIFEST, "input_sha256": RAW_SHA}).encode()},
            "fingerprint",
        ),
        ({"utility_report.html": b"<html>"}, "custodian-only file utility_report.html"),
        ({"synthetic.csv": b"age,sex,fnlwgt\r\n30,Male,77516\r\n"}, "not the released columns"),
        ({"synthetic.csv": b"age,sex\r\n95,Male\r\n"}, "values outside the schema: ['95']"),
        ({"synthetic.csv": b"age,sex\r\n30,Unknown\r\n"}, "values outside the schema: ['Unknown']"),
        ({"manifest.json": json.dumps({"mechanism": "mwem"}).encode()}, "no guarantee"),
    ],
)
def test_each_planted_fault_is_caught(fault, expected):
    problems = check(package(**fault))
    assert any(expected in problem for problem in problems), problems


def test_a_wrong_epsilon_in_the_manifest_is_caught():
    assert check(package(), epsilon="0.25") == ["manifest epsilon 0.5 is not 0.25"]
