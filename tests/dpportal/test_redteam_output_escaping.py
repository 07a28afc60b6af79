"""Red-team finding 10 (issue 13, part): formulas after a `;` in CSV cells, live HTML in plotly
labels, and ε/δ shown in scientific notation."""

import csv
import io
import json
import re
import unicodedata
from decimal import Decimal

import pandas as pd
import pytest
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

import mechanisms
from dpportal.releases import charts
from mechanisms import csv_safety
from tests.helpers import client_for, make_dataset, make_release, make_user

TRIGGERS = "=+-@\t\r\0"
SEPARATORS = ",;\t|\r\n"  # what a spreadsheet may split a line on, whatever the file uses


def cells_a_spreadsheet_may_see(text: str) -> list[str]:
    """The cell contents when the text is split on any separator, quotes dropped in front."""
    return [part.lstrip('"') for part in re.split(f"[{re.escape(SEPARATORS)}]", text)]


def looks_like_formula(cell: str) -> bool:
    """As a spreadsheet that first normalises compatibility forms (NFKC: ＝ is =) sees it."""
    cell = unicodedata.normalize("NFKC", cell)
    return cell[:1] in TRIGGERS and cell != "" and not csv_safety.PURE_NUMBER.fullmatch(cell)


@pytest.mark.parametrize(
    "cell",
    [
        'x;=HYPERLINK("https://evil.example","y")',
        "a;+cmd",
        "ok;@SUM(A1)",
        "a,=1+1",
        'name;"=cmd"',
        "a|=b",
        "tab\t-x",
        "line\n=1",
        '＝HYPERLINK("https://evil.example","y")',
        "a;＋cmd",
        "－2+3",
        "＠SUM(A1)",
        "x|﹦1+1",
        "⁼1+1",
    ],
)
def test_a_formula_after_a_separator_is_escaped(cell):
    escaped = csv_safety.escape_cell(cell)
    assert not any(looks_like_formula(c) for c in cells_a_spreadsheet_may_see(escaped)), escaped


def test_plain_text_and_numbers_are_left_alone():
    for cell in ("[-10, -5)", "1;-2", "a=b", "plain, with a comma", "-3.5", 'say "hi"'):
        assert csv_safety.escape_cell(cell) == cell


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab1.e"=+-@;,|\t\r\n\0 ＝＋－＠﹦₊')), max_size=12))
def test_no_split_of_an_escaped_cell_starts_a_formula(text):
    escaped = csv_safety.escape_cell(text)
    assert escaped.replace("'", "") == text.replace("'", "")  # only apostrophes were added
    assert not any(looks_like_formula(c) for c in cells_a_spreadsheet_may_see(escaped))


def test_package_csv_escapes_a_formula_after_a_semicolon():
    source = b'label,count\r\n"Sales;=HYPERLINK(""https://evil.example"")",4\r\n'
    rows = list(csv.reader(io.StringIO(csv_safety.safe_csv(source).decode(), newline="")))
    assert rows[1][0] == 'Sales;\'=HYPERLINK("https://evil.example")'


@pytest.mark.django_db
def test_the_release_list_export_escapes_a_formula_after_a_semicolon():
    owner = make_user("owner")
    dataset = make_dataset(owner)
    dataset.name = 'Survey;=HYPERLINK("https://evil.example")'
    dataset.save(update_fields=["name"])
    make_release(owner, dataset)
    response = client_for(owner).get(reverse("release_list_csv"))
    rows = list(csv.reader(io.StringIO(response.content.decode(), newline="")))
    assert rows[1][1] == 'Survey;\'=HYPERLINK("https://evil.example")'


# ---------------------------------------------------------------- plotly labels

LINK = '<a href="https://evil.example">x</a>'


def test_chart_labels_titles_and_hover_text_carry_no_live_html():
    schema = mechanisms.Schema.from_dict(
        {
            "columns": [
                {
                    "name": "<b>col</b>",
                    "type": "categorical",
                    "categories": [LINK, "<b>bold</b>", "a&b"],
                },
                {"name": "plain", "type": "categorical", "categories": ["x", "y"]},
            ]
        }
    )
    synthetic = pd.DataFrame(
        {"<b>col</b>": [LINK, "<b>bold</b>", "a&b", LINK], "plain": ["x", "y", "x", "y"]}
    )
    figures = [
        c["figure"] for c in charts.synthetic_charts(schema, ["<b>col</b>", "plain"], synthetic)
    ]
    figures.append(charts.distribution_figure("<b>col</b>", [LINK], [0.5], [0.5]))
    text = json.dumps(figures)
    escaped_link = '&lt;a href="https://evil.example"&gt;x&lt;/a&gt;'
    assert figures[0]["data"][0]["x"][0] == escaped_link  # the label, shown as written
    assert escaped_link in figures[-1]["data"][1]["x"]  # the custodian's comparison too
    assert "&lt;b&gt;col&lt;/b&gt;" in text and "a&amp;b" in text
    for tag in ("<a", "<b>", "</b>"):
        assert tag not in text, tag  # plotly would render these as a link / bold
    titles = [f["layout"]["title"]["text"] for f in figures]
    assert all("<" not in t for t in titles)


# ---------------------------------------------------------------- ε and δ


@pytest.mark.parametrize(
    "value, shown",
    [
        (Decimal("1E+2"), "100"),
        (Decimal("0E-15"), "0"),
        (Decimal("1E-7"), "0.0000001"),
        (Decimal("0.500000"), "0.5"),
        ("0E-15", "0"),
        (Decimal("100.000000"), "100"),
    ],
)
def test_budgets_are_shown_in_plain_decimal(value, shown):
    from dpportal.templatetags.portal_labels import plain_number

    assert plain_number(value) == shown


@pytest.mark.django_db
def test_the_audit_log_shows_a_refunded_delta_in_plain_decimal():
    owner = make_user("owner")
    dataset = make_dataset(owner, epsilon_total=Decimal("100"))
    release = make_release(owner, dataset, epsilon=Decimal("0.0000001"))
    client = client_for(owner)
    assert client.post(reverse("release_cancel", args=[release.pk])).status_code == 302
    page = client.get(reverse("audit_log")).content.decode()
    details = " ".join(re.findall(r'<td class="details">(.*?)</td>', page, flags=re.S))
    assert "delta: 0" in details and "epsilon: 0.0000001" in details
    assert not re.search(r"\d[eE][+-]?\d", details), details
