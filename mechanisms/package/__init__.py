"""The public package of a release, built the same way by the command line and the portal.

`build_package(files, manifest, context)` turns a mechanism's public files and manifest into
the package: each CSV made spreadsheet-friendly (mechanisms.package.tables), the JSON files as
they are, manifest.json, README.txt, report.html, report.pdf and release.xlsx. Its only inputs
are mechanism output and public context (title, dataset name, budget spent), so nothing in the
package is computed from the raw data; it adds no privacy cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
]


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
