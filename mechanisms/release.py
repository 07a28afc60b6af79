"""What every mechanism returns, and writing a release's public files.

A mechanism (a row of mechanisms.catalogue.CATALOGUE) returns a ReleaseOutput: its public
files, its parameters, what it spent and public plot data; `catalogue.run_release` completes
the manifest and `write_release` writes the files and manifest.json.

Nothing computed from the raw data besides mechanism output goes into a release: a hash of the
input is not differentially private (someone who knows all rows but one can test guesses of the
last), so the command line keeps it in a separate custodian record and the portal in its own
database. `public_manifest` still strips the fields of CUSTODIAN_ONLY_FIELDS, which manifests
stored before this rule may carry.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from mechanisms.errors import MechanismError

PACKAGE_VERSION = "0.1.0"
# Synthetic rows drawn when a release does not say how many: as many as the table has (or its
# noisy count), at most this many. Drawn from the same fitted model, more rows add no
# information (a million rows' sampling error is about 0.001 per cell share) but grow the
# worker's memory and the package with the table (MWEM on 10^8 rows: 5.2 GB): the output's size
# must not follow the table's. A release may ask for more.
DEFAULT_SYNTHETIC_ROWS = 1_000_000
CUSTODIAN_ONLY_FIELDS = ("input_sha256",)

Progress = Callable[[int, int], None]


@dataclass
class ReleaseOutput:
    """Public files of a release, its manifest, public plot data and what it spent."""

    files: dict[str, bytes]
    manifest: dict[str, Any]  # from a mechanism: {"parameters": ...}; run_release completes it
    trace: dict[str, Any] = field(default_factory=dict)
    spent: dict[str, Any] = field(
        default_factory=dict
    )  # {"epsilon", "delta", ...}: the recorded spend
    custodian: dict[str, Any] = field(default_factory=dict)  # owner-only facts, never published


def file_sha256(path: str | Path) -> str:
    """Hash of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def public_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without custodian-only fields (the raw input's hash, in old manifests)."""
    return {k: v for k, v in manifest.items() if k not in CUSTODIAN_ONLY_FIELDS}


def write_release(output: ReleaseOutput, out_dir: str | Path) -> list[Path]:
    """Write each public file of `output` and manifest.json into out_dir; return the paths.

    Only public content: the mechanism's files and its public manifest (no input hash).
    """
    return write_files(
        {**output.files, "manifest.json": json_bytes(public_manifest(output.manifest))}, out_dir
    )


def write_files(files: dict[str, bytes], out_dir: str | Path) -> list[Path]:
    """Write each of `files` into out_dir (created if needed); return the paths."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MechanismError(
            f"output folder ({str(out_dir)!r}) cannot be created: {exc.strerror}"
        ) from None
    written = []
    for filename, content in files.items():
        path = out_dir / filename
        path.write_bytes(content)
        written.append(path)
    return written


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """RFC 4180 CSV of a public table; any text with a comma, quote, CR or LF is quoted.

    Written by pyarrow: about ten times faster than pandas for millions of synthetic rows. An
    empty (missing) value is an empty field; in a one-column table it is written `""`, as an
    empty line would be skipped by most readers.
    """
    if frame.shape[1] == 1 and frame.iloc[:, 0].isna().any():
        return _one_column_csv(frame)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    buffer = io.BytesIO()
    pa_csv.write_csv(table, buffer, pa_csv.WriteOptions(quoting_style="needed"))
    return buffer.getvalue()


def _one_column_csv(frame: pd.DataFrame) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([str(frame.columns[0])])
    writer.writerows([[""] if pd.isna(v) else [v] for v in frame.iloc[:, 0]])  # a lone "" is quoted
    return out.getvalue().encode()


def json_bytes(document: Any) -> bytes:
    """Stable, readable JSON encoding of a manifest or trace (infinities as text: json_ready)."""
    text = json.dumps(json_ready(document), indent=2, sort_keys=True, allow_nan=False)
    return (text + "\n").encode()


def json_ready(document: Any) -> Any:
    """The document with every infinite float written as the text "inf" (or "-inf").

    JSON has no infinity. Only a release at epsilon = inf (no noise, for tests: the Python API
    allows it, the command line and the portal refuse it) holds infinite values: its epsilon,
    per-round shares, rho. "inf" is how every manifest shows them (the reports read "infinity").
    NaN is left as is, and json_bytes refuses it: it would be a bug.
    """
    if isinstance(document, float) and math.isinf(document):
        return "inf" if document > 0 else "-inf"
    if isinstance(document, dict):
        return {key: json_ready(value) for key, value in document.items()}
    if isinstance(document, list | tuple):
        return [json_ready(value) for value in document]
    return document
