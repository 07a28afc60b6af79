"""The audit log is append-only (ORM and admin refuse changes) and `verify_audit_chain` detects
tampering done behind the application's back (raw SQL), naming the broken events."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.models import AuditEvent
from tests import conftest
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.database, pytest.mark.django_db]


@pytest.fixture
def five_events():
    actions = [
        AuditEvent.Action.LOGIN,
        AuditEvent.Action.UPLOAD,
        AuditEvent.Action.SCHEMA_CONFIRMED,
        AuditEvent.Action.DOWNLOAD,
        AuditEvent.Action.LOGOUT,
    ]
    return [services.audit_record(action=a, details={"n": i}) for i, a in enumerate(actions)]


def sql(statement, params):
    """Change the table directly, as someone with database access (not the app) could."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def verify(*args):
    """Run the command; return (ok, stdout, stderr)."""
    from io import StringIO

    out, err = StringIO(), StringIO()
    try:
        call_command("verify_audit_chain", *args, stdout=out, stderr=err)
        return True, out.getvalue(), err.getvalue()
    except CommandError:
        return False, out.getvalue(), err.getvalue()


def test_the_orm_refuses_to_update_or_delete_events(five_events):
    event = five_events[0]
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).update(action="download")
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()
    event.action = "download"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    assert AuditEvent.objects.count() == 5
    assert AuditEvent.objects.get(pk=event.pk).action == "login"


