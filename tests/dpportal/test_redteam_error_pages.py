"""Red-team finding 7 (issue 13): a wide table's schema could never be confirmed (Django's
limit of 1000 form fields answered a bare "Bad Request (400)"), and error pages had no words."""

import random

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.urls import reverse

from dpportal import ingest, services
from dpportal.datasets.forms import SchemaColumnForm
from tests.helpers import client_for, make_user

WIDE = 400


def test_the_field_limit_fits_the_schema_form_of_the_widest_table_ingest_accepts():
    per_column = len(SchemaColumnForm.base_fields)
    # the form set's management form; CSRF token, public-knowledge box, person question (2),
    # the estimates' spends (2) and "Confirm anyway"
    overhead = 4 + 7
    assert settings.DATA_UPLOAD_MAX_NUMBER_FIELDS >= ingest.MAX_COLUMNS * per_column + overhead


def schema_post(columns: int) -> dict:
    data = {
        "form-TOTAL_FORMS": columns,
        "form-INITIAL_FORMS": columns,
        "form-MIN_NUM_FORMS": 1,
        "form-MAX_NUM_FORMS": 1000,
        "public_knowledge": "on",
    }
    for i in range(columns):
        data |= {
            f"form-{i}-type": "numeric",
            f"form-{i}-lower": "0",
            f"form-{i}-upper": "100",
            f"form-{i}-bins": "10",
            f"form-{i}-categories": "",
            f"form-{i}-unknown": "other",
        }
    return data


@pytest.mark.django_db
def test_a_400_column_numeric_table_can_have_its_schema_confirmed(tmp_path):
    rng = random.Random(13)
    path = tmp_path / "wide.csv"
    lines = [",".join(f"c{j}" for j in range(WIDE))]
    lines += [",".join(str(rng.randint(0, 100)) for _ in range(WIDE)) for _ in range(30)]
    path.write_text("\n".join(lines) + "\n")
    owner = make_user("owner")
    dataset = services.dataset_create_from_path(
        owner=owner, name="Wide", source_path=path, epsilon_total=1
    )
    client = client_for(owner)
    url = reverse("dataset_schema", args=[dataset.pk])
    assert client.get(url).status_code == 200
    data = schema_post(WIDE)
    print(
        f"\nWide table: {WIDE} numeric columns, schema form of {len(data)} fields "
        f"(limit {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS})"
    )
    response = client.post(url, data)
    assert b"Bad Request (400)" not in response.content
    assert response.status_code == 302, response.content.decode()[:500]
    dataset.refresh_from_db()
    assert dataset.schema_confirmed and len(dataset.schema["columns"]) == WIDE


@pytest.mark.django_db
def test_too_many_fields_get_a_page_that_says_so():
    client = Client(raise_request_exception=False)
    data = {f"f{i}": "x" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)}
    response = client.post(reverse("login"), data)
    body = response.content.decode()
    assert response.status_code == 400
    assert "more fields or files than the server accepts" in body and "nothing was saved" in body
    assert "Back to your datasets" in body  # in the site's layout, with a way on


@pytest.mark.django_db
@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_form_too_large_gets_413_with_words():
    client = Client(raise_request_exception=False)
    response = client.post(reverse("login"), {"username": "x" * 5000, "password": "y"})
    assert response.status_code == 413
    body = response.content.decode()
    assert "larger than the server accepts" in body and "nothing was saved" in body


@pytest.mark.django_db
def test_every_error_page_has_words_and_renders_without_a_request():
    from django.template.loader import render_to_string

    for code, words in (
        ("400", "could not understand"),
        ("403", "do not have permission"),
        ("404", "no page at this address"),
        ("413", "larger than the server"),
        ("500", "failed while answering"),
    ):
        body = render_to_string(f"{code}.html")  # no request: as Django renders 500.html
        assert words in body and f"({code})" in body, code


@pytest.mark.django_db
def test_a_missing_page_answers_404_with_words():
    owner = make_user("owner")
    response = client_for(owner).get("/datasets/999999/")
    assert response.status_code == 404
    assert "no page at this address" in response.content.decode()
