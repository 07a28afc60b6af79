"""The public release package of a finished release, built by `mechanisms.package` (the same
builder as the command line's): spreadsheet-friendly CSVs, manifest, README.txt, report.html,
report.pdf, release.xlsx; and the whole package as one zip, kept once built (`package.write_zip`:
release.xlsx stored as it is, every other file deflated by ISA-L's igzip).

Only mechanism output and public context (title, dataset name, budget spent) go in here. The
custodian-only utility report lives elsewhere (`dpportal.releases.utility`) and is never added.
"""

import hashlib
import json
import zipfile
from pathlib import Path

import pandas as pd

import mechanisms
from dpportal.analysts.models import held_on_budget
from dpportal.core import files, object_store
from dpportal.core.formatting import plain_number
from dpportal.models import Release
from mechanisms import package
from mechanisms.package.tables import text_cells

PACKAGE_LAYOUT = 5  # bump when the package's files or README change: rebuilds cached zips


def output_dir(release) -> Path:
    return files.output_dir(release)


def stored_names(release) -> list[str]:
    """Names of the mechanism's public files as stored by the worker (none before it is done)."""
    if not release.output_dir:
        return []
    return object_store.names(output_dir(release))


def stored_file(release, name) -> bytes:
    """One of the mechanism's public files, as stored by the worker (folder or bucket)."""
    return object_store.read_bytes(output_dir(release) / name)


def stored_files(release) -> dict[str, bytes]:
    """The mechanism's public files as stored by the worker (empty before the release is done)."""
    return {name: stored_file(release, name) for name in stored_names(release)}


def package_names(release) -> list[str]:
    return package.package_names(stored_names(release))


def public_manifest(release) -> dict:
    """The manifest without custodian-only fields (the raw file's hash)."""
    return mechanisms.public_manifest(release.manifest or {})


def package_files(release) -> dict[str, bytes]:
    """Every file of the public package, ready to download (see the module docstring)."""
    return package.build_package(stored_files(release), release.manifest or {}, context(release))


def context(release) -> package.PackageContext:
    """The public facts a package states beyond its manifest: title, dataset, date, budget,
    and who publishes it (the dataset's publishing details, `services.dataset_set_publishing`;
    without a title of their own, "Differentially private release" and its number)."""
    finished = release.finished_at or release.created_at
    dataset = release.dataset
    return package.PackageContext(
        title=dataset.publish_title or f"Differentially private release {release.pk}",
        dataset=dataset.name,
        made_on=f"released {finished:%d %B %Y}",
        budget=budget(dataset),
        publisher=dataset.publisher,
        contact=dataset.publish_contact,
        note=dataset.publish_note,
        reference=f"Release {release.pk}" if dataset.publish_title else "",
    )


def publishing_key(release) -> str:
    """A short digest of the publishing details the package states (its zip is rebuilt when
    the owner changes them)."""
    dataset = release.dataset
    details = (dataset.publish_title, dataset.publisher, dataset.publish_contact)
    return hashlib.sha256(repr((*details, dataset.publish_note)).encode()).hexdigest()[:12]


def budget(dataset) -> package.Budget:
    """The dataset's budget as it stands: ε and δ spent by all its releases (not what analysts'
    allotments still hold, which the budget counts as spent too), and the totals."""
    charged = (
        Release.objects.filter(dataset__budget_id=dataset.budget_id)
        .exclude(ledger__kind="refund")
        .count()
    )
    held = held_on_budget(dataset.budget_id)
    return package.Budget(
        epsilon_spent=plain_number(dataset.epsilon_spent - held[0]),
        epsilon_total=plain_number(dataset.epsilon_total),
        delta_spent=plain_number(dataset.delta_spent - held[1]),
        delta_total=plain_number(dataset.delta_total),
        releases=charged,
    )


def package_zip_name(release) -> str:
    """The name of the public package's zip (`package_zip_path`), without building it."""
    return f"package-v{PACKAGE_LAYOUT}-{publishing_key(release)}.zip"


def package_zip_path(release) -> Path:
    """The public package as one zip, built on first use and kept (a release never changes;
    its publishing details may: one zip per state of them, `publishing_key`); kept in the
    object store when one is configured (`dpportal.core.object_store`)."""
    path = cache_dir(release) / package_zip_name(release)
    if not object_store.exists(path):
        writer = files.PrivateWriter(path)  # a worker and a download may build it at once
        try:
            package.write_zip(package_files(release), writer.file, f"release-{release.pk}")
        except BaseException:
            writer.discard()
            raise
        object_store.keep_written(writer)
    return path


def package_file(release, name) -> bytes | None:
    """One file of the public package (as in the zip), or None if there is no such file."""
    if name not in package_names(release):
        return None
    with (
        object_store.open_input(package_zip_path(release)) as stored,
        zipfile.ZipFile(stored) as archive,
    ):
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
    """A released CSV as text columns, the schema's numeric columns (if given) as numbers.

    Read as the package reads it (`tables.text_cells`, pyarrow): a worker reads a synthetic
    CSV three times after its release (the custodian's report, its verdict, the charts), and
    pandas took 0.70 CPU s each time at a million rows of 8 columns, pyarrow 0.18.
    """
    frame = text_cells(content)
    return with_numbers(frame, schema) if schema is not None else frame


def with_numbers(frame: pd.DataFrame, schema) -> pd.DataFrame:
    """The frame with the schema's numeric columns converted once (not per query or chart);
    a date column becomes its declared part (month, day number, ...), missing values NaN."""
    numeric = {
        c: spec
        for c in frame.columns
        if isinstance(spec := schema.columns.get(c), mechanisms.schema.NumericColumn)
    }
    return frame.assign(**{c: spec.numbers(frame[c]) for c, spec in numeric.items()})
