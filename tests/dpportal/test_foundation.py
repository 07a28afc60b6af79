"""The foundation: settings, login wall, Celery configuration and a real worker round trip."""

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.celery import app as celery_app
from dpportal.models import AuditEvent, Release
from tests.conftest import REPO_ROOT, wait_until
from tests.helpers import make_dataset, make_user

pytestmark = pytest.mark.database


def test_it_refuses_production_start_without_secret_key():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DPPORTAL_"))}
    result = subprocess.run(
        [sys.executable, "-c", "import dpportal.settings"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_it_configures_celery_for_safe_redelivery():
    conf = celery_app.conf
    assert conf.task_serializer == "json" and conf.accept_content == ["json"]
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.task_time_limit == settings.CELERY_TASK_TIME_LIMIT > conf.task_soft_time_limit


@pytest.mark.django_db
def test_it_serves_the_login_page_to_anonymous_users():
    response = Client().get(reverse("login"))
    assert response.status_code == 200
    assert b'<label for="id_username">' in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["home", "release_list", "audit_log", "password_change"])
def test_it_redirects_anonymous_users_to_login(name):
    response = Client().get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_it_logs_in_and_out_and_audits_both():
    make_user()
    client = Client()
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct horse battery"}
    )
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 200
    assert client.post(reverse("logout")).status_code == 302
    actions = list(AuditEvent.objects.values_list("action", flat=True))
    assert actions == [AuditEvent.Action.LOGIN, AuditEvent.Action.LOGOUT]


@pytest.mark.django_db
def test_it_detects_a_tampered_audit_chain():
    for action in (AuditEvent.Action.LOGIN, AuditEvent.Action.LOGOUT):
        services.audit_record(action=action)
    assert services.audit_verify_chain() == []
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(action=AuditEvent.Action.LOGIN).update(action="download")
    from django.db import connection

    with connection.cursor() as cursor:  # bypass the ORM as an attacker with SQL access would
        cursor.execute(
            "UPDATE dpportal_auditevent SET action = 'download' WHERE id = "
            "(SELECT MIN(id) FROM dpportal_auditevent)"
        )
    assert services.audit_verify_chain() != []


@pytest.mark.django_db
def test_load_demo_creates_custodian_and_confirmed_dataset():
    from django.core.management import call_command

    call_command("load_demo", password="demo-portal")
    call_command("load_demo", password="demo-portal")  # idempotent
    user = get_user_model().objects.get(username="demo")
    assert user.check_password("demo-portal")
    dataset = user.datasets.get()
    assert dataset.row_count == 48842 and dataset.schema_confirmed
    assert "CC BY 4.0" in dataset.attribution


def test_it_runs_a_release_through_a_real_worker(celery_worker_process):
    owner = make_user()
    dataset = make_dataset(owner)
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age", "sex"],
        params={"rows": 500},
        epsilon="0.5",
    )
    done = wait_until(
        lambda: Release.objects.filter(pk=release.pk, status__in=Release.TERMINAL).first(),
        timeout=90,
    )
    assert done.status == Release.Status.DONE, done.error_message
    output = settings.DATA_DIR / done.output_dir
    assert (output / "synthetic.csv").read_text().count("\n") == 501
    assert done.manifest["mechanism"] == "perturbed_histogram"
