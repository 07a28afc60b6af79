"""Schema bounds and bins past what 64-bit floats hold, on the schema page and through the API.

Bins so narrow that their equal-width edges collide (0 to 1e-300 in 10 bins; 1e15 to 1e15 + 1
in 1000 bins) and whole-number bounds at or beyond 2**64 used to end in a 500 (a math domain
error, a numpy casting error). Each is refused with a 400 that names the column and says what
to change; nothing is confirmed. A non-integer column with the exact float bound 2**64 is
accepted (see mechanisms.schema: bounds are floats, and 2**64 is one). The page and the API read
a typed bound as the nearest 64-bit float (as every decimal); the API has no "integer" key, so
the whole-number limits are checked on the page (and in tests/mechanisms/test_schema_hostile.py).
"""

import html
import re

import pytest
from django.core.cache import cache
from django.urls import reverse

from dpportal.models import Dataset
from tests.dpportal.test_api import api, post_json, token_from_page
from tests.dpportal.test_api import upload as api_upload
from tests.helpers import client_for, schema_post, upload

pytestmark = [pytest.mark.database, pytest.mark.django_db]

SEX = {"type": "categorical", "categories": "F\nM", "unknown": "other"}
IGNORED = {"type": "ignored"}

# the age column as typed on the schema page: (fields, what the refusal says)
REFUSED = {
    "edges repeat below 1e-300": (
        {"lower": "0", "upper": "1e-300", "bins": "10"},
        "leaves no value inside the bin",
    ),
    "float edges collide at 1e15": (
        {"lower": "1e15", "upper": "1000000000000001", "bins": "1000"},
        "neighbouring bin edges are the same 64-bit float; use fewer bins or a wider range",
    ),
    "a whole-number bound of 2**64": (
        {"lower": "0", "upper": str(2**64), "integer": "on", "bins": "10"},
        "must lie from -9007199254740992 to 9007199254740991",
    ),
    "a whole-number bound below -2**63": (
        {"lower": str(-(2**63) - 1), "upper": "0", "integer": "on", "bins": "10"},
        "must lie from -9007199254740992 to 9007199254740991",
    ),
}


@pytest.fixture(autouse=True)
def fresh_counters():
    cache.clear()
    yield
    cache.clear()


def page_errors(response) -> str:
    page = html.unescape(response.content.decode())
    return " ".join(re.findall(r'class="(?:message error|errorlist)[^>]*>(.*?)</', page, re.S))


@pytest.mark.parametrize("case", REFUSED)
def test_the_schema_page_refuses_bounds_floats_cannot_hold_with_words(owner, case):
    fields, says = REFUSED[case]
    client = client_for(owner)
    assert upload(client).status_code == 302
    dataset = Dataset.objects.get()
    age = {"type": "numeric", "missing": "cell"} | fields
    response = client.post(
        reverse("dataset_schema", args=[dataset.pk]), schema_post([age, SEX, IGNORED])
    )
    assert response.status_code == 400
    errors = page_errors(response)
    assert "'age'" in errors and says in errors, errors
    dataset.refresh_from_db()
    assert not dataset.schema_confirmed


def as_json(fields: dict) -> dict:
    """The page's fields as the API's JSON column: numbers as JSON numbers (ints stay ints)."""
    column = {"bins": int(fields["bins"])}  # the API has no "integer"
    for key in ("lower", "upper"):
        text = fields[key]
        column[key] = int(text) if re.fullmatch(r"-?\d+", text) else float(text)
    return column


def post_age(owner, age: dict):
    """Confirm, through the API, a schema whose age column is `age`; return the response."""
    client = api(token_from_page(owner))
    pk = api_upload(client).json()["id"]
    columns = [
        {"name": "age", "type": "numeric"} | age,
        {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
        {"name": "city", "type": "ignored"},
    ]
    return post_json(
        client,
        reverse("api_dataset_schema", args=[pk]),
        {"columns": columns, "public_knowledge": True},
    )


@pytest.mark.parametrize("case", [c for c in REFUSED if "integer" not in REFUSED[c][0]])
def test_the_api_refuses_bins_floats_cannot_hold_with_a_400(owner, case):
    fields, says = REFUSED[case]
    response = post_age(owner, as_json(fields))
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    assert "'age'" in response.json()["error"] and says in response.json()["error"]
    assert not Dataset.objects.get().schema_confirmed


def test_the_api_takes_a_bound_of_2_to_the_64_as_the_exact_float_it_is(owner):
    response = post_age(owner, {"lower": 0, "upper": 2**64, "bins": 4})
    assert response.status_code == 200, response.content
    assert Dataset.objects.get().schema["columns"][0]["upper"] == 2**64


def test_the_api_refuses_a_bound_no_float_holds_with_a_400(owner):
    response = post_age(owner, {"lower": 0, "upper": 10**400, "bins": 4})
    assert response.status_code == 400, response.content
    assert "upper" in str(response.json())
    assert not Dataset.objects.get().schema_confirmed
