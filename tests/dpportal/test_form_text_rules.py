"""Red-team findings on typed text and numbers (issue 13, item 10): look-alike, zero-width and
right-to-left-override characters in names, Unicode digits read as numbers, a 3 MB description
answered with a bare 400."""

import html

import pytest
from django.core.exceptions import ValidationError

from dpportal.core.form_fields import PlainDecimalField, clean_display_text
from dpportal.models import Dataset
from tests.helpers import client_for, make_user, upload


@pytest.mark.parametrize(
    "text, says",
    [
        ("Survey\u200b2024", "U+200B"),  # zero-width space
        ("Survey \u202egpj.exe", "U+202E"),  # right-to-left override
        ("Census\u2066", "U+2066"),  # bidi isolate
        ("P\u0430yroll", "Cyrillic and Latin"),  # Cyrillic а inside a Latin word
        ("Bad\x07bell", "U+0007"),
    ],
)
def test_names_with_invisible_or_lookalike_characters_are_refused(text, says):
    with pytest.raises(ValidationError) as refused:
        clean_display_text(text)
    assert says in " ".join(refused.value.messages)


@pytest.mark.parametrize(
    "text, normal",
    [("Ｓｕｒｖｅｙ", "Survey"), ("ﬁnance", "finance"), ("Zürich", "Zürich"), ("Ελλάδα", "Ελλάδα")],
)
def test_names_are_normalised_and_single_script_text_is_kept(text, normal):
    assert clean_display_text(text) == normal


def test_descriptions_keep_their_line_breaks():
    assert clean_display_text("line one\nline two", multiline=True) == "line one\nline two"


@pytest.mark.parametrize("typed", ["١", "٠.٥", "１", "0.५"])
def test_numbers_in_other_scripts_digits_are_refused(typed):
    with pytest.raises(ValidationError, match="digits 0-9"):
        PlainDecimalField().clean(typed)
    assert PlainDecimalField().clean(" 0.5 ") == pytest.approx(0.5)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields, says",
    [
        ({"name": "Pay\u200broll"}, "invisible or direction-changing character"),
        ({"epsilon_total": "١"}, "digits 0-9"),
        ({"description": "x" * 1_000_000}, "at most 5000 characters"),
    ],
)
def test_the_upload_form_says_what_is_wrong_and_stores_nothing(fields, says):
    client = client_for(make_user("alice"))
    response = upload(client, **fields)
    page = html.unescape(response.content.decode())
    assert response.status_code == 400 and says in page, page[-2000:]
    assert Dataset.objects.count() == 0


@pytest.mark.django_db
def test_a_description_beyond_the_request_limit_gets_a_page_with_words():
    client = client_for(make_user("alice"))
    client.raise_request_exception = False  # as a real server: the error handler answers
    response = upload(client, description="x" * 3_000_000)
    page = html.unescape(response.content.decode())
    assert response.status_code == 413 and "too large" in page.lower(), page[-2000:]
    assert Dataset.objects.count() == 0
