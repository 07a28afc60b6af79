"""What each column of a release's CSV files holds, in words.

README.txt, the report and the workbook's About sheet list them under each file. A
mechanism's catalogue row describes its own columns (`MechanismSpec.columns`: per file, per
column name; a name with "{column}" stands for each released column, "*" for a released column
itself), so each is described for what it is in that release: a statistic's interval is an
interval for the statistic, a count's for the count. The package adds the words for the `note`
column it may add itself (negative noisy counts). A column nobody describes is said to be
undescribed (UNDESCRIBED); tests/mechanisms/test_package_columns.py forbids that for every
mechanism of the catalogue.

Post-processing of public names only: nothing is read from the data.
"""

from __future__ import annotations

from typing import Any

from mechanisms.catalogue import CATALOGUE
from mechanisms.package.context import released_columns
from mechanisms.package.tables import NEGATIVE_NOTE, Table

UNDESCRIBED = "(no description)"
PACKAGE_COLUMNS = {"note": f"what to know about the row: a negative noisy count is {NEGATIVE_NOTE}"}


def column_descriptions(manifest: dict[str, Any], table: Table) -> list[tuple[str, str]]:
    """(column, what it holds) for every column of `table`, in its order."""
    own = _own(manifest).get(table.name, {})
    released = released_columns(manifest)
    return [(name, _describe(name, own, released)) for name in table.header]


def _own(manifest: dict[str, Any]) -> dict[str, dict[str, str]]:
    spec = CATALOGUE.get(str(manifest.get("mechanism", "")))
    return spec.columns if spec is not None else {}


def _describe(name: str, own: dict[str, str], released: list[str]) -> str:
    if name in own:
        return own[name]
    for pattern, words in own.items():
        for column in released:
            if pattern == "*" and name == column or pattern.format(column=column) == name:
                return words.format(column=column)
    return PACKAGE_COLUMNS.get(name, UNDESCRIBED)


def description_lines(manifest: dict[str, Any], tables: list[Table]) -> list[str]:
    """One line per column of each table: "file: column: what it holds"."""
    return [
        f"{table.name}: {name}: {words}"
        for table in tables
        for name, words in column_descriptions(manifest, table)
    ]
