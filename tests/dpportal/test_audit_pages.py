"""Audit pages: releases list (filters, sorting, CSV export), budget ledger, audit log."""

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dpportal import services
from dpportal.models import AuditEvent, Dataset, Release
from dpportal.services.budget import release_refund
from tests.helpers import make_dataset

pytestmark = pytest.mark.django_db


def login(username):
    user = get_user_model().objects.get_or_create(username=username)[0]
    client = Client()
    client.force_login(user)
    return user, client


def request_release(dataset, user, epsilon, mechanism="perturbed_histogram"):
    return services.release_create(
        dataset=dataset, user=user, mechanism=mechanism, columns=["age"], params={}, epsilon=epsilon
    )


@pytest.fixture
def two_tenants():
    """Alice owns 'Adult' (audited by Carol) with two releases; Bob owns 'Bob data' with one."""
    alice, alice_client = login("alice")
    bob, bob_client = login("bob")
    carol, carol_client = login("carol")
    adult = make_dataset(alice, epsilon_total=2)
    adult.auditors.add(carol)
    bobs = make_dataset(bob)
    bobs.name = "Bob data"
    bobs.save(update_fields=["name"])
    first = request_release(adult, alice, "0.25")
    second = request_release(adult, alice, "0.5", mechanism="mwem")
    Release.objects.filter(pk=second.pk).update(status=Release.Status.DONE)
    theirs = request_release(bobs, bob, "0.1")
    return {
        "alice": alice_client,
        "bob": bob_client,
        "carol": carol_client,
        "adult": adult,
        "bobs": bobs,
        "first": first,
        "second": second,
        "theirs": theirs,
    }


def listed_ids(response):
    return [release.pk for release in response.context["page"].object_list]


def test_it_lists_only_releases_of_visible_datasets(two_tenants):
    t = two_tenants
    owner_view = t["alice"].get(reverse("release_list"))
    assert owner_view.status_code == 200
    assert listed_ids(owner_view) == [t["second"].pk, t["first"].pk]  # newest first
    assert listed_ids(t["carol"].get(reverse("release_list"))) == [t["second"].pk, t["first"].pk]
    bob_view = t["bob"].get(reverse("release_list"))
    assert listed_ids(bob_view) == [t["theirs"].pk]
    assert b"Adult" not in bob_view.content


@pytest.mark.parametrize(
    "query, expected",
    [
        ({"status": "done"}, ["second"]),
        ({"status": "queued"}, ["first"]),
        ({"mechanism": "mwem"}, ["second"]),
        ({"sort": "epsilon"}, ["first", "second"]),
        ({"sort": "-epsilon"}, ["second", "first"]),
        ({"sort": "id"}, ["first", "second"]),
    ],
)
def test_it_filters_and_sorts_releases(two_tenants, query, expected):
    response = two_tenants["alice"].get(reverse("release_list"), query)
    assert listed_ids(response) == [two_tenants[name].pk for name in expected]


def test_it_filters_releases_by_dataset_user_and_date(two_tenants):
    t = two_tenants
    t["adult"].auditors.add(get_user_model().objects.get(username="alice"))
    t["bobs"].auditors.add(get_user_model().objects.get(username="alice"))
    everything = listed_ids(t["alice"].get(reverse("release_list")))
    assert len(everything) == 3
    by_dataset = t["alice"].get(reverse("release_list"), {"dataset": t["bobs"].pk})
    assert listed_ids(by_dataset) == [t["theirs"].pk]
    bob_id = get_user_model().objects.get(username="bob").pk
    assert listed_ids(t["alice"].get(reverse("release_list"), {"user": bob_id})) == [t["theirs"].pk]
    Release.objects.filter(pk=t["first"].pk).update(created_at=timezone.now() - timedelta(days=10))
    today = timezone.now().date().isoformat()
    recent = listed_ids(t["alice"].get(reverse("release_list"), {"date_from": today}))
    assert t["first"].pk not in recent and len(recent) == 2
    old = listed_ids(
        t["alice"].get(
            reverse("release_list"),
            {"date_to": (timezone.now() - timedelta(days=5)).date().isoformat()},
        )
    )
    assert old == [t["first"].pk]


