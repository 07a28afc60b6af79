"""The hostile strings of scripts/hostile_corpus.py (TEXT_PAYLOADS, NUMBER_PAYLOADS) in the
typed inputs of its TYPED_INPUTS: the publishing details, the range questions in words and the
analysts' allotments. Each string is refused with a message that names the field and says what
to change, or kept: shown escaped on every page, inert in every CSV (mechanisms/csv_safety.py)
and in the workbook (text cells, never formulas); never a server error.

Per commit, the publishing details get the strings of PER_COMMIT (each rebuilds a package with
its PDF); the long run (`-m slow`) gets every string. The range questions and the allotments get
every string per commit (no package is built)."""

import csv
import io
import math
import zipfile
from decimal import Decimal

import openpyxl
import pytest
from django.test import Client
from django.urls import reverse

from dpportal.models import BudgetLedgerEntry
from mechanisms import csv_safety
from tests.dpportal.test_api import api, post_json, token_from_page
from tests.dpportal.test_hostile_corpus import corpus
from tests.helpers import assert_no_live_html

pytestmark = pytest.mark.django_db

DETAILS = corpus.TYPED_INPUTS["publishing details"]
LABELS = ("Title", "Publisher", "Contact", "Note")
PER_COMMIT = ("formula_cmd", "script", "img", "control", "nul", "bidi_override", "huge", "non_bmp")
MUST_REFUSE = ("nul", "control", "bidi_override", "zero_width", "huge")
STRINGS = {**corpus.NUMBER_PAYLOADS, **corpus.TEXT_PAYLOADS}


def _owner(user) -> Client:
    client = Client(raise_request_exception=False)  # a server error is a response here
    client.force_login(user)
    return client


def _get(client, path, **query):
    response = client.get(path, query)
    assert response.status_code < 500, (path, query, response.status_code)
    return response


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


# ---------------------------------------------------------------- publishing details


def _detail_params():
    return [
        pytest.param(key, id=key, marks=[] if key in PER_COMMIT else [pytest.mark.slow])
        for key in corpus.TEXT_PAYLOADS
    ]


@pytest.mark.parametrize("key", _detail_params())
def test_publishing_details_are_refused_in_words_or_shown_inert(world, key):
    text = corpus.TEXT_PAYLOADS[key]
    owner, release = _owner(world.alice), world.release
    owner.post(reverse("release_public", args=[release.pk]), {"public": "1"}, follow=True)
    url = reverse("dataset_publishing", args=[world.dataset.pk])
    response = owner.post(url, dict.fromkeys(DETAILS, text), follow=True)
    assert response.status_code == 200, response.status_code
    said = [str(m) for m in response.context["messages"]]
    world.dataset.refresh_from_db()
    stored = [getattr(world.dataset, name) for name in DETAILS]
    if not said[0].startswith("Saved"):  # refused: nothing kept, every field's problem named
        assert key not in ("formula_cmd", "script", "img", "non_bmp"), said
        assert stored == [""] * 4, stored
        assert all(m.split(":")[0] in LABELS and len(m) > 30 for m in said), said
        return
    assert key not in MUST_REFUSE, (said, stored)
    _check_shown_inert(owner, world, release, stored)


def _check_shown_inert(owner, world, release, stored):
    public = _get(Client(), reverse("public_release", args=[release.pk])).content.decode()
    assert_no_live_html(public, "public page")
    page = _get(owner, reverse("dataset_detail", args=[world.dataset.pk])).content.decode()
    assert_no_live_html(page, "dataset page")
    zipped = _get(owner, reverse("release_download_zip", args=[release.pk]))
    assert zipped.status_code == 200
    with zipfile.ZipFile(io.BytesIO(_body(zipped))) as archive:
        for name in archive.namelist():
            _check_member(name, archive.read(name), stored)


def _check_member(name: str, content: bytes, stored: list[str]) -> None:
    if name.endswith(".html"):
        assert_no_live_html(content.decode(), name)
    elif name.endswith(".csv"):
        for row in csv.reader(io.StringIO(content.decode("utf-8-sig"), newline="")):
            assert all(csv_safety.escape_cell(cell) == cell for cell in row), (name, row)
    elif name.endswith(".xlsx"):
        book = openpyxl.load_workbook(io.BytesIO(content))
        cells = [cell for sheet in book for row in sheet.iter_rows() for cell in row]
        assert not [c.coordinate for c in cells if c.data_type == "f"], name  # text stays text
        if stored[0].strip():
            assert book["About"]["A1"].value == stored[0]
    elif name.endswith("README.txt") and stored[0].strip():
        assert content.decode().startswith(stored[0] + "\n")


# ---------------------------------------------------------------- range questions in words

QUESTIONS = {  # the default question of each kind; the hostile string replaces `fields`
    "box": ({"lo_0": "30", "hi_0": "50"}, ("lo_0", "hi_1")),
    "line": ({"p1_0": "20", "p1_1": "10", "p2_0": "80", "p2_1": "60"}, ("p1_0", "p2_1")),
    "halfspace": ({"a_0": "1", "a_1": "1", "b": "100"}, ("a_0", "b")),
}


