"""Issue 43 item 1: a schema step a newcomer finishes in minutes (the page itself, through the
test client; tests/e2e/test_schema_page.py walks it in a browser).

- the person column chosen in the person question needs nothing else in its row;
- every error names the column and the field, and says how to fix it;
- a numeric column without bins gets the public default (10 equal-width bins);
- declared categories match the data regardless of capitals and surrounding spaces, keeping
  the declared spelling;
- bounds or categories that move more than 5% of a column are explained (the likely cause) and
  the owner is asked again; the explanation is read from the raw data, so only the owner's
  schema page shows it.
"""

import html

import pytest
from django.urls import reverse

from dpportal import services
from dpportal.models import Dataset
from tests.helpers import client_for, make_user, schema_post

pytestmark = pytest.mark.django_db

# 24 rows, 3 per person; lower-case answers with stray spaces, as a spreadsheet export has them
TABLE = "pid,longitude,sex,smoker,age\n" + "".join(
    f"{i // 3},{-93.6 + i / 100:.2f},{('female', ' MALE ')[i % 2]},{('yes', 'No ')[i % 3 > 0]},"
    f"{30 + i}\n"
    for i in range(24)
)
LONGITUDE = {"type": "numeric", "lower": "-180", "upper": "180", "bins": "8"}
SEX = {"type": "categorical", "categories": "Female\nMale", "match": "casefold"}
SMOKER = {"type": "categorical", "categories": "Yes\nNo", "match": "casefold"}
AGE = {"type": "numeric", "lower": "0", "upper": "100", "integer": "on"}
PID_AS_PROPOSED = {"type": "numeric"}  # what the page proposes for an ID: no bounds


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "newcomer.csv"
    path.write_text(TABLE)
    return services.dataset_create_from_path(
        owner=make_user("alice"), name="Newcomer", source_path=path, epsilon_total=1
    )


def post(dataset, rows, **extra):
    client = client_for(dataset.owner)
    response = client.post(reverse("dataset_schema", args=[dataset.pk]), schema_post(rows) | extra)
    dataset.refresh_from_db()
    return response, html.unescape(response.content.decode())


def test_the_person_column_chosen_once_needs_nothing_else(dataset):
    """Before: its row stayed "Numeric" and confirming failed ("Required for a numeric
    column.")."""
    rows = [PID_AS_PROPOSED, LONGITUDE, SEX, SMOKER, AGE]
    response, page = post(dataset, rows, person_column="pid", max_rows_per_person="3")
    assert response.status_code == 302, page
    columns = {c["name"]: c for c in dataset.schema["columns"]}
    assert columns["pid"] == {"name": "pid", "role": "person_id"}
    assert dataset.schema["max_rows_per_person"] == 3


def test_the_person_question_without_k_names_its_field(dataset):
    rows = [PID_AS_PROPOSED, LONGITUDE, SEX, SMOKER, AGE]
    response, page = post(dataset, rows, person_column="pid")
    assert response.status_code == 400
    assert (
        "At most how many rows of one person should a release use? Give the most rows one "
        "person may contribute" in page
    )
    assert not dataset.schema_confirmed


@pytest.mark.parametrize(
    "row, message",
    [
        (
            {"type": "numeric", "lower": "", "upper": "180"},
            "Column 'longitude': Lower bound is required for a numeric column — enter the "
            "smallest value any row could have",
        ),
        (
            {"type": "numeric", "lower": "-180", "upper": ""},
            "Column 'longitude': Upper bound is required for a numeric column — enter the "
            "largest value",
        ),
        (
            {"type": "numeric", "lower": "west", "upper": "180"},
            "Column 'longitude', Lower bound: Enter a number.",
        ),
        (
            {"type": "numeric", "lower": "0", "upper": "180", "bins": "0"},
            "Column 'longitude': Bins (0) must be a whole number from 1 to 1000",
        ),
        ({"type": "date"}, "Column 'longitude': Release as is required for a date column"),
        (
            {"type": "categorical", "categories": "East\n east ", "match": "casefold"},
            "Column 'longitude', Categories, one per line: Each category must appear once",
        ),
    ],
)
def test_every_error_names_the_column_and_the_field(dataset, row, message):
    response, page = post(dataset, [{"type": "ignored"}, row, SEX, SMOKER, AGE])
    assert response.status_code == 400
    assert message in page
    assert "Nothing was saved: please fix this problem" in page  # the summary lists it too
    assert page.count(message) == 2
    assert not dataset.schema_confirmed


