"""Issue 46, items 1 and 4, on the pages and the API: the owner invites an analyst with an
allotment, the invitation link makes an analyst's account, the analyst prepares a request with
the accuracy preview and the planner, the owner reads it with its accuracy, budget impact and
risk and decides; the deciders are told of a waiting request (e-mail through Django's mail
backend, the home page) and the analyst of the decision; the analyst downloads the public
package of its approved release; the ledger shows the reservation to auditors.
"""

import io
import json
import re
import zipfile

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.models import AuditEvent, ReleaseRequest
from dpportal.releases import packaging
from tests.helpers import (
    client_for,
    dangling_references,
    histogram_post,
    make_analyst,
    make_dataset,
    make_request,
    make_user,
    run_now,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(services.delivery, "release_send", lambda release_id: False)


@pytest.fixture
def owner_with_mail(owner):
    owner.email = "owner@example.org"
    owner.save(update_fields=["email"])
    return owner


def post_request(client, dataset_pk, data):
    """Submit the analyst's request form as a browser does (open it, POST with its token)."""
    url = reverse("request_new", args=[dataset_pk])
    page = client.get(url).content.decode()
    token = re.search(r'name="submission" value="([^"]*)"', page)
    return client.post(url, {**data, "submission": token.group(1) if token else ""})


def test_the_owner_invites_on_the_page_and_the_link_makes_an_analysts_account(owner, small_dataset):
    response = client_for(owner).post(
        reverse("dataset_analysts", args=[small_dataset.pk]),
        {"action": "invite", "email": "ann@example.org", "epsilon": "0.4", "delta": ""},
    )
    assert response.status_code == 302
    small_dataset.refresh_from_db()
    assert str(small_dataset.epsilon_remaining) == "0.600000"  # reserved at once
    link = re.search(r"http://testserver(/invitations/[^/\s]+/)", mail.outbox[-1].body).group(1)
    visitor = Client()
    page = visitor.get(link).content.decode()
    assert "request differentially private releases" in page and "ε = 0.4" in page
    joined = visitor.post(
        link,
        {
            "username": "ann",
            "password1": "a long passphrase 46",
            "password2": "a long passphrase 46",
        },
    )
    assert joined["Location"] == reverse("analyst_workspace", args=[small_dataset.pk])
    workspace = visitor.get(joined["Location"]).content.decode()
    assert "Your allotment" in workspace and "You can still ask for" in workspace
    assert visitor.get(reverse("dataset_detail", args=[small_dataset.pk])).status_code == 404
    assert visitor.get(reverse("dataset_ledger", args=[small_dataset.pk])).status_code == 404
    analysts_page = client_for(owner).get(reverse("dataset_analysts", args=[small_dataset.pk]))
    assert "ann@example.org" in analysts_page.content.decode()
    assert dangling_references(analysts_page.content.decode())[0] == []


def test_a_waiting_request_is_mailed_to_its_deciders_and_listed_on_their_home_page(
    owner_with_mail, small_dataset, django_capture_on_commit_callbacks
):
    colleague = make_user("colleague")
    colleague.email = "colleague@example.org"
    colleague.save(update_fields=["email"])
    services.second_approver_set(dataset=small_dataset, user=owner_with_mail, username="colleague")
    ann, analyst = make_analyst(small_dataset, "ann")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = post_request(client_for(ann), small_dataset.pk, histogram_post(epsilon="0.2"))
    assert response.status_code == 302, response.content.decode()[:2000]
    request = ReleaseRequest.objects.get()
    assert sorted(m.to[0] for m in mail.outbox) == ["colleague@example.org", "owner@example.org"]
    message = mail.outbox[0]
    assert "waits for your decision" in message.subject and small_dataset.name in message.subject
    assert "ann asks for a release" in message.body and "ε = 0.2" in message.body
    assert f"http://testserver/requests/{request.pk}/" in message.body
    for decider in (owner_with_mail, colleague):
        home = client_for(decider).get(reverse("home")).content.decode()
        assert "Requests waiting for your decision" in home
        assert reverse("request_detail", args=[request.pk]) in home
    assert "Requests waiting" not in client_for(ann).get(reverse("home")).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        client_for(owner_with_mail).post(
            reverse("request_decide", args=[request.pk]), {"decision": "approve", "note": ""}
        )
    owner_home = client_for(owner_with_mail).get(reverse("home")).content.decode()
    assert "Requests waiting for your decision" not in owner_home  # decided
    assert "Requests waiting for your decision" in client_for(colleague).get("/").content.decode()


def test_the_analyst_is_mailed_the_decision_with_its_note(
    owner, small_dataset, django_capture_on_commit_callbacks
):
    ann, analyst = make_analyst(small_dataset, "ann")
    request = make_request(ann, analyst)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(owner).post(
            reverse("request_decide", args=[request.pk]),
            {"decision": "decline", "note": "ask for fewer columns"},
        )
    assert response.status_code == 302
    (message,) = mail.outbox
    assert message.to == ["ann@example.org"] and "was declined" in message.subject
    assert "Nothing was spent from your allotment" in message.body
    assert "owner (declined): ask for fewer columns" in message.body
    home = client_for(ann).get(reverse("home")).content.decode()
    assert f"Request {request.pk}" in home and "Declined" in home


def test_the_request_page_shows_accuracy_budget_impact_and_risk(owner, small_dataset):
    ann, analyst = make_analyst(small_dataset, "ann", epsilon="0.5")
    request = make_request(ann, analyst, epsilon="0.2")
    page = client_for(owner).get(reverse("request_detail", args=[request.pk])).content.decode()
    for words in (
        "Expected accuracy",
        "with 95% probability",
        "Not yet spent after approval</dt><dd>ε = 0.3",
        "held in analysts' allotments",
        "Someone who was 10.0% sure, before this release",
        "Record my decision",
    ):
        assert words in page, words
    as_analyst = client_for(ann).get(reverse("request_detail", args=[request.pk])).content.decode()
    assert "Withdraw this request" in as_analyst and "Record my decision" not in as_analyst
    assert "Dataset budget" not in as_analyst  # the analyst sees its allotment alone
    assert "with 95% probability" in as_analyst  # replace-one: the row count is public


def test_where_the_row_count_is_private_the_analyst_gets_no_accuracy_nor_planner(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    services.dataset_change_budget(
        dataset=dataset, user=owner, epsilon_total=1, delta_total=0, neighbouring="add-remove"
    )
    ann, analyst = make_analyst(dataset, "ann")
    client = client_for(ann)
    query = histogram_post(epsilon="0.2") | {"target_rows": "50"}
    estimate = client.get(reverse("request_preview", args=[dataset.pk]), query).json()
    assert estimate["ok"] and estimate["accuracy"] == [
        "The expected accuracy is shown to the dataset's owner only: it is predicted from the "
        "number of rows, which is private on this dataset (rows may be added or removed, or the "
        "rows of one person are protected together)."
    ]
    assert estimate["accuracy_table"] is None and estimate["epsilon_left"] == "0.2"
    assert str(dataset.row_count) not in json.dumps(estimate)
    plan = client.get(reverse("request_plan", args=[dataset.pk]), query).json()
    assert not plan["ok"] and "not available to analysts" in plan["errors"][0]
    request = make_request(ann, analyst, epsilon="0.2")
    page = client.get(reverse("request_detail", args=[request.pk])).content.decode()
    assert "shown to the dataset&#x27;s owner only" in page and "rows=" not in page
    owner_page = client_for(owner).get(reverse("request_detail", args=[request.pk]))
    assert "with 95% probability" in owner_page.content.decode()


def test_the_analysts_estimate_and_planner_work_against_its_allotment(owner, small_dataset):
    ann, analyst = make_analyst(small_dataset, "ann", epsilon="0.5")
    make_request(ann, analyst, epsilon="0.1")  # waiting: 0.4 left to ask for
    client = client_for(ann)
    query = histogram_post(epsilon="0.3") | {"target_rows": "50"}
    estimate = client.get(reverse("request_preview", args=[small_dataset.pk]), query).json()
    assert estimate["ok"] and estimate["epsilon_left"] == "0.1" and estimate["fits"]
    assert estimate["epsilon_total"] == "0.5" and estimate["accuracy_table"]["rows"]
    assert estimate["risk"]["dataset_total"]["epsilon"] == "0.4"  # waiting 0.1 + this 0.3
    assert "your allotment" in estimate["risk"]["total_caption"]
    plan = client.get(reverse("request_plan", args=[small_dataset.pk]), query).json()
    assert plan["ok"] and plan["epsilon_remaining"] == "0.4"
    form = client.get(reverse("request_new", args=[small_dataset.pk])).content.decode()
    assert "Send the request to the owner" in form and "ε = 0.4</strong>" in form
    missing, references = dangling_references(form)
    assert missing == [] and references > 5  # every help text the fields point at is there


def test_the_same_request_form_posted_twice_makes_one_request(owner, small_dataset):
    ann, _ = make_analyst(small_dataset, "ann")
    client, url = client_for(ann), reverse("request_new", args=[small_dataset.pk])
    token = re.search(r'name="submission" value="([^"]*)"', client.get(url).content.decode())
    data = histogram_post(epsilon="0.1") | {"submission": token.group(1)}
    first, second = client.post(url, data), client.post(url, data)
    assert first["Location"] == second["Location"] and ReleaseRequest.objects.count() == 1
    too_much = post_request(client, small_dataset.pk, histogram_post(epsilon="0.35"))
    assert too_much.status_code == 400
    assert "only ε = 0.3 of your allotment of 0.4 is left" in too_much.content.decode()


def test_the_analyst_downloads_the_public_package_once_approved(
    owner, small_dataset, a_minute_later
):
    ann, analyst = make_analyst(small_dataset, "ann")
    request = make_request(ann, analyst)
    client = client_for(ann)
    zip_url = reverse("request_download_zip", args=[request.pk])
    assert client.get(zip_url).status_code == 404  # nothing released yet
    release = services.request_decide(release_request=request, user=owner, approve=True).release
    run_now(release)
    page = client.get(reverse("request_detail", args=[request.pk])).content.decode()
    assert "Download the public package" in page
    assert reverse("release_detail", args=[release.pk]) not in page  # the owner's page
    response = client.get(zip_url)
    assert response.status_code == 200
    names = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))).namelist()
    assert {name.split("/", 1)[1] for name in names} == set(packaging.package_names(release))
    assert not any("utility" in name for name in names)  # the custodian-only report stays
    assert client.get(reverse("release_detail", args=[release.pk])).status_code == 404
    assert client.get(reverse("release_utility_report", args=[release.pk])).status_code == 404
    download = AuditEvent.objects.filter(action=AuditEvent.Action.DOWNLOAD).get()
    assert download.actor == ann and download.release == release


