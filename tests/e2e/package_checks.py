"""Checks on a downloaded public release package (the zip), shared by the end-to-end tests.

`problems_in_package` returns every problem found (empty list = good), so the tests can show all
of them at once and the twin tests can assert that each planted fault is caught.
"""

import csv
import io
import json
import zipfile
from decimal import Decimal

from mechanisms.schema import OTHER_LABEL

REQUIRED_FILES = {"manifest.json", "README.txt"}
DATA_FILES = {"synthetic.csv", "noisy_counts.csv", "answers.csv", "structure.json"}
CUSTODIAN_ONLY_WORDS = ("utility", "metric", "custodian", "original", "raw")


def read_package(zip_bytes: bytes) -> dict[str, bytes]:
    """Members by file name (the folder inside the zip stripped)."""
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as archive:
        return {
            name.rsplit("/", 1)[-1]: archive.read(name)
            for name in archive.namelist()
            if not name.endswith("/")
        }


def problems_in_package(
    zip_bytes: bytes,
    *,
    epsilon: str,
    columns: list[str],
    schema: dict,
    raw_bytes: bytes,
    raw_sha256: str,
) -> list[str]:
    """Everything wrong with a public package for a release of `columns` at `epsilon`."""
    files = read_package(zip_bytes)
    problems = [f"missing {name}" for name in sorted(REQUIRED_FILES - set(files))]
    if not DATA_FILES & set(files):
        problems.append(f"no data file (one of {sorted(DATA_FILES)}) in {sorted(files)}")
    problems += [
        f"custodian-only file {name} in the public package"
        for name in files
        if any(word in name.lower() for word in CUSTODIAN_ONLY_WORDS)
    ]
    if "manifest.json" in files:
        problems += manifest_problems(json.loads(files["manifest.json"]), epsilon)
    for name, content in files.items():
        if content == raw_bytes or raw_sha256.encode() in content:
            problems.append(f"{name} contains the raw file or its fingerprint")
    if "synthetic.csv" in files:
        problems += synthetic_problems(files["synthetic.csv"], columns, schema)
    return problems


def manifest_problems(manifest: dict, epsilon: str) -> list[str]:
    guarantee = manifest.get("guarantee")
    if not isinstance(guarantee, dict):
        return ["manifest has no guarantee"]
    problems = []
    if Decimal(str(guarantee.get("epsilon"))) != Decimal(epsilon):
        problems.append(f"manifest epsilon {guarantee.get('epsilon')} is not {epsilon}")
    if guarantee.get("neighbouring") not in ("replace-one", "add-remove"):
        problems.append(f"manifest neighbouring {guarantee.get('neighbouring')!r} is unknown")
    if not guarantee.get("unit"):
        problems.append("manifest guarantee does not name its privacy unit")
    return problems


def synthetic_problems(content: bytes, columns: list[str], schema: dict) -> list[str]:
    """The synthetic table has exactly the released columns, with values the schema allows."""
    rows = list(csv.DictReader(io.StringIO(content.decode("utf-8"))))
    if not rows:
        return ["synthetic.csv has no rows"]
    header = list(rows[0])
    if sorted(header) != sorted(columns):
        return [f"synthetic.csv columns {header} are not the released columns {columns}"]
    by_name = {column["name"]: column for column in schema["columns"]}
    problems = []
    for name in columns:
        allowed = value_check(by_name[name])
        bad = sorted({row[name] for row in rows if not allowed(row[name])})
        if bad:
            problems.append(f"synthetic.csv column {name} has values outside the schema: {bad[:5]}")
    return problems


def value_check(column: dict):
    """What a synthetic value of the column may be: inside its bounds or categories, or empty
    where the schema gives missing values their own cell (the default)."""
    inside = _inside_check(column)
    if column.get("missing", "cell") == "cell":
        return lambda value: value == "" or inside(value)
    return inside


def _inside_check(column: dict):
    if column["type"] == "numeric":
        lower, upper = float(column["lower"]), float(column["upper"])
        return lambda value: _is_number(value) and lower <= float(value) <= upper
    categories = set(column["categories"])
    if column.get("unknown", "other") == "other":
        categories.add(OTHER_LABEL)
    return lambda value: value in categories


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True
