"""The one package builder (mechanisms.package) used by the command line and the portal.

Built from a hand-made manifest and files, so every expectation below is written out, not
derived from the code under test: readable CSVs (no JSON cells, readable bin labels, numbers
rounded, intervals beside estimates, negative counts explained), release.xlsx read back with
openpyxl, report.html self-contained and script-free, report.pdf's extracted text.
"""

import csv
import io
import re

import pytest

from mechanisms.package import Budget, PackageContext, build_package, package_names
from mechanisms.package.report import report_pdf
from mechanisms.package.tables import read_table
from tests.package_text import pdf_text, xlsx_cells

MANIFEST = {
    "mechanism": "perturbed_histogram",
    "package_version": "0.1.0",
    "parameters": {"columns": ["age", "sex"], "rows": 3},
    "guarantee": {
        "unit": "one row of the input table",
        "neighbouring": "add-remove",
        "definition": "pure epsilon-DP",
        "epsilon": 0.75,
        "delta": 0.0,
        "rho": None,
        "sensitivity": 1,
    },
    "accounting": {"epsilon": 0.75, "delta": 0.0},
    "row_count_public": False,
    "schema": {
        "columns": [
            {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
            {"name": "sex", "type": "categorical", "categories": ["Female", "Male"]},
        ]
    },
    "files": {"noisy_counts.csv": "noisy counts", "synthetic.csv": "made-up rows"},
    "input_sha256": "ab" * 32,  # as an old stored manifest may carry: never published
}
# Interval columns out of place (after a note-like column) and with decimals, as a mechanism
# that adds 95% intervals (ci_lower, ci_upper) might write them.
NOISY_COUNTS = (
    "age,sex,ci_lower,noisy_count,ci_upper\n"
    "17 to under 26.125,Female,101.2,120.0,138.7\n"
    "17 to under 26.125,Male,-30.6,-12,6.4\n"
    '17 to under 26.125,"=HYPERLINK(""x"")",0.5,2,3.5\n'
)
SYNTHETIC = "age,sex\n23.48291038472,Female\n26.1249999,Male\n89.9999,Male\n"
CONTEXT = PackageContext(
    title="Differentially private release 7",
    dataset="Survey 2026",
    made_on="released 1 December 2026",
    budget=Budget("1.25", "3", releases=2),
)


@pytest.fixture(scope="module")
def package():
    files = {"noisy_counts.csv": NOISY_COUNTS.encode(), "synthetic.csv": SYNTHETIC.encode()}
    return build_package(files, MANIFEST, CONTEXT)


def rows(content: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(content.decode(), newline="")))


def test_the_package_holds_every_file_the_portal_and_cli_promise(package):
    names = ["noisy_counts.csv", "synthetic.csv"]
    assert (
        sorted(package)
        == package_names(names)
        == [
            "README.txt",
            "manifest.json",
            "noisy_counts.csv",
            "release.xlsx",
            "report.html",
            "report.pdf",
            "synthetic.csv",
        ]
    )
    assert all(b"abab" * 16 not in content for content in package.values())


def test_csvs_have_intervals_beside_estimates_rounded_outward_and_negatives_explained(package):
    table = rows(package["noisy_counts.csv"])
    assert table[0] == ["age", "sex", "noisy_count", "ci_lower", "ci_upper", "note"]
    assert table[1] == ["17 to under 26.125", "Female", "120", "101", "139", ""]
    assert table[2][:5] == ["17 to under 26.125", "Male", "-12", "-31", "7"]
    assert table[2][5].startswith("negative because of the added noise")
    assert table[3][1] == '\'=HYPERLINK("x")'  # escaped for spreadsheets


def test_synthetic_values_are_cut_to_the_bin_edges_decimals_so_they_keep_their_bin(package):
    # age's edges 17, 26.125, ... need 3 decimals; 26.1249999 must stay below 26.125
    assert [r[0] for r in rows(package["synthetic.csv"])[1:]] == ["23.482", "26.124", "89.999"]


def test_json_cells_become_plain_text():
    answers = (
        "query,type,definition,answer,variance\n"
        '0,box,"{""lo"": [19.84053, 16.8222], ""hi"": [37.3633, 49.2191]}",16147.4,31.83391\n'
    )
    manifest = {**MANIFEST, "parameters": {"columns": ["age", "hours"]}}
    table = read_table("answers.csv", answers.encode(), manifest)
    assert table.rows == [[0, "box", "age 19.84 to 37.36; hours 16.82 to 49.22", 16147, 31.83]]


def test_a_new_mechanisms_columns_flow_through_without_a_special_case():
    stats = "statistic,estimate,ci_lower,ci_upper\nmean of age,38.58123,38.0149,39.1477\n"
    table = read_table("statistics.csv", stats.encode(), {"mechanism": "stats"})
    assert table.header == ["statistic", "estimate", "ci_lower", "ci_upper"]
    assert table.rows == [["mean of age", 38.58, 38.01, 39.15]]  # bounds rounded outward
    files = {"statistics.csv": stats.encode()}
    package = build_package(files, {"mechanism": "stats", "guarantee": {"epsilon": 1}}, CONTEXT)
    assert xlsx_cells(package["release.xlsx"])["statistics"][1] == [
        "mean of age",
        38.58,
        38.01,
        39.15,
    ]