def test_a_numeric_column_without_bins_gets_ten_public_bins(dataset):
    """Before: "Required for a numeric column." under an empty Bins (longitude, latitude)."""
    rows = [{"type": "ignored"}, LONGITUDE | {"bins": ""}, SEX, SMOKER, AGE]
    response, page = post(dataset, rows)
    assert response.status_code == 302, page
    columns = {c["name"]: c for c in dataset.schema["columns"]}
    assert columns["longitude"]["bins"] == 10


def test_one_click_lists_match_lower_case_data_and_keep_their_spelling(dataset):
    """Before: "Female, Male" and "Yes, No" against female and yes sent 100% to "(other)"."""
    response, page = post(dataset, [{"type": "ignored"}, LONGITUDE, SEX, SMOKER, AGE])
    assert response.status_code == 302, page
    moved = {c["column"]: c["moved"] for c in dataset.profile["clamping"]}
    assert moved.get("sex", 0) == 0 and moved.get("smoker", 0) == 0
    columns = {c["name"]: c for c in dataset.schema["columns"]}
    assert columns["sex"]["categories"] == ["Female", "Male"]
    assert columns["smoker"]["match"] == "casefold"


def test_the_page_proposes_ignoring_capitals_for_a_new_schema(dataset):
    page = client_for(dataset.owner).get(reverse("dataset_schema", args=[dataset.pk]))
    text = page.content.decode()
    assert '<option value="casefold" selected>Ignore capitals and spaces' in text


def test_a_list_compared_exactly_is_explained_and_asked_again(dataset):
    rows = [{"type": "ignored"}, LONGITUDE, SEX | {"match": "exact"}, SMOKER, AGE]
    response, page = post(dataset, rows)
    assert response.status_code == 200  # a question, not a refusal
    assert not dataset.schema_confirmed
    assert "Column 'sex': 24 of 24 values (100.0%) are not among the declared categories" in page
    assert "capitals or spaces (this column compares exactly: choose to ignore them)" in page
    assert "widen" not in page
    assert 'name="accept_clamping"' in page
    response, page = post(dataset, rows, accept_clamping="on")
    assert response.status_code == 302
    assert dataset.schema_confirmed


def test_bounds_narrower_than_the_data_are_explained_and_asked_again(dataset):
    rows = [{"type": "ignored"}, LONGITUDE, SEX, SMOKER, AGE | {"upper": "20"}]
    response, page = post(dataset, rows)
    assert not dataset.schema_confirmed
    assert "Column 'age': 24 of 24 values (100.0%) are outside the declared bounds" in page
    assert "Likely cause: the bounds are narrower than the data" in page


def test_the_explanation_is_for_the_owner_alone(dataset):
    """The counts are read from the raw data: an auditor never reaches the schema page, and the
    dataset page shows them no count after the owner confirmed anyway."""
    auditor = make_user("carol", custodian=False)
    dataset.auditors.add(auditor)
    rows = [{"type": "ignored"}, LONGITUDE, SEX, SMOKER, AGE | {"upper": "20"}]
    assert client_for(auditor).post(
        reverse("dataset_schema", args=[dataset.pk]), schema_post(rows)
    ).status_code in (403, 404)
    post(dataset, rows, accept_clamping="on")
    assert Dataset.objects.get(pk=dataset.pk).schema_confirmed
    page = client_for(auditor).get(reverse("dataset_detail", args=[dataset.pk]))
    text = html.unescape(page.content.decode())
    assert page.status_code == 200
    assert "24 of 24" not in text and "Likely cause" not in text
