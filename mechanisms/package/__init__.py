"""The public package of a release, built the same way by the command line and the portal.

`build_package(files, manifest, context)` turns a mechanism's public files and manifest into
the package: each CSV made spreadsheet-friendly (mechanisms.package.tables), the JSON files as
they are, manifest.json, README.txt, report.html, report.pdf and release.xlsx. Its only inputs
are mechanism output and public context (title, dataset name, budget spent), so nothing in the
package is computed from the raw data; it adds no privacy cost.

`write_zip` puts a package into one zip (the portal's download; the command line writes a
folder). Members are deflated (zlib's default level 6), but for two kinds where that costs
time for nothing or little: release.xlsx is stored as it is (it is a zip of deflated parts
already: deflating it again saved 16 bytes of 1.56 MB and took 0.03 CPU s), and a member of
LARGE_MEMBER bytes or more (a synthetic CSV: 50 MB at a million rows of 8 columns) is
deflated at FAST_LEVEL, zlib's level 4. Level 6 took 1.74 CPU s on that CSV (10.0 MB), level
4 0.73 s (11.9 MB, 19% larger); on a census-like table of a million rows 1.03 s and 0.30 s
(5.0 and 5.7 MB, 16% larger). Levels 1 and 2 would save another 0.1 to 0.3 s for twice that
growth (28 to 49% larger; docs/mwem.md). Every member is deflated or stored, so any unzip reads
the zip.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO, Any

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
LARGE_MEMBER = 1 << 20  # bytes: a member this large or larger is deflated at FAST_LEVEL
FAST_LEVEL = 4  # zlib's level for large members (the module docstring gives the trade)


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

    Compressed as the module docstring says (`member_compression`).
    """
    with zipfile.ZipFile(out, "w") as archive:
        for name, content in package.items():
            method, level = member_compression(name, len(content))
            archive.writestr(f"{folder}/{name}", content, method, level)


def member_compression(name: str, size: int) -> tuple[int, int | None]:
    """How `write_zip` compresses a file of the package: (zipfile's method, zlib's level)."""
    if name.endswith(STORED_SUFFIXES):
        return zipfile.ZIP_STORED, None
    if size >= LARGE_MEMBER:
        return zipfile.ZIP_DEFLATED, FAST_LEVEL
    return zipfile.ZIP_DEFLATED, None  # zlib's default level, 6
