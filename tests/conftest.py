"""Shared fixtures: a file-backed test database (so worker processes can share it) and a real
Celery worker process against the real Redis broker."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_ADULT = REPO_ROOT / "demo" / "adult.csv.gz"  # UCI Adult, shipped (demo/README.md)
TEST_DATA = REPO_ROOT / "tests" / "data"  # small tables made for the tests (tests/data/README.md)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """SQLite tests use a file, not memory, so that a worker process can open the same database."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database.setdefault("TEST", {})
        database["TEST"]["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


def test_database_url(connection) -> str:
    """A DATABASE_URL that points a child process at the live test database."""
    params = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{params['NAME']}"
    user = params.get("USER") or ""
    host = params.get("HOST") or "127.0.0.1"
    port = params.get("PORT") or 5432
    return f"postgres://{user}@{host}:{port}/{params['NAME']}"


@pytest.fixture
def celery_worker_process(transactional_db):
    """Start `celery worker` as a separate process on the real Redis broker; stop it afterwards."""
    from django.db import connection

    env = dict(
        os.environ,
        DATABASE_URL=test_database_url(connection),
        DJANGO_SETTINGS_MODULE="tests.settings",
    )
    log_path = Path(os.environ["DPPORTAL_DATA_DIR"]) / f"worker-{time.time_ns()}.log"
    log = open(log_path, "wb")  # noqa: SIM115  (closed below)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "dpportal",
            "worker",
            "--loglevel=INFO",
            "--concurrency=1",
            "--pool=prefork",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-Q",
            worker_queues(),
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_worker_ready(log_path, process)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def worker_queues() -> str:
    """Both queues of this test session: small jobs and long ones (MWEM, large supports)."""
    from django.conf import settings

    return f"{settings.CELERY_TASK_DEFAULT_QUEUE},{settings.DPPORTAL_CELERY_LONG_QUEUE}"


def wait_for_worker_ready(log_path: Path, process, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Celery worker exited early:\n{log_path.read_text()}")
        if b"ready." in log_path.read_bytes():
            return
        time.sleep(0.2)
    raise RuntimeError(f"Celery worker not ready in {timeout}s:\n{log_path.read_text()}")


@pytest.fixture
def a_minute_later(monkeypatch):
    """Show auditors the world as it will be a minute from now: they see events and status
    changes only once their minute has passed (T10, dpportal/timing.py)."""
    from datetime import timedelta

    from django.utils import timezone

    from dpportal import timing

    monkeypatch.setattr(
        timing,
        "last_whole_minute",
        lambda: timing.shown_time(timezone.now() + timedelta(minutes=1), exact=False),
    )


def wait_until(predicate, timeout=60, interval=0.2):
    """Poll `predicate` until it returns a truthy value; return it, or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def pytest_sessionfinish(session, exitstatus):
    """Remove the throwaway data folder that tests/settings.py created for this run."""
    import shutil

    if os.environ.get("DPPORTAL_TEST_DATA_DIR_OWNER_PID") == str(os.getpid()):
        shutil.rmtree(os.environ["DPPORTAL_DATA_DIR"], ignore_errors=True)
