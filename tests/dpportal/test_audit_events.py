"""Every kind of event the issue lists is recorded by the real workflows, shown on the audit
log with who, when, what and from where, and the hash chain over them verifies."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.models import AuditEvent, Release
from tests.helpers import make_dataset

pytestmark = [pytest.mark.database, pytest.mark.django_db]

REQUIRED = {
    "login",
    "upload",
    "schema_confirmed",
    "budget_changed",
    "release_requested",
    "release_started",
    "release_done",
    "release_failed",
    "release_cancelled",
    "download",
    "deletion",
}


def request(dataset, user, mechanism="perturbed_histogram"):
    return services.release_create(
        dataset=dataset,
        user=user,
        mechanism=mechanism,
        columns=["age", "sex"],
        params={"rows": 50},
        epsilon="0.1",
    )


@pytest.fixture
def lifecycle(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.DATASET_STORAGE_DIR = tmp_path / "storage"
    owner = get_user_model().objects.create_user(username="olga", password="pw-unused-1")
    auditor = get_user_model().objects.create_user(username="aud", password="pw-unused-1")
    client = Client(REMOTE_ADDR="198.51.100.23")
    assert (
        client.post(reverse("login"), {"username": "olga", "password": "pw-unused-1"}).status_code
        == 302
    )
    dataset = make_dataset(owner, epsilon_total=2)
    dataset.auditors.add(auditor)
    services.dataset_change_budget(
        dataset=dataset, user=owner, epsilon_total="1.5", delta_total="0"
    )
    done = request(dataset, owner)
    services.release_run(release_id=done.pk)
    assert client.get(reverse("release_download_zip", kwargs={"pk": done.pk})).status_code == 200
    failed = request(dataset, owner, mechanism="no_such_mechanism")
    services.release_run(release_id=failed.pk)
    services.release_cancel(release=request(dataset, owner), user=owner)
    services.dataset_delete(dataset=dataset, user=owner)
    assert Release.objects.get(pk=failed.pk).status == Release.Status.FAILED
    return {"owner": client, "auditor_user": auditor, "dataset": dataset}


def test_every_listed_event_is_recorded_and_shown(lifecycle):
    page = lifecycle["owner"].get(reverse("audit_log"))
    events = list(page.context["page"].object_list)
    shown = {e.action for e in events}
    print(
        f"\nAudit events: {len(REQUIRED & shown)} of {len(REQUIRED)} listed kinds recorded "
        f"by the real workflows ({len(events)} events)"
    )
    assert REQUIRED <= shown, REQUIRED - shown
    html = page.content.decode()
    assert "198.51.100.23" in html  # from where (the login and the download)
    assert all(e.created_at for e in events)
    by_action = {e.action: e for e in events}
    assert by_action["download"].actor_name == "olga"
    assert by_action["download"].remote_addr == "198.51.100.23"
    assert by_action["budget_changed"].details["after"]["epsilon_total"] == "1.5"


def test_auditors_see_the_datasets_events_but_not_the_owners_logins(lifecycle, a_minute_later):
    client = Client()
    client.force_login(lifecycle["auditor_user"])
    shown = {e.action for e in client.get(reverse("audit_log")).context["page"].object_list}
    assert REQUIRED - {"login"} <= shown
    assert AuditEvent.objects.filter(action="login", actor_name="olga").exists()
    assert (
        not client.get(reverse("audit_log"), {"user": "olga", "action": "login"})
        .context["page"]
        .object_list
    )


def test_the_chain_over_the_whole_lifecycle_verifies(lifecycle, capsys):
    call_command("verify_audit_chain")
    assert "Audit chain intact" in capsys.readouterr().out


@pytest.mark.parametrize(
    "behind_proxy, expected",
    [
        (True, "198.51.100.4"),  # from the trusted proxy: the address it appended last
        (
            False,
            "203.0.113.7",
        ),  # no trusted proxy: X-Forwarded-For may be forged, the socket counts
    ],
)
def test_every_audit_event_records_the_address_the_login_limit_uses(
    settings, behind_proxy, expected
):
    """Sign-in, sign-out, dataset pages and releases all take "from where" from one place
    (dpportal/signals.client_address, i.e. login_limit.client_address)."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.DPPORTAL_TRUSTED_PROXIES = ["203.0.113.7"] if behind_proxy else []
    owner = get_user_model().objects.create_user(username="olga", password="pw-unused-1")
    client = Client(
        REMOTE_ADDR="203.0.113.7",
        HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.4",
        HTTP_X_FORWARDED_PROTO="https",
    )
    assert (
        client.post(
            reverse("login"), {"username": "olga", "password": "pw-unused-1"}, secure=behind_proxy
        ).status_code
        == 302
    )
    dataset = make_dataset(owner)
    assert (
        client.post(
            reverse("dataset_budget", args=[dataset.pk]),
            {"epsilon_total": "0.5", "delta_total": "0", "neighbouring": dataset.neighbouring},
            secure=behind_proxy,
        ).status_code
        == 302
    )
    client.post(reverse("logout"), secure=behind_proxy)
    client.post(reverse("login"), {"username": "olga", "password": "wrong"}, secure=behind_proxy)
    seen = dict(
        AuditEvent.objects.exclude(action="upload")
        .exclude(action="schema_confirmed")
        .values_list("action", "remote_addr")
    )
    assert seen == {
        "login": expected,
        "budget_changed": expected,
        "logout": expected,
        "login_failed": expected,
    }


def test_an_address_that_is_not_an_ip_is_recorded_as_unknown(settings):
    settings.DPPORTAL_TRUSTED_PROXIES = ["203.0.113.7"]
    client = Client(REMOTE_ADDR="203.0.113.7", HTTP_X_FORWARDED_FOR="not-an-address")
    client.post(reverse("login"), {"username": "nobody", "password": "x"}, secure=True)
    assert list(AuditEvent.objects.values_list("action", "remote_addr")) == [("login_failed", None)]
