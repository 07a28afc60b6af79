"""The audit log is append-only (ORM and admin refuse changes) and `verify_audit_chain` detects
tampering done behind the application's back (raw SQL), naming the broken events."""

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

pytestmark = pytest.mark.django_db


@pytest.fixture
def five_events():
    actions = [AuditEvent.Action.LOGIN, AuditEvent.Action.UPLOAD,
               AuditEvent.Action.SCHEMA_CONFIRMED, AuditEvent.Action.DOWNLOAD,
               AuditEvent.Action.LOGOUT]
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
    bulk = client.post(reverse("admin:dpportal_auditevent_changelist"),
                       {"action": "delete_selected", "_selected_action": [event.pk],
                        "post": "yes"})
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
    sql("UPDATE dpportal_auditevent SET details = %s WHERE id = %s",
        [json.dumps({"n": 99}), target.pk])
    ok, _, err = verify()
    assert not ok
    assert err.splitlines() == [f"event {target.pk}: contents changed after it was written"]
    print(f"\nAudit chain: edited event {target.pk} detected and named")


def test_it_names_the_next_event_when_the_forger_recomputes_the_hash(five_events):
    target = five_events[1]
    forged = AuditEvent.objects.get(pk=target.pk)
    forged.actor_name = "someone-else"
    sql("UPDATE dpportal_auditevent SET actor_name = %s, hash = %s WHERE id = %s",
        ["someone-else", forged.compute_hash(), target.pk])
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
    env = dict(os.environ, DATABASE_URL=conftest.test_database_url(connection),
               DJANGO_SETTINGS_MODULE="tests.settings")
    command = [sys.executable, "manage.py", "verify_audit_chain"]

    def run():
        return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=120, check=False)

    intact = run()
    assert intact.returncode == 0, intact.stderr
    sql("UPDATE dpportal_auditevent SET action = 'download' WHERE id = %s", [events[1].pk])
    broken = run()
    assert broken.returncode != 0
    assert f"event {events[1].pk}: contents changed" in broken.stderr
    assert "Traceback" not in broken.stderr
    print(f"\nverify_audit_chain: exit {intact.returncode} intact, {broken.returncode} tampered")
