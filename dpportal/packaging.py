"""The public release package: its files (CSV cells made safe for spreadsheets), the public
manifest, a plain-language README.txt, and the whole package as one zip.

Only mechanism output goes in here. The custodian-only utility report lives elsewhere
(`dpportal.utility`) and is never added to a package.
"""

import io
import json
import textwrap
import zipfile
from pathlib import Path

import pandas as pd

import mechanisms

from . import files
from .catalogue import mechanism_title
from .csv_safety import safe_csv

PACKAGE_LAYOUT = 2  # bump when the package's files or README change: rebuilds cached zips


def output_dir(release) -> Path:
    return files.output_dir(release)


def stored_names(release) -> list[str]:
    """Names of the mechanism's public files as stored by the worker (none before it is done)."""
    if not release.output_dir:
        return []
    return sorted(path.name for path in output_dir(release).iterdir() if path.is_file())


def stored_files(release) -> dict[str, bytes]:
    """The mechanism's public files as stored by the worker (empty before the release is done)."""
    return {name: (output_dir(release) / name).read_bytes() for name in stored_names(release)}


def package_names(release) -> list[str]:
    return sorted([*stored_names(release), "manifest.json", "README.txt"])


def public_manifest(release) -> dict:
    """The manifest without custodian-only fields (the raw file's hash)."""
    return mechanisms.public_manifest(release.manifest or {})


def package_files(release) -> dict[str, bytes]:
    """Every file of the public package, ready to download: CSVs escaped, manifest, README."""
    files = {
        name: safe_csv(content) if name.endswith(".csv") else content
        for name, content in stored_files(release).items()
    }
    files["manifest.json"] = (
        json.dumps(public_manifest(release), indent=2, sort_keys=True) + "\n"
    ).encode()
    files["README.txt"] = readme_text(release, sorted(files)).encode()
    return files


def package_zip_path(release) -> Path:
    """The public package as one zip, built on first use and kept (a release never changes)."""
    path = cache_dir(release) / f"package-v{PACKAGE_LAYOUT}.zip"
    if not path.exists():
        folder = f"release-{release.pk}"
        with (
            files.PrivateWriter(path) as out,
            zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive,
        ):
            for name, content in package_files(release).items():
                archive.writestr(f"{folder}/{name}", content)
    return path


def package_file(release, name) -> bytes | None:
    """One file of the public package (as in the zip), or None if there is no such file."""
    if name not in package_names(release):
        return None
    with zipfile.ZipFile(package_zip_path(release)) as archive:
        return archive.read(f"release-{release.pk}/{name}")


def cache_dir(release) -> Path:
    """Derived copies of a release's public files (zip, chart data), rebuilt if removed."""
    return files.release_cache_dir(release)


def cached_json(release, kind: str, build):
    """`build()`'s JSON-ready result for a finished release, computed once and kept."""
    path = cache_dir(release) / f"{kind}.json"
    if path.exists():
        return json.loads(path.read_text())
    value = build()
    files.write_private(path, json.dumps(value).encode())
    return value


def read_csv(content: bytes, schema=None) -> pd.DataFrame:
    """A released CSV as text columns, the schema's numeric columns (if given) as numbers."""
    frame = pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False)
    return with_numbers(frame, schema) if schema is not None else frame


def with_numbers(frame: pd.DataFrame, schema) -> pd.DataFrame:
    """The frame with the schema's numeric columns converted once (not per query or chart)."""
    numeric = [
        c
        for c in frame.columns
        if c in schema.columns and isinstance(schema.columns[c], mechanisms.schema.NumericColumn)
    ]
    return frame.assign(**{c: pd.to_numeric(frame[c], errors="coerce") for c in numeric})


FILE_DESCRIPTIONS = {
    "synthetic.csv": "made-up rows drawn from the private model; no row is a real person",
    "noisy_counts.csv": "how many rows fall in each cell, each count with random noise added",
    "answers.csv": "answers to the counting queries, each with random noise added",
    "structure.json": "the noisy structure from which new counting queries can be answered",
    "measurements.json": "the noisy measurements the mechanism took",
    "manifest.json": "the technical record: mechanism, settings and privacy guarantee",
    "README.txt": "this file",
}


def _paragraph(text: str) -> str:
    return textwrap.fill(
        " ".join(text.split()),
        width=78,
        initial_indent="  ",
        subsequent_indent="  ",
        break_on_hyphens=False,
    )


def _protected(release) -> str:
    """What one neighbouring step changes: one person's row, or all rows of one person."""
    guarantee = (release.manifest or {}).get("guarantee") or {}
    k = guarantee.get("max_rows_per_person")
    if k is None:
        return "any one person's row"
    return (
        f"all the rows of any one person (the unit of privacy: {guarantee.get('unit')}; "
        f"rows beyond {k} per person were left out at random)"
    )


def readme_text(release, names) -> str:
    """A plain-language explanation of the package and its privacy guarantee."""
    delta = release.delta
    delta_words = (
        f"and delta = {delta.normalize():f} (a tiny chance, at most {delta.normalize():f}, that "
        "the guarantee below does not hold)"
        if delta > 0
        else "and delta = 0 (the guarantee always holds)"
    )
    change = "replaced" if release.neighbouring == "replace-one" else "added or removed"
    negative = (
        ""
        if mechanisms.catalogue.spec(release.mechanism).synthetic_rows
        else " Counts can even be negative where noise was added."
    )
    listing = "\n".join(
        textwrap.fill(
            f"{name}: {FILE_DESCRIPTIONS.get(name, 'part of the release')}",
            width=78,
            initial_indent="  ",
            subsequent_indent="    ",
        )
        for name in names
    )
    title = f"Differentially private release {release.pk}"
    what = _paragraph(
        f'A release of the kind "{mechanism_title(release.mechanism)}", made from the columns '
        f"{', '.join(release.columns)} of a private table, with epsilon = "
        f"{release.epsilon.normalize():f} {delta_words}."
    )
    meaning = _paragraph(
        "Random noise was added so that anything you can learn from these files would have "
        f"been almost as likely to be learnt if {_protected(release)} had been "
        f"{change}. So these files reveal very little about any one person in the table. "
        "The smaller epsilon is, the stronger the protection and the noisier the numbers. "
        "The protection holds whatever else you know and whatever you do with these files."
    )
    limits = _paragraph(
        f"The numbers are not exact: small counts in particular can be far off.{negative} "
        "Patterns that involve many rows are usually reliable. Nothing in these files was "
        "computed by comparing with the private table."
    )
    spreadsheets = _paragraph(
        "Text cells that begin with = + - @ or a tab were prefixed with an apostrophe (') so "
        "that a spreadsheet does not run them as formulas."
    )
    return f"""{title}
{"=" * len(title)}

What this is
{what}

What the guarantee means, in plain words
{meaning}

What it does not mean
{limits}

Files
{listing}

Spreadsheets
{spreadsheets}
"""