def test_an_analyst_never_sees_another_analysts_requests(owner, small_dataset):
    ann, analyst = make_analyst(small_dataset, "ann")
    ben, other = make_analyst(small_dataset, "ben")
    bens = make_request(ben, other)
    anns = make_request(ann, analyst)
    client = client_for(ann)
    assert client.get(reverse("request_detail", args=[bens.pk])).status_code == 404
    listing = client.get(reverse("dataset_requests", args=[small_dataset.pk])).content.decode()
    assert f"Request {anns.pk}" in listing and f"Request {bens.pk}" not in listing
    workspace = client.get(reverse("analyst_workspace", args=[small_dataset.pk])).content.decode()
    assert f"Request {bens.pk}" not in workspace


def test_auditors_see_the_reservation_in_the_ledger(owner, auditor, small_dataset, a_minute_later):
    make_analyst(small_dataset, "ann", epsilon="0.25")
    page = client_for(auditor).get(reverse("dataset_ledger", args=[small_dataset.pk]))
    text = page.content.decode()
    assert "Reserved for an analyst" in text and "<td>ann</td>" in text
    csv_rows = client_for(auditor).get(reverse("dataset_ledger_csv", args=[small_dataset.pk]))
    assert "Reserved for an analyst" in csv_rows.content.decode()
    assert ",0.25,0,0.25,0,ann" in csv_rows.content.decode()


