"""Shared fixtures: a file-backed test database (so worker processes can share it), a real
Celery worker process against the real Redis broker, and the people and data most tests use
(`owner`, `auditor`, `stranger`, `small_dataset`, and the two-tenant `world`). Plain helper
functions are in tests/helpers.py."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import (  # noqa: F401  (REPO_ROOT, DEMO_ADULT, TEST_DATA: old import path)
    DEMO_ADULT,
    REPO_ROOT,
    SMALL_ADULT,
    TEST_DATA,
    client_for,
    make_dataset,
    make_user,
    post_new_release,
    run_now,
)


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


# ---------------------------------------------------------------- people and data


@pytest.fixture
def owner(db):
    """A custodian, owner of `small_dataset`."""
    return make_user("owner")


@pytest.fixture
def stranger(db):
    """Another custodian, with no rights on the owner's datasets."""
    return make_user("stranger")


@pytest.fixture
def small_dataset(owner):
    """The owner's 2,000-row Adult sample (tests/data/adult_sample.csv), schema confirmed, ε 1."""
    return make_dataset(owner)


@pytest.fixture
def auditor(small_dataset):
    """An auditor of `small_dataset`."""
    user = make_user("auditor")
    small_dataset.auditors.add(user)
    return user


# The owner's dataset name (other custodians never see it) and values planted in the owner's raw
# file (neither other custodians nor auditors ever see them): see test_access_matrix.py.
CANARY = "Tenant-A-canary-5d1e"
RAW_CANARIES = {"workclass": "Canary-workclass-5d1e", "fnlwgt": "987654321"}


@pytest.fixture
def world(db, settings, tmp_path):
    """Owner Alice's dataset (auditor Carol) with one done release; Bob owns another dataset."""
    from types import SimpleNamespace

    from dpportal import services

    settings.DATA_DIR = tmp_path  # release folders are named by pk, which tests reuse
    settings.DATASET_STORAGE_DIR = tmp_path / "storage"
    users = {name: make_user(name, "pw-unused-1") for name in ("alice", "bob", "carol")}
    dataset = make_dataset(
        users["alice"], epsilon_total=2, name=CANARY, path=_canary_file(tmp_path)
    )
    dataset.auditors.add(users["carol"])
    make_dataset(users["bob"])
    release = services.release_create(
        dataset=dataset,
        user=users["alice"],
        mechanism="perturbed_histogram",
        columns=["age", "workclass"],
        params={"rows": 200},
        epsilon="0.5",
    )
    return SimpleNamespace(dataset=dataset, release=run_now(release), **users)


@pytest.fixture
def pages_world(world):
    """The world plus a done range-count release of Alice's, whose page has a query form."""

    from dpportal.models import Release

    response = post_new_release(
        client_for(world.alice),
        world.dataset.pk,
        {
            "mechanism": "range_count",
            "columns": ["age", "hours-per-week"],
            "epsilon": "0.5",
            "range_workload": "boxes",
            "range_queries": "20",
            "range_grid": "8",
            "range_method": "auto",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    world.range_release = run_now(Release.objects.get(mechanism="range_count"))
    return world


def _canary_file(folder):
    """The 2,000-row Adult sample with RAW_CANARIES written into its first row."""
    import pandas as pd

    frame = pd.read_csv(SMALL_ADULT, dtype=str, keep_default_na=False)
    for column, value in RAW_CANARIES.items():
        frame.loc[0, column] = value
    path = folder / "adult-with-canaries.csv"
    frame.to_csv(path, index=False)
    return path


def pytest_sessionfinish(session, exitstatus):
    """Remove the throwaway data folder that tests/settings.py created for this run."""
    import shutil

    if os.environ.get("DPPORTAL_TEST_DATA_DIR_OWNER_PID") == str(os.getpid()):
        shutil.rmtree(os.environ["DPPORTAL_DATA_DIR"], ignore_errors=True)


def pytest_make_parametrize_id(config, val, argname):
    """Bytes parameters (gzip and zip archives carry their creation time) get an id from their
    length, so every pytest-xdist worker collects the same test names."""
    if isinstance(val, bytes):
        return f"{argname}-{len(val)}B"
    return None
