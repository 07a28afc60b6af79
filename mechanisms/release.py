"""One entry point for every mechanism, shared by the command line and the portal worker.

A mechanism registers a function

    fn(data, schema, *, columns, params, epsilon, delta, neighbouring, rng, progress)
        -> ReleaseOutput

under its name ("perturbed_histogram", "smoothed_histogram", "mwem", "range_count").
`run_release` validates the common privacy parameters, calls it and completes the manifest with
the fields every release carries; `write_release` writes the public files and manifest.json.

Nothing computed from the raw data besides mechanism output goes into a release: a hash of the
input is not differentially private (someone who knows all rows but one can test guesses of the
last), so the command line keeps it in a separate custodian record and the portal in its own
database. `public_manifest` still strips the fields of CUSTODIAN_ONLY_FIELDS, which manifests
stored before this rule may carry.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from mechanisms.accounting import (
    DEFAULT_NEIGHBOURING,
    check_delta,
    check_epsilon,
    check_neighbouring,
)
from mechanisms.chunks import ChunkedTable
from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource, resolve_rng
from mechanisms.schema import Schema

PACKAGE_VERSION = "0.1.0"
CUSTODIAN_ONLY_FIELDS = ("input_sha256",)

Progress = Callable[[int, int], None]


@dataclass
class ReleaseOutput:
    """Public files of a release, its manifest and public plot data."""

    files: dict[str, bytes]
    manifest: dict
    trace: dict = field(default_factory=dict)


MechanismFn = Callable[..., ReleaseOutput]
MECHANISMS: dict[str, MechanismFn] = {}
CHUNKED: set[str] = set()  # mechanisms that also take a ChunkedTable (they only count)


def register(name: str, function: MechanismFn, *, chunked: bool = False) -> MechanismFn:
    """Make `function` available to run_release under `name`.

    `chunked`: it reads a ChunkedTable in one pass as well as a DataFrame.
    """
    MECHANISMS[name] = function
    (CHUNKED.add if chunked else CHUNKED.discard)(name)
    return function


def reads_in_chunks(name: str) -> bool:
    """Whether the mechanism registered as `name` accepts a ChunkedTable."""
    _ensure_registered()
    return name in CHUNKED


def _ensure_registered() -> None:
    # The mechanism modules register themselves on import; importing the package does that.
    import mechanisms  # noqa: F401


def run_release(
    name: str,
    data: pd.DataFrame | ChunkedTable,
    schema: Schema,
    *,
    epsilon: float,
    delta: float = 0.0,
    neighbouring: str = DEFAULT_NEIGHBOURING,
    columns=None,
    params: dict | None = None,
    rng: RandomSource | None = None,
    progress: Progress | None = None,
) -> ReleaseOutput:
    """Run the mechanism registered as `name` and complete its manifest.

    Privacy: whatever the named mechanism states; this wrapper adds no privacy loss.
    `data` may be a ChunkedTable for mechanisms registered as chunked (they read it once).
    The manifest holds only public fields: nothing computed from the data but mechanism output.
    """
    _ensure_registered()
    if name not in MECHANISMS:
        raise MechanismError(
            f"mechanism ({name!r}) is unknown; choose one of {', '.join(MECHANISMS)}"
        )
    if not isinstance(schema, Schema):
        raise MechanismError(f"schema ({type(schema).__name__}) must be a mechanisms.Schema")
    if isinstance(data, ChunkedTable) and name not in CHUNKED:
        raise MechanismError(
            f"data in chunks needs a counting mechanism "
            f"({', '.join(sorted(CHUNKED))}), not {name!r}; pass a DataFrame instead"
        )
    output = MECHANISMS[name](
        data,
        schema,
        columns=schema.resolve_columns(columns),
        params=dict(params or {}),
        epsilon=check_epsilon(epsilon),
        delta=check_delta(delta),
        neighbouring=check_neighbouring(neighbouring),
        rng=resolve_rng(rng),
        progress=progress,
    )
    output.manifest = {
        "mechanism": name,
        **output.manifest,
        "package_version": PACKAGE_VERSION,
    }
    return output


def file_sha256(path) -> str:
    """Hash of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def public_manifest(manifest: dict) -> dict:
    """The manifest without custodian-only fields (the raw input's hash, in old manifests)."""
    return {k: v for k, v in manifest.items() if k not in CUSTODIAN_ONLY_FIELDS}


def write_release(output: ReleaseOutput, out_dir) -> list[Path]:
    """Write each public file of `output` and manifest.json into out_dir; return the paths.

    Only public content: the mechanism's files and its public manifest (no input hash).
    """
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MechanismError(
            f"output folder ({str(out_dir)!r}) cannot be created: {exc.strerror}"
        ) from None
    written = []
    files = {**output.files, "manifest.json": json_bytes(public_manifest(output.manifest))}
    for filename, content in files.items():
        path = out_dir / filename
        path.write_bytes(content)
        written.append(path)
    return written


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """RFC 4180 CSV of a public table; any text with a comma, quote, CR or LF is quoted.

    Written by pyarrow: about ten times faster than pandas for millions of synthetic rows.
    """
    table = pa.Table.from_pandas(frame, preserve_index=False)
    buffer = io.BytesIO()
    pa_csv.write_csv(table, buffer, pa_csv.WriteOptions(quoting_style="needed"))
    return buffer.getvalue()


def json_bytes(document) -> bytes:
    """Stable, readable JSON encoding of a manifest or trace."""
    return (json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