def test_range_questions_are_answered_or_refused_in_words(pages_world):
    owner, release = _owner(pages_world.alice), pages_world.range_release
    url = reverse("release_detail", args=[release.pk])
    problems, answered = [], 0
    for key, value in STRINGS.items():
        for kind, (question, fields) in QUESTIONS.items():
            query = {"ask": "1", "kind": kind, **question, **dict.fromkeys(fields, value)}
            response = _get(owner, url, **query)
            assert_no_live_html(response.content.decode(), f"{key} {kind}")
            answer, form = response.context.get("range_answer"), response.context["query_form"]
            if answer is not None:
                answered += 1
                numbers = (answer["answer"], answer["ci_lower"], answer["ci_upper"])
                if not all(math.isfinite(n) for n in numbers) or len(answer["asked"]) > 400:
                    problems.append((key, kind, "answer", numbers, answer["asked"][:80]))
                continue
            said = [str(e) for errors in form.errors.values() for e in errors]
            if not said or any(s.startswith("query ") or len(s) < 15 for s in said):
                problems.append((key, kind, "message", said))
    print(f"{len(STRINGS) * len(QUESTIONS)} questions, {answered} answered")
    assert problems == []


def test_a_halfspace_with_huge_weights_is_the_same_question_as_its_scaled_form(pages_world):
    """1e308·age + 1e308·hours ≤ 1e308 is age + hours ≤ 1: no row (every age is 17 or more).
    Before, a·x overflowed to infinity and the page answered about 2,000 rows."""
    owner, release = _owner(pages_world.alice), pages_world.range_release
    url = reverse("release_detail", args=[release.pk])

    def answer(weight):
        query = {"ask": "1", "kind": "halfspace", "a_0": weight, "a_1": weight, "b": weight}
        return _get(owner, url, **query).context["range_answer"]

    huge, plain = answer("1e308"), answer("1")
    assert (huge["answer"], huge["ci_lower"], huge["ci_upper"]) == (
        plain["answer"],
        plain["ci_lower"],
        plain["ci_upper"],
    )
    assert len(huge["asked"]) < 200, huge["asked"]  # not 309 digits per weight


def test_a_box_outside_the_columns_bounds_is_refused_in_words(pages_world):
    owner, release = _owner(pages_world.alice), pages_world.range_release
    url = reverse("release_detail", args=[release.pk])
    form = _get(owner, url, ask="1", kind="box", lo_0="1e308").context["query_form"]
    assert form.errors["lo_0"] == [
        "No row is age from 1e+308 up: age runs from 16.5 to 90.5 in this release; ask from a "
        "value below 90.5."
    ]
    form = _get(owner, url, ask="1", kind="box", hi_1="-5").context["query_form"]
    assert "hours-per-week runs from 0.5 to 99.5" in form.errors["hi_1"][0]


# ---------------------------------------------------------------- allotments


def test_allotments_are_refused_in_words_or_reserved_exactly(world):
    owner = _owner(world.alice)
    url = reverse("dataset_analysts", args=[world.dataset.pk])
    problems = []
    for key, value in STRINGS.items():
        for field in corpus.TYPED_INPUTS["allotments"]:
            data = {"action": "invite", "email": f"{key}@example.org", "epsilon": "0.001"}
            response = owner.post(url, {**data, "delta": "", field: value})
            if response.status_code == 400:
                said = response.context["invite_form"].errors.get(field, [])
                if not said or any(len(str(s)) < 15 for s in said):
                    problems.append((key, field, said))
            elif response.status_code != 302:
                problems.append((key, field, response.status_code))
    assert problems == []
    reserved = BudgetLedgerEntry.objects.filter(dataset=world.dataset, kind="reserve")
    for entry in reserved:  # only numbers a reader would read the same way were kept
        assert entry.epsilon in (Decimal("0.001"), Decimal("0.5")) and entry.delta == 0
    page = _get(owner, url).content.decode()
    assert_no_live_html(page, "analysts page")
    ledger = _get(owner, reverse("dataset_ledger_csv", args=[world.dataset.pk])).content
    for row in csv.reader(io.StringIO(ledger.decode("utf-8-sig"), newline="")):
        assert all(csv_safety.escape_cell(cell) == cell for cell in row), row


@pytest.mark.parametrize(
    "value", [[0.1, 5], {"a": 1}, True, None, 10**400, "1e309", "<script>alert(1)</script>", "١"]
)
def test_an_allotment_through_the_api_is_refused_in_words(world, value):
    client = api(token_from_page(world.alice))
    url = reverse("api_dataset_analysts", args=[world.dataset.pk])
    body = {"email": "ana@example.org", "epsilon": value}
    response = post_json(client, url, body)
    assert response.status_code == 400, response.content
    assert "epsilon" in response.content.decode().lower(), response.content
    assert not BudgetLedgerEntry.objects.filter(dataset=world.dataset, kind="reserve").exists()