def test_the_workbook_has_an_about_sheet_and_one_typed_sheet_per_table(package):
    sheets = xlsx_cells(package["release.xlsx"])
    assert list(sheets) == ["About", "noisy_counts", "synthetic"]
    about = " ".join(str(r[0]) for r in sheets["About"] if r[0])
    assert "epsilon = 0.75" in about and "added or removed" in about
    assert "epsilon = 1.25 of its total budget of 3" in about
    counts = sheets["noisy_counts"]
    assert counts[0] == ["age", "sex", "noisy_count", "ci_lower", "ci_upper", "note"]
    assert counts[1] == ["17 to under 26.125", "Female", 120, 101, 139, None]
    assert all(isinstance(v, int) for v in counts[2][2:5])  # counts are whole numbers
    assert counts[3][1] == '=HYPERLINK("x")'  # text, not a formula


def test_the_workbook_stores_text_that_looks_like_a_formula_as_text(package):
    import openpyxl

    sheet = openpyxl.load_workbook(io.BytesIO(package["release.xlsx"]))["noisy_counts"]
    assert sheet["B4"].data_type == "s" and sheet["C2"].data_type == "n"


def test_the_report_is_self_contained_and_script_free(package):
    html = package["report.html"].decode()
    assert "<script" not in html and not re.search(r"\sstyle=", html)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # no external resource
    assert "<style>" in html and html.count("<svg") == 3  # counts + age and sex of synthetic
    assert "Survey 2026" in html and "epsilon = 0.75" in html


def test_the_public_page_variant_links_its_stylesheet_instead(package):
    from mechanisms.package import release_tables, report_html

    tables = release_tables({"synthetic.csv": SYNTHETIC.encode()}, MANIFEST)
    html = report_html(MANIFEST, tables, ["synthetic.csv"], CONTEXT, stylesheet_url="/r.css")
    assert "<style" not in html and '<link rel="stylesheet" href="/r.css">' in html


def test_the_pdf_states_the_guarantee_budget_and_method(package):
    text = " ".join(pdf_text(package["report.pdf"]).split())
    for phrase in (
        "Differentially private release 7",
        "epsilon = 0.75",
        "added or removed",
        "epsilon = 1.25 of its total budget of 3",
        "Wasserman",
        "How to read them",
    ):
        assert phrase in text, phrase


def test_reports_sharing_the_process_fonts_are_the_pdf_a_fresh_configuration_makes(package):
    """report_pdf keeps one font configuration per process (its caches): the second and third
    reports it renders are byte for byte the PDF WeasyPrint makes with fonts of its own, but
    for the creation and modification dates."""
    import weasyprint

    html = package["report.html"].decode()
    report_pdf(html)  # the process's fonts have laid out a report before

    def undated(pdf: bytes) -> bytes:
        return re.sub(rb"/(CreationDate|ModDate) \(D:[^)]*\)", b"", pdf)

    fresh = undated(weasyprint.HTML(string=html).write_pdf())
    assert undated(report_pdf(html)) == fresh == undated(report_pdf(html))
    assert undated(report_pdf(html.replace("How to read them", "How to read these"))) != fresh


def test_the_readme_keeps_to_78_columns_and_names_every_file(package):
    readme = package["README.txt"].decode()
    assert max(len(line) for line in readme.splitlines()) <= 78
    for name in ("report.pdf", "release.xlsx", "noisy_counts.csv"):
        assert name in readme


def test_categories_that_look_like_numbers_stay_text():
    manifest = {
        "parameters": {"columns": ["code"]},
        "schema": {"columns": [{"name": "code", "type": "categorical", "categories": ["007"]}]},
    }
    table = read_table("noisy_counts.csv", b"code,noisy_count\n007,5\n", manifest)
    assert table.rows == [["007", 5]]


def test_intervals_stay_beside_the_estimate_they_belong_to():
    """The smoothed histogram's file: the interval is for real_count_estimate."""
    content = (
        "age,synthetic_count,real_count_estimate,ci_lower,ci_upper\n"
        "17 to under 26.125,12,11.4,4.2,18.9\n"
    )
    table = read_table("noisy_counts.csv", content.encode(), MANIFEST)
    assert table.header == ["age", "synthetic_count", "real_count_estimate", "ci_lower", "ci_upper"]
    assert table.rows == [["17 to under 26.125", 12, 11, 4, 19]]
    from mechanisms.package.charts import table_charts

    (chart,) = table_charts(table, MANIFEST)
    assert (
        chart.title == "noisy counts: real_count_estimate" and "ci_lower to ci_upper" in chart.note
    )