def test_it_explains_a_reversed_date_range(two_tenants):
    response = two_tenants["alice"].get(
        reverse("release_list"), {"date_from": "2026-03-02", "date_to": "2026-03-01"}
    )
    assert response.status_code == 200
    assert "The start date (2026-03-02) is after the end date (2026-03-01)" in (
        response.content.decode()
    )


def test_it_ignores_filter_choices_outside_the_users_datasets(two_tenants):
    t = two_tenants
    response = t["alice"].get(reverse("release_list"), {"dataset": t["bobs"].pk})
    assert response.status_code == 200
    assert t["theirs"].pk not in listed_ids(response)
    assert b"Bob data" not in response.content


def test_it_exports_releases_as_formula_safe_csv(two_tenants):
    t = two_tenants
    t["adult"].name = '=HYPERLINK("http://evil")'
    t["adult"].save(update_fields=["name"])
    tab_user = get_user_model().objects.create_user(username="\tmallory")
    t["adult"].auditors.add(tab_user)
    request_release(t["adult"], tab_user, "0.125")
    response = t["alice"].get(reverse("release_list_csv"), {"sort": "epsilon"})
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    rows = list(csv.reader(io.StringIO(response.content.decode(), newline="")))
    assert rows[0][:5] == ["release", "dataset", "method", "status", "epsilon"]
    assert [row[4] for row in rows[1:]] == ["0.125", "0.25", "0.5"]  # numbers stay numbers
    assert {row[1] for row in rows[1:]} == {'\'=HYPERLINK("http://evil")'}
    assert rows[1][7] == "'\tmallory"
    print(f"\nCSV export: {len(rows) - 1} rows, formula cells escaped, round-trips csv.reader")


def test_the_csv_export_applies_the_same_filters(two_tenants):
    response = two_tenants["alice"].get(reverse("release_list_csv"), {"status": "done"})
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert [int(row[0]) for row in rows[1:]] == [two_tenants["second"].pk]


def test_the_ledger_shows_every_debit_with_running_totals_and_a_chart(two_tenants):
    t = two_tenants
    response = t["alice"].get(reverse("dataset_ledger", kwargs={"pk": t["adult"].pk}))
    assert response.status_code == 200
    entries = response.context["entries"]
    assert [(e.release_id, e.epsilon, e.epsilon_spent_after) for e in entries] == [
        (t["first"].pk, Decimal("0.25"), Decimal("0.25")),
        (t["second"].pk, Decimal("0.5"), Decimal("0.75")),
    ]
    html = response.content.decode()
    start = html.index('<script id="ledger-figure" type="application/json">')
    figure = json.loads(html[html.index(">", start) + 1 : html.index("</script>", start)])
    assert figure["data"][0]["y"] == [0.0, 0.25, 0.75, 0.75]  # ... and on until now
    assert figure["data"][1]["y"] == [2.0, 2.0]
    assert "js/audit_ledger.js" in html and "js/vendor/plotly.min.js" in html
    assert "<script>" not in html  # no inline script: the CSP would block it


def test_the_ledger_is_visible_to_auditors_and_hidden_from_others(two_tenants):
    t = two_tenants
    url = reverse("dataset_ledger", kwargs={"pk": t["adult"].pk})
    assert t["carol"].get(url).status_code == 200
    assert t["bob"].get(url).status_code == 404
    assert t["bob"].get(reverse("dataset_ledger", kwargs={"pk": 999999})).status_code == 404