def test_the_admin_refuses_to_add_change_or_delete_events(five_events):
    admin = get_user_model().objects.create_superuser("root", "root@example.org", "pw-12345678")
    client = Client()
    client.force_login(admin)
    event = five_events[1]
    change_url = reverse("admin:dpportal_auditevent_change", args=[event.pk])
    assert client.get(change_url).status_code == 200  # view only
    assert client.post(change_url, {"action": "download"}).status_code == 403
    delete_url = reverse("admin:dpportal_auditevent_delete", args=[event.pk])
    assert client.get(delete_url).status_code == 403
    assert client.post(delete_url, {"post": "yes"}).status_code == 403
    assert client.get(reverse("admin:dpportal_auditevent_add")).status_code == 403
    bulk = client.post(
        reverse("admin:dpportal_auditevent_changelist"),
        {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"},
    )
    assert bulk.status_code in (200, 302, 403)
    assert AuditEvent.objects.get(pk=event.pk).action == AuditEvent.Action.UPLOAD
    assert AuditEvent.objects.count() >= 5


def test_it_reports_an_intact_chain(five_events):
    ok, out, _ = verify()
    assert ok
    assert f"{AuditEvent.objects.count()} events verified" in out
    assert five_events[-1].hash in out


def test_it_names_an_event_whose_contents_were_changed(five_events):
    target = five_events[2]
    sql(
        "UPDATE dpportal_auditevent SET details = %s WHERE id = %s",
        [json.dumps({"n": 99}), target.pk],
    )
    ok, _, err = verify()
    assert not ok
    assert err.splitlines() == [f"event {target.pk}: contents changed after it was written"]
    print(f"\nAudit chain: edited event {target.pk} detected and named")


def test_it_names_the_next_event_when_the_forger_recomputes_the_hash(five_events):
    target = five_events[1]
    forged = AuditEvent.objects.get(pk=target.pk)
    forged.actor_name = "someone-else"
    sql(
        "UPDATE dpportal_auditevent SET actor_name = %s, hash = %s WHERE id = %s",
        ["someone-else", forged.compute_hash(), target.pk],
    )
    ok, _, err = verify()
    assert not ok
    assert f"event {five_events[2].pk}: previous hash does not match" in err


def test_it_detects_a_deleted_event_in_the_middle(five_events):
    sql("DELETE FROM dpportal_auditevent WHERE id = %s", [five_events[2].pk])
    ok, _, err = verify()
    assert not ok
    assert f"event {five_events[3].pk}: previous hash does not match" in err


def test_it_detects_removed_newest_events_against_a_remembered_head(five_events):
    head = five_events[-1].hash
    assert verify("--expect-head", head)[0]
    sql("DELETE FROM dpportal_auditevent WHERE id = %s", [five_events[-1].pk])
    assert verify()[0]  # a truncated chain is still a valid chain ...
    ok, _, err = verify("--expect-head", head)  # ... but the remembered head is gone
    assert not ok and "events were removed" in err


@pytest.mark.django_db(transaction=True)
def test_the_command_exits_non_zero_on_tampering():
    events = [services.audit_record(action=AuditEvent.Action.LOGIN) for _ in range(3)]
    env = dict(
        os.environ,
        DATABASE_URL=conftest.test_database_url(connection),
        DJANGO_SETTINGS_MODULE="tests.settings",
    )
    command = [sys.executable, "manage.py", "verify_audit_chain"]

    def run():
        return subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    intact = run()
    assert intact.returncode == 0, intact.stderr
    sql("UPDATE dpportal_auditevent SET action = 'download' WHERE id = %s", [events[1].pk])
    broken = run()
    assert broken.returncode != 0
    assert f"event {events[1].pk}: contents changed" in broken.stderr
    assert "Traceback" not in broken.stderr
    print(f"\nverify_audit_chain: exit {intact.returncode} intact, {broken.returncode} tampered")


# ---------------------------------------------------------------- issue 20, item 3: no oracle

OTHER_REASONS = [
    "This release took longer than the time limit and was stopped.",
    "An internal error stopped this release. The team has the details.",
    "column 'workclass': 3 values are not among the declared categories",
    "column 'workclass': 4 values are not among the declared categories",
    "the smoothed histogram needs at least one row of data (n = 0)",
]


@pytest.fixture
def failed_release(settings, monkeypatch, tmp_path, a_minute_later):
    """A dataset with an auditor and one release that failed (its reason is owner-only)."""
    from tests.helpers import make_user

    settings.DPPORTAL_HEARTBEAT_SECONDS = 0
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    path = tmp_path / "small.csv"
    path.write_text("x\n0.1\n0.7\n0.8\n")
    owner, auditor = make_user("owner"), make_user("auditor")
    dataset = services.dataset_create_from_path(
        owner=owner, name="Small", source_path=path, epsilon_total=1
    )
    schema = {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 2}]}
    dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=schema)
    dataset.auditors.add(auditor)
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="no_such_mechanism",
        columns=["x"],
        params={},
        epsilon="0.5",
    )
    services.release_run(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == "failed" and release.error_message
    client = Client()
    client.force_login(auditor)
    return dataset, release, client


def test_an_auditor_cannot_guess_a_hidden_failure_reason_from_the_hashes(failed_release):
    """The auditor has the CSV (hashes, times cut to the minute, no reason) and a list of
    candidate reasons that includes the true one. The exact time is searched only within 20 ms
    of the truth to keep the test fast: the true moment is among the candidates, so a search of
    the whole minute could only add wrong moments. Old (unsalted) hashes: the reason and the
    exact moment come out; salted: nothing matches; with the server's salt (twin): found."""
    from tests.dpportal.audit_guess import audit_csv_rows, guess, minute_moments, previous_hash

    dataset, release, client = failed_release
    rows = audit_csv_rows(client)
    row = next(r for r in rows if r["action"] == "release_failed")
    assert "reason" not in row["details"] and release.error_message not in str(rows)
    event = AuditEvent.objects.get(pk=row["event"])
    candidates = [{"reason": reason} for reason in [*OTHER_REASONS, release.error_message]]

    def moments():
        return minute_moments(row, around=event.created_at, spread_us=20_000)

    search = {"dataset_id": dataset.pk, "hidden_candidates": candidates, "moments": moments}
    found = guess(row, previous_hash(rows, row), **search)
    print(
        f"\nAudit hash oracle: {len(candidates)} reasons x 40,001 moments tried, "
        f"{len(found)} match{'es' if len(found) != 1 else ''}: {found}"
    )
    assert found == []
    twin = guess(row, previous_hash(rows, row), salt=event.salt, **search)
    assert twin == [({"reason": release.error_message}, event.created_at)]


def test_the_csv_lets_an_auditor_check_the_links_but_never_shows_a_salt(failed_release):
    from tests.dpportal.audit_guess import audit_csv_rows

    _dataset, _release, client = failed_release
    rows = audit_csv_rows(client)
    events = {e.pk: e for e in AuditEvent.objects.all()}
    assert rows and all(events[int(r["event"])].salt for r in rows)
    for row in rows:  # each row names the hash it chains onto, so gaps are visible
        assert row["previous_hash"] == events[int(row["event"])].previous_hash
    exported = client.get(reverse("audit_log_csv")).content.decode()
    page = client.get(reverse("audit_log")).content.decode()
    admin = get_user_model().objects.create_superuser("root", "root@example.org", "pw-12345678")
    client.force_login(admin)
    admin_pages = "".join(
        client.get(reverse("admin:dpportal_auditevent_change", args=[pk])).content.decode()
        for pk in events
    )
    assert not any(e.salt in exported + page + admin_pages for e in events.values())
    assert len({e.salt for e in events.values()}) == len(events)  # one fresh salt per event


def test_events_written_before_salts_existed_still_verify(five_events):
    """An event from before the salt column (salt "") keeps its original hash format."""
    last = AuditEvent.objects.order_by("-pk").first()
    legacy = AuditEvent(
        action=AuditEvent.Action.LOGIN, details={"n": "legacy"}, previous_hash=last.hash
    )
    legacy.hash = legacy.compute_hash()
    legacy.save()
    services.audit_record(action=AuditEvent.Action.LOGOUT)
    assert legacy.salt == ""
    old_format = {
        "previous": legacy.previous_hash,
        "created_at": legacy.created_at.isoformat(),
        "actor": "",
        "action": "login",
        "dataset": None,
        "release": None,
        "details": {"n": "legacy"},
        "remote_addr": None,
    }  # the pre-salt payload
    assert (
        legacy.hash == hashlib.sha256(json.dumps(old_format, sort_keys=True).encode()).hexdigest()
    )
    assert verify()[0]
    sql(
        "UPDATE dpportal_auditevent SET details = %s WHERE id = %s",
        [json.dumps({"n": "forged"}), legacy.pk],
    )
    ok, _, err = verify()
    assert not ok and f"event {legacy.pk}: contents changed" in err


def test_a_changed_salt_is_detected(five_events):
    target = five_events[3]
    sql("UPDATE dpportal_auditevent SET salt = %s WHERE id = %s", ["0" * 64, target.pk])
    ok, _, err = verify()
    assert not ok
    assert err.splitlines() == [f"event {target.pk}: contents changed after it was written"]
