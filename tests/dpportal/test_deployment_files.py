"""docker-compose.yml cannot run here (no Docker engine): check it refers to real things."""

import importlib
import re

import pytest
import yaml

from tests.conftest import REPO_ROOT

COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_it_defines_the_production_services():
    assert {"postgres", "redis", "web", "worker"} <= set(SERVICES)
    for name in ("postgres", "redis", "web", "worker"):
        assert "healthcheck" in SERVICES[name], name


def test_web_and_worker_wait_for_healthy_dependencies():
    for name in ("web", "worker"):
        depends = SERVICES[name]["depends_on"]
        assert depends["redis"]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_workers_can_be_scaled():
    worker = SERVICES["worker"]
    assert "container_name" not in worker and "ports" not in worker


@pytest.mark.parametrize("name", ["web", "worker", "migrate"])
def test_each_command_refers_to_something_that_exists(name):
    command = SERVICES[name]["command"]
    if command[0] == "gunicorn":
        module, attribute = command[1].split(":")
        assert hasattr(importlib.import_module(module), attribute)
    elif command[0] == "celery":
        assert command[1:3] == ["-A", "dpportal"]
        assert hasattr(importlib.import_module("dpportal"), "celery_app")
    else:
        assert command[:2] == ["python", "manage.py"]
        from django.core.management import get_commands

        assert command[2] in get_commands()


def test_volumes_and_environment_are_declared():
    assert {"postgres-data", "portal-data"} <= set(COMPOSE["volumes"])
    env = SERVICES["web"]["environment"]
    for variable in ("DJANGO_SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "DPPORTAL_DATA_DIR"):
        assert variable in env
    readme = (REPO_ROOT / "README.md").read_text()
    for variable in env:
        assert re.search(rf"`{variable}`", readme), f"{variable} missing from README config table"
    assert SERVICES["worker"]["environment"] == env


def test_web_healthcheck_endpoint_exists(client, db):
    assert client.get("/healthz").json() == {"status": "ok"}