class LedgerTable(HTMLParser):
    """The text of each body row's cells in the ledger page's table."""

    def __init__(self):
        super().__init__()
        self.rows, self.cell, self.in_body = [], None, False

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self.in_body = True
        elif self.in_body and tag == "tr":
            self.rows.append([])
        elif self.in_body and tag == "td":
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.rows[-1].append(" ".join(self.cell.split()))
            self.cell = None
        elif tag == "tbody":
            self.in_body = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def page_rows(client, dataset):
    table = LedgerTable()
    table.feed(client.get(reverse("dataset_ledger", kwargs={"pk": dataset.pk})).content.decode())
    return table.rows


def csv_rows(client, dataset):
    response = client.get(reverse("dataset_ledger_csv", kwargs={"pk": dataset.pk}))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    header, *rows = list(csv.reader(io.StringIO(response.content.decode(), newline="")))
    return header, rows


def as_page_shows(row):
    """A CSV row in the page's cells: "Release 7 (Done)" in one cell, a refund's − sign."""
    when, kind, release, status, *rest = row
    return [when, kind, f"Release {release} ({status})", *(c.replace("-", "−") for c in rest)]


@pytest.mark.parametrize("reader", ["alice", "carol"])
def test_the_ledger_csv_holds_the_rows_the_ledger_page_shows(two_tenants, reader, a_minute_later):
    """Owner (times to the second) and auditor (to the minute): a debit each, then a refund."""
    t = two_tenants
    with transaction.atomic():
        dataset = Dataset.objects.select_for_update().get(pk=t["adult"].pk)
        release = Release.objects.select_for_update().get(pk=t["first"].pk)
        assert release_refund(dataset=dataset, release=release)
    header, rows = csv_rows(t[reader], t["adult"])
    assert header[:3] == ["when", "entry", "release"] and header[6] == "epsilon"
    assert [r[1:3] for r in rows] == [
        ["Debit", str(t["first"].pk)],
        ["Debit", str(t["second"].pk)],
        ["Refund", str(t["first"].pk)],
    ]
    assert rows[2][6] == "-0.25" and rows[2][8] == "0.5"  # spent so far after the refund
    assert [as_page_shows(r) for r in rows] == page_rows(t[reader], t["adult"])
    assert len(rows[0][0]) == (19 if reader == "alice" else 16)  # Y-m-d H:i:s or Y-m-d H:i


def test_the_ledger_csv_escapes_a_formula_in_its_text(two_tenants):
    t = two_tenants
    alice = get_user_model().objects.get(username="alice")
    alice.username = '=HYPERLINK("http://evil.example","x")'
    alice.save(update_fields=["username"])
    _, rows = csv_rows(t["alice"], t["adult"])
    assert rows[0][5] == "'" + alice.username


def test_the_ledger_csv_is_for_the_ledger_page_readers_only(two_tenants):
    t = two_tenants
    url = reverse("dataset_ledger_csv", kwargs={"pk": t["adult"].pk})
    missing = t["bob"].get(reverse("dataset_ledger_csv", kwargs={"pk": 10**9}))
    stranger = t["bob"].get(url)
    assert stranger.status_code == missing.status_code == 404
    assert stranger.content == missing.content and b"Adult" not in stranger.content
    assert Client().get(url).status_code == 302  # not signed in: to the login page
    page = t["alice"].get(reverse("dataset_ledger", kwargs={"pk": t["adult"].pk}))
    assert f'href="{url}"' in page.content.decode()


def test_the_audit_log_shows_who_what_when_and_from_where(two_tenants):
    t = two_tenants
    alice = get_user_model().objects.get(username="alice")
    services.audit_record(
        action=AuditEvent.Action.DOWNLOAD,
        actor=alice,
        dataset=t["adult"],
        release=t["second"],
        details={"file": "package.zip"},
        remote_addr="192.0.2.7",
    )
    response = t["alice"].get(reverse("audit_log"))
    html = response.content.decode()
    assert response.status_code == 200
    assert "192.0.2.7" in html and "file: package.zip" in html and "Download" in html
    actions = {e.action for e in response.context["page"].object_list}
    assert {"upload", "schema_confirmed", "release_requested", "download"} <= actions


