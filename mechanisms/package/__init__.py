"""The public package of a release, built the same way by the command line and the portal.

`build_package(files, manifest, context)` turns a mechanism's public files and manifest into
the package: each CSV made spreadsheet-friendly (mechanisms.package.tables), the JSON files as
they are, manifest.json, README.txt, report.html, report.pdf and release.xlsx. Its only inputs
are mechanism output and public context (title, dataset name, budget spent), so nothing in the
package is computed from the raw data; it adds no privacy cost.

`write_zip` puts a package into one zip (the portal's download; the command line writes a
folder). release.xlsx is stored as it is: it is a zip of deflated parts already (deflating it
again saved 16 bytes of 1.56 MB and took 0.03 CPU s). Every other member is deflated by ISA-L's
igzip at its level 3 (`DEFLATE_LEVEL`; the `isal` package), written into the zip by
`stream_zip`. On the synthetic CSV of a million rows of 8 columns (50 MB) that took 0.15 CPU s
and made 13.7 MB, where zlib took 0.64 s at level 4 for 11.9 MB and 1.65 s at level 6 for 10.0
MB: the CSV 15% larger (so on a census-like table) for a quarter of the time, the whole zip 9
to 13% larger (docs/mwem.md). Every member is deflated or stored, so any unzip reads the zip.
"""

from __future__ import annotations

import stat
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from isal import isal_zlib
from stream_zip import NO_COMPRESSION_32, NO_COMPRESSION_64, ZIP_32, ZIP_64, Method, stream_zip

from mechanisms.package.context import Budget, PackageContext
from mechanisms.package.readme import PACKAGE_FILES, readme_text
from mechanisms.package.report import report_html, report_pdf, stylesheet
from mechanisms.package.tables import Table, csv_text, read_table
from mechanisms.release import ReleaseOutput, json_bytes, public_manifest, write_files

__all__ = [
    "Budget",
    "PackageContext",
    "Table",
    "build_package",
    "package_names",
    "release_tables",
    "report_html",
    "stylesheet",
    "write_package",
    "write_zip",
]

STORED_SUFFIXES = (".xlsx",)  # a zip of deflated parts already: stored, not deflated again
DEFLATE_LEVEL = 3  # igzip's level for every other member (the module docstring gives the trade)
ZIP32_BYTES = 1 << 31  # a package this large or larger is written with zip64 records


def package_names(stored: list[str]) -> list[str]:
    """Every file name of the package of a release whose mechanism stored `stored`."""
    return sorted({*stored, *PACKAGE_FILES})


def release_tables(files: dict[str, bytes], manifest: dict[str, Any]) -> list[Table]:
    """The release's CSV files as spreadsheet-friendly tables, in file-name order."""
    return [
        read_table(name, content, manifest)
        for name, content in sorted(files.items())
        if name.endswith(".csv")
    ]


def build_package(
    files: dict[str, bytes], manifest: dict[str, Any], context: PackageContext
) -> dict[str, bytes]:
    """Every file of the public package (see the module docstring), by name."""
    manifest = public_manifest(manifest)
    tables = release_tables(files, manifest)
    names = package_names(list(files))
    package = {name: content for name, content in files.items() if not name.endswith(".csv")}
    package.update({table.name: csv_text(table) for table in tables})
    package["manifest.json"] = json_bytes(manifest)
    package["README.txt"] = readme_text(manifest, names, context, tables).encode()
    html = report_html(manifest, tables, names, context)
    package["report.html"] = html.encode()
    package["report.pdf"] = report_pdf(html)
    # imported here: openpyxl takes 0.1 s to load, and every process of the portal imports this
    # package while few of them build a package
    from mechanisms.package.workbook import workbook_bytes

    package["release.xlsx"] = workbook_bytes(manifest, tables, context)
    return dict(sorted(package.items()))


def write_package(
    output: ReleaseOutput, out_dir: str | Path, context: PackageContext
) -> list[Path]:
    """Build the package of a finished `output` and write it into out_dir (public files only)."""
    return write_files(build_package(output.files, output.manifest, context), out_dir)


def write_zip(package: dict[str, bytes], out: IO[bytes], folder: str) -> None:
    """The package as one zip written to `out`, each file as `folder`/name.

    Compressed as the module docstring says (`member_method`); with zip64 records only where
    the package reaches ZIP32_BYTES (the classic zip format holds at most 4 GiB).
    """
    large = sum(len(content) for content in package.values()) >= ZIP32_BYTES
    now = datetime.now()
    members = (
        (f"{folder}/{name}", now, stat.S_IFREG | 0o600, member_method(name, large), [content])
        for name, content in package.items()
    )
    for chunk in stream_zip(members, chunk_size=1 << 20, get_compressobj=deflater):
        out.write(chunk)


def member_method(name: str, large: bool) -> Method:
    """How `write_zip` writes a file of the package: stored (the workbook) or deflated."""
    if name.endswith(STORED_SUFFIXES):
        return NO_COMPRESSION_64 if large else NO_COMPRESSION_32
    return ZIP_64 if large else ZIP_32


def deflater() -> Any:
    """A raw-deflate compressor (no zlib header, as zip members hold) at DEFLATE_LEVEL."""
    return isal_zlib.compressobj(DEFLATE_LEVEL, isal_zlib.DEFLATED, -15)
