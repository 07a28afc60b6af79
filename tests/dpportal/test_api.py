"""The REST API (dpportal/api): a token drives a whole release through a real worker; tokens
are shown once, stored hashed, revocable and audited; a browser session never drives the API;
bad input gets JSON errors naming the problem (never a 500); bad tokens share the sign-in
page's per-address limit; a repeated Idempotency-Key spends once."""

import io
import json
import re
import uuid
import zipfile

import pytest
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.access.credentials import ApiToken
from dpportal.models import AuditEvent, BudgetLedgerEntry, Dataset, Release
from tests.conftest import wait_until
from tests.dpportal.test_hostile_corpus import corpus as hostile_corpus
from tests.helpers import SMALL_CSV, SMALL_SCHEMA, client_for, make_user, skip_unless_postgres

pytestmark = [pytest.mark.database, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def fresh_counters():
    cache.clear()
    yield
    cache.clear()


def api(secret, address="192.0.2.10") -> Client:
    """A client without any session that sends the token on every request."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=address)


def token_from_page(user) -> str:
    """Create a token the way a custodian does: on the API tokens page."""
    page = client_for(user).post(reverse("token_list"), {"action": "create", "name": "script"})
    assert page.status_code == 201
    return re.search(r'<code id="new-token">([^<]+)</code>', page.content.decode()).group(1)


def post_json(client, url, data, **headers):
    return client.post(url, json.dumps(data), content_type="application/json", **headers)


def upload(client, content=SMALL_CSV, name="People", **fields):
    data = {"name": name, "epsilon_total": "1", "file": io.BytesIO(content)} | fields
    data["file"].name = "people.csv"
    return client.post(reverse("api_dataset_list"), data)


def schema_body():
    return {"columns": SMALL_SCHEMA["columns"], "public_knowledge": True}


RELEASE = {"mechanism": "perturbed_histogram", "columns": ["age", "sex"], "epsilon": "0.5"}


def test_a_token_drives_a_whole_release_through_a_real_worker(celery_worker_process):
    owner = make_user("owner")
    client = api(token_from_page(owner))

    created = upload(client)
    assert created.status_code == 201, created.content
    dataset_url = created["Location"]
    pk = created.json()["id"]
    assert created.json()["raw_facts"]["row_count"] == 3
    proposal = client.get(reverse("api_dataset_schema", args=[pk])).json()
    assert [p["name"] for p in proposal["proposal"]] == ["age", "sex", "city"]
    confirmed = post_json(client, reverse("api_dataset_schema", args=[pk]), schema_body())
    assert confirmed.status_code == 200, confirmed.content
    assert confirmed.json()["schema_confirmed"] is True

    estimate = client.get(reverse("api_dataset_preview", args=[pk]), RELEASE)
    assert estimate.status_code == 200, estimate.content
    assert estimate.json()["fits"] is True and estimate.json()["epsilon_left"] == "0.5"

    url, key = reverse("api_dataset_releases", args=[pk]), str(uuid.uuid4())
    assert estimate.json()["accuracy"]["warnings"]  # three rows: all noise, so it is confirmed
    confirmed_release = RELEASE | {"confirm": True}
    first = post_json(client, url, confirmed_release, HTTP_IDEMPOTENCY_KEY=key)
    assert first.status_code == 201, first.content
    again = post_json(client, url, confirmed_release, HTTP_IDEMPOTENCY_KEY=key)  # spends nothing
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["id"] == first.json()["id"]
    assert BudgetLedgerEntry.objects.filter(dataset_id=pk).count() == 1

    def finished():
        body = client.get(first["Location"]).json()
        return body if body["progress"]["terminal"] else None

    done = wait_until(finished, timeout=90)
    assert done["status"] == "done", done
    names = {f["name"] for f in done["files"]}
    assert {"manifest.json", "README.txt", "noisy_counts.csv"} <= names
    manifest = client.get(reverse("api_release_file", args=[done["id"], "manifest.json"]))
    assert manifest.status_code == 200
    assert json.loads(manifest.content)["mechanism"] == "perturbed_histogram"
    package = client.get(done["package_url"])
    assert package.status_code == 200
    assert len(zipfile.ZipFile(io.BytesIO(package.getvalue())).namelist()) == len(names)

    ledger = client.get(reverse("api_dataset_ledger", args=[pk])).json()
    assert [e["kind"] for e in ledger["entries"]] == ["debit"]
    assert ledger["budget"]["epsilon_spent"] == "0.5"
    assert client.get(dataset_url).json()["budget"]["epsilon_remaining"] == "0.5"
    actions = [e["action"] for e in client.get(reverse("api_audit_log")).json()["events"]]
    for action in ("token_created", "upload", "schema_confirmed", "release_requested", "download"):
        assert action in actions, actions
    downloads = AuditEvent.objects.filter(action="download", actor=owner)
    assert sorted(downloads.values_list("details__file", flat=True)) == [
        "manifest.json",
        "package.zip",
    ]


def test_tokens_are_shown_once_stored_hashed_and_revocable(owner, small_dataset):
    secret = token_from_page(owner)
    token = ApiToken.objects.get(user=owner)
    assert secret.startswith(token.prefix) and secret not in token.digest
    assert not ApiToken.objects.filter(digest=secret).exists()
    page = client_for(owner).get(reverse("token_list")).content.decode()
    assert secret not in page and token.prefix in page  # never shown again
    assert api(secret).get(reverse("api_dataset_list")).status_code == 200

    response = client_for(owner).post(
        reverse("token_list"), {"action": "revoke", "token": token.pk}
    )
    assert response.status_code == 302
    refused = api(secret).get(reverse("api_dataset_list"))
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]
    actions = list(
        AuditEvent.objects.filter(details__token=token.prefix).values_list("action", flat=True)
    )
    assert actions == ["token_created", "token_revoked", "token_refused"]


def test_another_users_token_cannot_be_revoked(owner, stranger):
    secret = token_from_page(owner)
    token = ApiToken.objects.get(user=owner)
    client_for(stranger).post(reverse("token_list"), {"action": "revoke", "token": token.pk})
    assert api(secret).get(reverse("api_dataset_list")).status_code == 200


def test_a_signed_in_browser_session_cannot_drive_the_api(owner, small_dataset):
    """Cookies never authenticate the API: GET 401; POST without CSRF 403; with CSRF 401."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    url = reverse("api_dataset_releases", args=[small_dataset.pk])
    assert browser.get(reverse("api_dataset_list")).status_code == 401
    no_csrf = post_json(browser, url, RELEASE, HTTP_IDEMPOTENCY_KEY="k")
    assert no_csrf.status_code == 403 and "error" in no_csrf.json()
    page = browser.get(reverse("token_list")).content.decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    with_csrf = post_json(browser, url, RELEASE, HTTP_IDEMPOTENCY_KEY="k", HTTP_X_CSRFTOKEN=csrf)
    assert with_csrf.status_code == 401
    assert not Release.objects.exists()


def test_bad_tokens_share_the_sign_in_limit_per_address(settings, owner):
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    good = token_from_page(owner)
    for _ in range(3):
        assert api("dpp_wrong").get(reverse("api_dataset_list")).status_code == 401
    blocked = api("dpp_wrong").get(reverse("api_dataset_list"))
    assert blocked.status_code == 429 and "Too many" in blocked.json()["error"]
    # a valid token is never refused because of other people's failures (issue 41 item 12)
    assert api(good).get(reverse("api_dataset_list")).status_code == 200
    refused = AuditEvent.objects.filter(action="token_refused", details__reason="unknown")
    assert refused.count() == 3  # the address past its limit writes no more audit events


def test_good_tokens_do_not_use_up_the_limit(settings, owner):
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 2
    client = api(token_from_page(owner))
    for _ in range(5):
        assert client.get(reverse("api_dataset_list")).status_code == 200


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),  # Python's reader recursed out
        ("[1, 2]", "must be a JSON object"),
        (json.dumps(RELEASE | {"epsilom": "1"}), "Unknown field(s): epsilom"),
        (json.dumps(RELEASE | {"epsilon": "lots"}), "errors"),
        (json.dumps(RELEASE | {"columns": [{"age": 1}]}), "give a number, a text"),
        (json.dumps(RELEASE | {"epsilon": "5"}), "Not enough privacy budget"),
    ],
)
def test_bad_release_requests_get_json_errors(owner, small_dataset, body, expected):
    client = api(token_from_page(owner))
    url = reverse("api_dataset_releases", args=[small_dataset.pk])
    response = client.post(url, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    assert expected in response.content.decode()
    assert not Release.objects.exists()


def test_a_release_needs_an_idempotency_key(owner, small_dataset):
    client = api(token_from_page(owner))
    response = post_json(client, reverse("api_dataset_releases", args=[small_dataset.pk]), RELEASE)
    assert response.status_code == 400 and "Idempotency-Key" in response.json()["error"]


def test_a_key_is_per_user_and_a_new_key_spends_again(owner, small_dataset):
    client = api(token_from_page(owner))
    url = reverse("api_dataset_releases", args=[small_dataset.pk])
    small = RELEASE | {"epsilon": "0.1"}
    assert post_json(client, url, small, HTTP_IDEMPOTENCY_KEY="a").status_code == 201
    assert post_json(client, url, small, HTTP_IDEMPOTENCY_KEY="b").status_code == 201
    assert post_json(client, url, small, HTTP_IDEMPOTENCY_KEY="a").status_code == 200
    assert BudgetLedgerEntry.objects.filter(dataset=small_dataset).count() == 2


def test_schema_errors_name_the_column_and_field(owner):
    client = api(token_from_page(owner))
    created = upload(client)
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    columns = [dict(c) for c in SMALL_SCHEMA["columns"]]
    columns[0]["upper"] = -5
    columns[1]["categories"] = ["F", "F"]
    response = post_json(
        client,
        reverse("api_dataset_schema", args=[pk]),
        {"columns": columns, "public_knowledge": True},
    )
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert "must be above the lower bound" in errors["columns[0].upper"][0]
    assert "repeated: F" in errors["columns[1].categories"][0]
    unticked = post_json(
        client,
        reverse("api_dataset_schema", args=[pk]),
        schema_body() | {"public_knowledge": False},
    )
    assert unticked.status_code == 400 and "public_knowledge" in unticked.json()["errors"]
    assert not Dataset.objects.get(pk=pk).schema_confirmed


def test_a_file_that_cannot_be_read_is_refused_in_json(owner):
    client = api(token_from_page(owner))
    response = upload(client, content=b'a,b\n1,"2"x\n')
    assert response.status_code == 400, response.content
    assert "Line 2, column 2" in response.json()["error"]
    assert not Dataset.objects.exists()
    missing = client.post(reverse("api_dataset_list"), {"name": "x", "epsilon_total": "1"})
    assert missing.status_code == 400 and "file" in missing.json()["errors"]


def test_an_upload_over_the_limit_is_refused_before_it_is_stored(settings, owner):
    settings.MAX_UPLOAD_BYTES = 10
    client = api(token_from_page(owner))
    response = upload(client, content=b"age\n" + b"1\n" * 50)
    assert response.status_code == 413 and "larger than the limit" in response.json()["error"]
    assert not Dataset.objects.exists()


def test_cancel_through_the_api_refunds_a_queued_release(owner, small_dataset):
    client = api(token_from_page(owner))
    release = services.release_create(
        dataset=small_dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age", "sex"],
        params={"rows": 10},
        epsilon="0.5",
    )
    response = client.post(reverse("api_release_cancel", args=[release.pk]))
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    again = client.post(reverse("api_release_cancel", args=[release.pk]))
    assert again.status_code == 400 and "Only a queued release" in again.json()["error"]


def test_a_malformed_multipart_body_gets_a_json_error(owner):
    client = api(token_from_page(owner))
    response = client.generic(
        "POST",
        reverse("api_dataset_list"),
        b'--x\r\nContent-Disposition: form-data; name="file"; filename="a.csv"\r\n\r\nab',
        content_type="multipart/form-data; boundary=x",
    )
    assert 400 <= response.status_code < 500
    assert response["Content-Type"] == "application/json", response.content[:200]
    assert not Dataset.objects.exists()


def test_too_many_fields_get_a_json_error(owner, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 5
    client = api(token_from_page(owner))
    data = {f"f{i}": "x" for i in range(10)} | {"name": "x", "epsilon_total": "1"}
    response = client.post(reverse("api_dataset_list"), data)
    assert response.status_code == 400 and "could not be read" in response.json()["error"]


def test_an_owner_manages_budget_access_and_deletion_through_the_api(owner, small_dataset):
    from django.core import mail

    client = api(token_from_page(owner))
    pk = small_dataset.pk
    budget = post_json(
        client,
        reverse("api_dataset_budget", args=[pk]),
        {"epsilon_total": "3", "delta_total": "0", "neighbouring": "replace-one"},
    )
    assert budget.status_code == 200 and budget.json()["budget"]["epsilon_total"] == "3"
    too_big = post_json(client, reverse("api_dataset_budget", args=[pk]), {"epsilon_total": "500"})
    assert too_big.status_code == 400 and "epsilon_total" in too_big.json()["errors"]

    make_user("carol")
    url = reverse("api_dataset_auditors", args=[pk])
    added = post_json(client, url, {"username": "carol", "action": "add"})
    assert added.status_code == 200 and added.json()["auditors"] == ["carol"]
    nobody = post_json(client, url, {"username": "nobody"})
    assert nobody.status_code == 400 and "no user named" in nobody.json()["error"]

    invitations = reverse("api_dataset_invitations", args=[pk])
    sent = post_json(client, invitations, {"email": "erin@example.org"})
    assert sent.status_code == 201 and mail.outbox[-1].to == ["erin@example.org"]
    pending = client.get(url).json()["invitations"]
    assert [i["email"] for i in pending] == ["erin@example.org"]
    withdrawn = post_json(client, invitations, {"revoke": pending[0]["id"]})
    assert withdrawn.status_code == 200 and withdrawn.json()["invitations"] == []

    wrong = post_json(client, reverse("api_dataset_delete", args=[pk]), {"confirm_name": "x"})
    assert wrong.status_code == 400 and "not the dataset's name" in str(wrong.json()["errors"])
    deleted = post_json(
        client, reverse("api_dataset_delete", args=[pk]), {"confirm_name": small_dataset.name}
    )
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert deleted.json()["public_pages_withdrawn"] == 0
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"budget_changed", "access_changed", "invitation_sent", "deletion"} <= actions


def test_token_requests_need_no_csrf_token_even_when_csrf_is_enforced(owner, small_dataset):
    """The test client skips CSRF checks unless told; here it enforces them, as a browser's
    server would: a token POST still goes through (the token is the proof of intent)."""
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {token_from_page(owner)}")
    url = reverse("api_dataset_releases", args=[small_dataset.pk])
    response = post_json(client, url, RELEASE, HTTP_IDEMPOTENCY_KEY="strict")
    assert response.status_code == 201, response.content
    assert upload(client, name="Strict").status_code == 201


def race_one_key(monkeypatch):
    """Two requests with one Idempotency-Key at the same moment, each on its own thread and
    connection, paused inside the locked admission; return (statuses, releases made)."""
    import threading
    import time

    from django.db import connection

    from tests.helpers import make_dataset

    check = services.releases.check_budget

    def check_then_pause(budget, epsilon, delta):
        check(budget, epsilon, delta)
        time.sleep(0.2)  # inside the locked admission: the twin request arrives meanwhile

    monkeypatch.setattr(services.releases, "check_budget", check_then_pause)
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)  # no broker
    owner = make_user("racer")
    dataset = make_dataset(owner)
    secret = services.token_create(user=owner, name="race")[1]
    url = reverse("api_dataset_releases", args=[dataset.pk])
    barrier, statuses = threading.Barrier(2), []

    def submit():
        try:
            client = api(secret)
            barrier.wait()
            statuses.append(
                post_json(client, url, RELEASE, HTTP_IDEMPOTENCY_KEY="same").status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    debits = BudgetLedgerEntry.objects.filter(dataset=dataset).count()
    return sorted(statuses), Release.objects.filter(dataset=dataset).count(), debits


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_requests_with_one_key_make_one_release(monkeypatch):
    """The key, checked and stored under the dataset lock, lets one request spend (201) and
    sends the other to its release (200)."""
    assert race_one_key(monkeypatch) == ([200, 201], 1, 1)


@pytest.mark.django_db(transaction=True)
def test_broken_twin_that_drops_the_key_spends_twice(monkeypatch):
    from dpportal.api import release_views

    monkeypatch.setattr(release_views, "submission_nonce", lambda user, key: "")
    assert race_one_key(monkeypatch) == ([201, 201], 2, 2)


# ---------------------------------------------------------------- every API error is JSON
# (issue 41, item 14): a view that fails, a database connection that drops, a body nested
# 10,000 levels deep, an address that names no endpoint.


def assert_json_error(response, status, *words):
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json", response.content[:300]
    message = response.json()["error"]
    assert all(word in message for word in words), message


def test_a_10000_deep_json_body_gets_a_400_with_words(owner, small_dataset):
    client = api(token_from_page(owner))
    deep = "[" * 10_000 + "]" * 10_000
    response = client.post(
        reverse("api_dataset_budget", args=[small_dataset.pk]),
        deep,
        content_type="application/json",
    )
    assert_json_error(response, 400, "nested too deeply")


def test_an_unexpected_failure_in_an_endpoint_is_a_json_500(owner, small_dataset, monkeypatch):
    client = api(token_from_page(owner))
    client.raise_request_exception = False

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("dpportal.api.dataset_views.dataset_json", broken)
    response = client.get(reverse("api_dataset_detail", args=[small_dataset.pk]))
    assert_json_error(response, 500, "nothing was done", "logged")
    assert "a bug" not in response.content.decode()  # no exception text, no traceback


def test_a_refusal_raised_as_permission_denied_is_a_json_403(owner, small_dataset, monkeypatch):
    client = api(token_from_page(owner))

    def refuse(*args, **kwargs):
        raise PermissionDenied("Not for you, and this is why.")

    monkeypatch.setattr("dpportal.api.dataset_views.dataset_json", refuse)
    response = client.get(reverse("api_dataset_detail", args=[small_dataset.pk]))
    assert_json_error(response, 403, "this is why")


@pytest.mark.parametrize("case_id", ["xlsx-shared-string-without-table", "xlsx-date-1900-02-29"])
def test_a_malformed_workbook_is_refused_in_json(owner, case_id):
    """The two workbooks that gave an HTML 500 (issue 41, item 14), uploaded by token."""
    case = next(c for c in hostile_corpus.cases(include_slow=False) if c.id == case_id)
    response = api(token_from_page(owner)).post(
        reverse("api_dataset_list"),
        {"name": "Book", "epsilon_total": "1", "file": SimpleUploadedFile("t.xlsx", case.make())},
    )
    assert_json_error(response, 400, "Row 2")
    assert not Dataset.objects.exists()


def get_after_the_connection_drops(client, url):
    """GET `url` after this process's PostgreSQL session was ended from the server side, as a
    restart or a network cut ends it (the backend terminates itself, the client's socket is
    closed under it); afterwards the next query opens a new session."""
    from django.db import OperationalError, connection

    skip_unless_postgres()
    client.raise_request_exception = False
    try:
        with pytest.raises(OperationalError):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return client.get(url)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_dropped_database_connection_is_a_json_503(owner):
    client = api(token_from_page(owner))
    response = get_after_the_connection_drops(client, reverse("api_dataset_list"))
    assert_json_error(response, 503, "database is not answering", "try again")
    assert response["Retry-After"] == "30"
    assert client.get(reverse("api_dataset_list")).status_code == 200  # and it recovers


@pytest.mark.django_db(transaction=True)
def test_a_dropped_connection_outside_the_endpoint_is_json_too(owner):
    """A signed-in browser calling the API without a token: the failure happens in a
    middleware reading the session, after the endpoint answered (the 500 handler's path)."""
    response = get_after_the_connection_drops(client_for(owner), reverse("api_dataset_list"))
    assert_json_error(response, 503, "database is not answering")


def test_an_unknown_api_address_is_a_json_404(owner):
    response = api(token_from_page(owner)).get("/api/v1/no-such-thing/")
    assert_json_error(response, 404, "openapi.json")
    page = client_for(owner).get("/no-such-page/")  # pages keep their HTML 404
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_the_api_declares_a_list_that_ignores_capitals(owner):
    """Issue 43: "match" goes through the schema page's own form; absent, texts compare
    exactly (as before); an unknown rule is refused naming the field."""
    client = api(token_from_page(owner))
    pk = upload(client, content=b"age,sex,city\n34,f,Leeds\n51, M ,York\n").json()["id"]
    url = reverse("api_dataset_schema", args=[pk])
    columns = [dict(c) for c in SMALL_SCHEMA["columns"]]
    columns[1]["match"] = "lower"
    refused = post_json(client, url, {"columns": columns, "public_knowledge": True})
    assert refused.status_code == 400 and "columns[1].match" in refused.json()["errors"]
    columns[1]["match"] = "casefold"
    response = post_json(client, url, {"columns": columns, "public_knowledge": True})
    assert response.status_code == 200, response.content
    dataset = Dataset.objects.get(pk=pk)
    assert dataset.schema["columns"][1]["match"] == "casefold"
    assert {c["column"]: c["moved"] for c in dataset.profile["clamping"]}.get("sex", 0) == 0