def test_the_whole_flow_through_the_api(owner, small_dataset, a_minute_later):
    ann, analyst = make_analyst(small_dataset, "ann")
    token_page = client_for(ann).post(reverse("token_list"), {"name": "scripts"})
    assert token_page.status_code == 201  # analysts may make API tokens
    _, ann_secret = services.token_create(user=ann, name="api")
    _, owner_secret = services.token_create(user=owner, name="api")
    as_ann = Client(HTTP_AUTHORIZATION=f"Bearer {ann_secret}")
    as_owner = Client(HTTP_AUTHORIZATION=f"Bearer {owner_secret}")
    workspace = as_ann.get(reverse("api_analyst_workspace", args=[small_dataset.pk])).json()
    assert workspace["schema"] == small_dataset.schema and "row_count" not in workspace
    assert workspace["allotment"]["epsilon_available"] == "0.4"
    url = reverse("api_dataset_requests", args=[small_dataset.pk])
    body = json.dumps(histogram_post(epsilon="0.2") | {"purpose": "a table for a report"})
    made = as_ann.post(url, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k1")
    assert made.status_code == 201, made.content
    again = as_ann.post(url, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k1")
    assert again.json()["replayed"] and again.json()["id"] == made.json()["id"]
    pk = made.json()["id"]
    seen = as_owner.get(reverse("api_request_detail", args=[pk])).json()
    assert seen["you_may_decide"] and seen["review"]["accuracy"]["lines"]
    assert seen["review"]["dataset_budget"]["epsilon_reserved"] == "0.4"
    decided = as_owner.post(
        reverse("api_request_decide", args=[pk]),
        json.dumps({"decision": "approve", "note": "fine"}),
        content_type="application/json",
    )
    assert decided.json()["status"] == "approved"
    run_now(ReleaseRequest.objects.get(pk=pk).release)
    mine = as_ann.get(reverse("api_request_detail", args=[pk])).json()
    assert mine["release"]["status"] == "done" and "dataset_budget" not in mine["review"]
    package = as_ann.get(mine["release"]["package_url"])
    assert package.status_code == 200 and package["Content-Type"] == "application/zip"
    allotments = as_owner.get(reverse("api_dataset_analysts", args=[small_dataset.pk])).json()
    assert allotments["analysts"][0]["epsilon_held"] == "0.2"
