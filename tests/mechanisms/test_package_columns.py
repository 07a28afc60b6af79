"""What each CSV column holds, and who publishes the release, in every package (issue 43
item 8: "means and medians are explained as 'a 95% interval for the true count'"; "the public
page has no title, publisher or note").

Every real mechanism of the catalogue (tests/mechanisms/test_release.py's REAL_RUNS) is run
and packaged: each column of each of its CSV files must have its own description in README.txt,
the report and the workbook's About sheet; a statistic's interval must be described as an
interval for the statistic, not for a count. The publisher, contact and note of the context
appear in the three as well.
"""

from __future__ import annotations

import html
import io
import json

import pytest

from mechanisms.catalogue import CATALOGUE, run_release
from mechanisms.noise import seeded_source
from mechanisms.package import PackageContext, build_package, release_tables
from mechanisms.package.columns import UNDESCRIBED, column_descriptions
from mechanisms.release import public_manifest
from tests.mechanisms.test_release import ADULT_LIKE, REAL_RUNS, ROWS
from tests.package_text import xlsx_cells

CONTEXT = PackageContext(
    title="Income by sex, census sample 2026",
    dataset="Census sample",
    publisher="Office of Statistics",
    contact="stats@example.org",
    note="Made from a 2% sample.\n\nCite as: Office of Statistics (2026).",
    reference="Release 12",
)


def _output(name, columns, params, delta, neighbouring):
    return run_release(
        name, ROWS, ADULT_LIKE, epsilon=0.7, delta=delta, neighbouring=neighbouring,
        columns=columns, params=params, rng=seeded_source(1),
    )  # fmt: skip


@pytest.fixture(scope="module")
def outputs():
    return [_output(*run) for run in REAL_RUNS]


def test_every_column_of_every_real_mechanism_is_described(outputs):
    assert {out.manifest["mechanism"] for out in outputs} == {
        name for name, spec in CATALOGUE.items() if spec.run.__module__.startswith("mechanisms")
    }
    for out in outputs:
        manifest = public_manifest(out.manifest)
        for table in release_tables(out.files, manifest):
            described = column_descriptions(manifest, table)
            assert [name for name, _ in described] == table.header
            missing = [name for name, words in described if words == UNDESCRIBED]
            assert not missing, (manifest["mechanism"], table.name, missing)


def test_a_statistics_interval_is_for_the_statistic_not_a_count():
    out = _output("statistics", ["age", "sex"], {"stat": ["mean:age", "median:age"],
                  "by": ["sex"]}, 0.0, "add-remove")  # fmt: skip
    manifest = public_manifest(out.manifest)
    (table,) = release_tables(out.files, manifest)
    words = dict(column_descriptions(manifest, table))
    assert "for the statistic's true value" in words["ci_lower"]
    assert "mean or median itself" in words["ci_lower"]
    assert "true count" not in " ".join(words.values())
    assert words["sex"].startswith("the group: a declared category of sex")
    readme = build_package(out.files, out.manifest, CONTEXT)["README.txt"].decode()
    assert "the true count lies between" not in readme
    assert "statistics.csv: ci_lower: lower end of a 95% interval for the statistic's" in readme


def test_the_package_names_its_publisher_contact_and_note_everywhere(outputs):
    out = outputs[0]
    package = build_package(out.files, out.manifest, CONTEXT)
    readme = package["README.txt"].decode()
    assert readme.startswith("Income by sex, census sample 2026\n")
    for text in ("Release 12", "Published by Office of Statistics.",
                 "Contact: stats@example.org.", "Made from a 2% sample.", "Cite as:"):  # fmt: skip
        assert text in readme, text
    report = html.unescape(package["report.html"].decode())
    assert "<h1>Income by sex, census sample 2026</h1>" in report
    assert '<p class="subtitle">Release 12 · ' in report
    assert "Published by Office of Statistics. Contact: stats@example.org." in report
    assert "<p>Cite as: Office of Statistics (2026).</p>" in report  # its own paragraph
    assert "What each column holds" in report and "<dt>noisy_count</dt>" in report
    about = [row[0] for row in xlsx_cells(package["release.xlsx"])["About"] if row[0]]
    assert "Published by Office of Statistics." in about
    assert any(line.startswith("  noisy_count: the number of rows in the cell") for line in about)


def test_a_context_without_publisher_adds_no_empty_lines():
    out = _output("statistics", ["age", "sex"], {"stat": ["count"]}, 0.0, "add-remove")
    package = build_package(out.files, out.manifest, PackageContext())
    assert "Published by" not in package["README.txt"].decode()
    assert 'class="publisher' not in package["report.html"].decode()
    assert json.loads(package["manifest.json"])["mechanism"] == "statistics"
    assert io.BytesIO(package["report.pdf"]).read(4) == b"%PDF"