def test_the_audit_log_hides_other_tenants_events(two_tenants, a_minute_later):
    t = two_tenants
    for user, dataset in (("bob", t["bobs"]), ("carol", t["adult"])):
        events = list(t[user].get(reverse("audit_log")).context["page"].object_list)
        assert {e.dataset_id for e in events} == {dataset.pk, None}
        assert {e.actor_name for e in events if e.dataset_id is None} == {user}  # own logins


def test_the_audit_log_filters_by_action_user_release_and_dataset(two_tenants):
    t = two_tenants
    client = t["alice"]

    def events(**query):
        return list(client.get(reverse("audit_log"), query).context["page"].object_list)

    assert {e.action for e in events(action="release_requested")} == {"release_requested"}
    assert {e.release_id for e in events(release=t["first"].pk)} == {t["first"].pk}
    assert events(user="nobody") == []
    assert {e.actor_name for e in events(user="alice")} == {"alice"}
    assert {e.dataset_id for e in events(dataset=t["adult"].pk)} == {t["adult"].pk}


def test_the_audit_log_exports_csv(two_tenants):
    response = two_tenants["alice"].get(reverse("audit_log_csv"), {"action": "upload"})
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:4] == ["event", "when", "who", "action"]
    assert [row[3] for row in rows[1:]] == ["upload"]
    assert len(rows[1][-1]) == 64  # the event's hash, for checks outside the portal


def test_audit_pages_refuse_post(two_tenants):
    for name in ("release_list", "audit_log", "release_list_csv", "audit_log_csv"):
        assert two_tenants["alice"].post(reverse(name)).status_code == 405


def test_auditors_do_not_see_details_computed_from_the_raw_file(two_tenants, a_minute_later):
    t = two_tenants
    sha256 = t["adult"].sha256
    assert len(sha256) == 64
    upload = {"action": "upload"}
    assert sha256 in t["alice"].get(reverse("audit_log"), upload).content.decode()
    assert sha256 in t["alice"].get(reverse("audit_log_csv"), upload).content.decode()
    auditor_page = t["carol"].get(reverse("audit_log"), upload)
    assert [e.action for e in auditor_page.context["page"].object_list] == ["upload"]
    assert sha256 not in auditor_page.content.decode()
    assert sha256 not in t["carol"].get(reverse("audit_log_csv"), upload).content.decode()


def test_the_releases_list_names_methods_in_plain_words(two_tenants):
    html = two_tenants["alice"].get(reverse("release_list")).content.decode()
    assert "Synthetic data (MWEM)" in html and "Noisy histogram" in html


def test_a_csv_export_with_an_invalid_filter_exports_nothing_and_says_why(two_tenants):
    t = two_tenants
    response = t["alice"].get(reverse("release_list_csv"), {"dataset": t["bobs"].pk})
    assert response.status_code == 400
    text = response.content.decode()
    assert text.startswith("Nothing was exported because a filter is not valid (Dataset: ")
    assert "Bob data" not in text
    response = t["alice"].get(reverse("audit_log_csv"), {"release": "-3"})
    assert response.status_code == 400 and "Release number" in response.content.decode()


def test_audit_pages_use_a_fixed_number_of_queries(two_tenants, django_assert_max_num_queries):
    t = two_tenants
    alice = get_user_model().objects.get(username="alice")
    for _ in range(20):
        request_release(t["adult"], alice, "0.01")
    pages = [
        reverse("release_list"),
        reverse("audit_log"),
        reverse("release_list_csv"),
        reverse("audit_log_csv"),
        reverse("dataset_ledger", kwargs={"pk": t["adult"].pk}),
    ]
    for url in pages:
        with django_assert_max_num_queries(12):  # no query per row
            assert t["alice"].get(url).status_code == 200