def test_the_workbook_holds_every_kind_of_cell_as_the_table_has_it():
    """Numbers, text with XML's special characters, formulas-as-text, empty cells, text with
    a character XML cannot hold (dropped), and whole numbers, read back with openpyxl."""
    content = (
        "age,sex,noisy_count\n"
        '17.5,"a <b> & ""c""",3\n'
        "18.25,=SUM(A1),\n"
        ",  spaced  ,-2\n"
        "19,bell\x07,7\n"
    )
    table = read_table("noisy_counts.csv", content.encode(), MANIFEST)
    from mechanisms.package.workbook import workbook_bytes

    rows = xlsx_cells(workbook_bytes(MANIFEST, [table], CONTEXT))["noisy_counts"]
    assert rows[1:] == [
        [17.5, 'a <b> & "c"', 3, None],
        [18.25, "=SUM(A1)", None, None],
        [None, "  spaced  ", -2, rows[3][3]],  # the negative count's note
        [19, "bell", 7, None],
    ]
    assert "negative" in rows[3][3]


def test_the_package_says_where_the_workbook_holds_fewer_rows_than_the_csv(monkeypatch, package):
    """The workbook holds the first WORKBOOK_ROWS rows of a table (here 2 of 3); the README and
    the About sheet say so, and that the CSV has every row. Without a cut neither says it."""
    from mechanisms.package import readme, workbook

    assert "only the first" not in package["README.txt"].decode()
    monkeypatch.setattr(readme, "WORKBOOK_ROWS", 2)
    monkeypatch.setattr(workbook, "MAX_ROWS", 2)
    files = {"synthetic.csv": SYNTHETIC.encode()}
    cut = build_package(files, MANIFEST, CONTEXT)
    text = " ".join(cut["README.txt"].decode().split())
    assert "only the first 2 rows of synthetic.csv (3 rows): the CSV file has every row" in text
    sheets = xlsx_cells(cut["release.xlsx"])
    assert len(sheets["synthetic"]) == 3  # the header and 2 rows
    about = " ".join(str(r[0]) for r in sheets["About"] if r[0])
    assert "(first 2 of 3 rows: the CSV has all)" in about
    assert len(rows(cut["synthetic.csv"])) == 4


def test_a_one_column_csv_keeps_an_empty_value_as_a_quoted_field():
    """A blank line is skipped by most readers, so a lone missing value is written "" (a
    synthetic table of one column lost its missing share when pyarrow first wrote it)."""
    from mechanisms.package.tables import csv_text

    table = read_table("synthetic.csv", b'age\n23.5\n""\n30\n', MANIFEST)
    assert csv_text(table).decode().split("\r\n") == ["age", "23.5", '""', "30", ""]


def test_control_characters_in_the_publishing_details_do_not_stop_the_workbook():
    """Publishing details stored with a control character (accepted by the portal before it
    refused them) made every package of the dataset's releases fail (openpyxl's
    IllegalCharacterError: a server error on each download). They are dropped instead."""
    from dataclasses import replace

    from mechanisms.package.workbook import workbook_bytes

    table = read_table("synthetic.csv", SYNTHETIC.encode(), MANIFEST)
    context = replace(CONTEXT, title="bell\x07 title", publisher="esc\x1b[31m", note="vt\x0b")
    about = xlsx_cells(workbook_bytes(MANIFEST, [table], context))["About"]
    assert about[0] == ["bell title"] and ["Published by esc[31m."] in about and ["vt"] in about


@pytest.mark.parametrize("broken", [False, True])
def test_the_workbook_does_not_retype_every_row_cell_by_cell(monkeypatch, broken):
    """Issue 44: the package cost most of a release on large tables because each of up to
    100,000 synthetic rows went through openpyxl cell by cell (10.7 CPU s for 100,000 rows of
    7 columns; 1.2 s since: benchmarks/package_build.py). Pinned by counting the rows openpyxl
    is handed: the About sheet's lines and one header per table, whatever the table's length.
    The twin appends the rows through openpyxl again, and the count catches it."""
    from openpyxl.worksheet._write_only import WriteOnlyWorksheet

    from mechanisms.package import workbook

    appended = []
    original = WriteOnlyWorksheet.append
    monkeypatch.setattr(
        WriteOnlyWorksheet,
        "append",
        lambda sheet, row: appended.append(sheet.title) or original(sheet, row),
    )
    if broken:
        header_only = workbook._table_sheet

        def cell_by_cell(sheet, table):
            header_only(sheet, table)
            for row in table.head_rows(workbook.MAX_ROWS):
                sheet.append(row)

        monkeypatch.setattr(workbook, "_table_sheet", cell_by_cell)
    rows = "".join(f"{20 + k % 50},Female\n" for k in range(2_000))
    table = read_table("synthetic.csv", f"age,sex\n{rows}".encode(), MANIFEST)
    content = workbook.workbook_bytes(MANIFEST, [table], CONTEXT)
    assert (appended.count("synthetic") == 1) != broken
    if not broken:
        assert len(xlsx_cells(content)["synthetic"]) == 2_001  # the header and every row
