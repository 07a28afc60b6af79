"""Shared fixtures: a file-backed test database (so worker processes can share it), a real
Celery worker process against the real Redis broker, and the people and data most tests use
(`owner`, `auditor`, `stranger`, `small_dataset`, and the two-tenant `world`). Plain helper
functions are in tests/helpers.py."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

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


class SharedWorker:
    """One real `celery worker` process (prefork, the real Redis broker) per pytest process,
    kept from one test to the next while its environment is the same: starting and stopping one
    costs about 5 s, more than most of the tests using it.

    Between the tests that ask for it, it consumes nothing (remote control: cancel_consumer),
    so tests that start workers of their own, or leave releases queued, run as if it were not
    there; it consumes the session's queues again (add_consumer) when a test asks for it.
    """

    def __init__(self):
        self.process: subprocess.Popen | None = None
        self.env: dict[str, str] = {}
        self.name = ""

    def for_env(self, env: dict[str, str]) -> subprocess.Popen:
        """The running worker if it was started with `env` and is alive; else a new one."""
        if self.process is not None and (self.env != env or self.process.poll() is not None):
            self.stop(idle=True)
        if self.process is not None:
            try:
                self._control("add_consumer")
            except Exception:
                self.stop()
        if self.process is None:
            self._start(env)
        assert self.process is not None
        return self.process

    def _start(self, env: dict[str, str]) -> None:
        self.env, self.name = env, f"tests-{time.time_ns()}@localhost"
        log_path = Path(env["DPPORTAL_DATA_DIR"]) / f"worker-{time.time_ns()}.log"
        with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "celery", "-A", "dpportal", "worker"),
                    *("--loglevel=INFO", "--concurrency=1", "--pool=prefork", "-n", self.name),
                    *("--without-gossip", "--without-mingle", "--without-heartbeat"),
                    *("-Q", worker_queues()),
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its pool's children share its process group
            )
        wait_for_worker_ready(log_path, self.process)

    def settle(self, timeout=60) -> None:
        """Wait until the worker has finished every job it was sent (a release's utility report
        is written after it shows as done), then stop its consuming; stop the worker if it does
        not finish, or cannot say so."""
        try:
            wait_until(self._idle, timeout=timeout, interval=0.1)
            self._control("cancel_consumer")
        except Exception:
            self.stop()

    def _control(self, command: str) -> None:
        """Send `command` (add_consumer or cancel_consumer) for each queue; fail without a reply."""
        from dpportal.celery import app

        for queue in worker_queues().split(","):
            send = getattr(app.control, command)
            if not send(queue, destination=[self.name], reply=True, timeout=5):
                raise RuntimeError(f"worker {self.name} did not answer {command}({queue})")

    def _idle(self) -> bool:
        from dpportal.celery import app

        if self.process is None or self.process.poll() is not None:
            return True
        inspect = app.control.inspect([self.name], timeout=5)
        active, reserved = inspect.active(), inspect.reserved()
        if not active or not reserved:
            raise RuntimeError(f"worker {self.name} did not answer")
        broker = redis.Redis.from_url(self.env["CELERY_BROKER_URL"])
        waiting = sum(broker.llen(queue) for queue in worker_queues().split(","))
        return not active[self.name] and not reserved[self.name] and waiting == 0

    def stop(self, *, idle: bool = False) -> None:
        """Stop the worker: at once (its whole process group killed) when it is known to have
        nothing to do, as between tests; else by a warm shutdown that lets a job finish."""
        if self.process is not None and idle:
            with contextlib.suppress(ProcessLookupError):  # it may have exited already
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        elif self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


# Variables that concern only the pytest process (the test running, Django's async guard relaxed
# while Playwright runs): left out of a worker's environment, so they do not restart it.
TEST_PROCESS_ONLY = {"PYTEST_CURRENT_TEST", "DJANGO_ALLOW_ASYNC_UNSAFE"}


@pytest.fixture(scope="session")
def shared_worker(django_db_setup):
    """Stopped before the test database is dropped (it holds connections to it)."""
    worker = SharedWorker()
    yield worker
    worker.stop(idle=True)


@pytest.fixture
def celery_worker_process(transactional_db, shared_worker):
    """A real `celery worker` process on the real Redis broker, pointed at the live test
    database; idle when the test starts, and waited for until idle when it ends, so no job of
    one test runs in the next."""
    from django.db import connection

    env = {key: value for key, value in os.environ.items() if key not in TEST_PROCESS_ONLY}
    env.update(DATABASE_URL=test_database_url(connection), DJANGO_SETTINGS_MODULE="tests.settings")
    yield shared_worker.for_env(env)
    shared_worker.settle()


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
def prebuild_packages(settings, monkeypatch):
    """Releases build their public zip right after they are stored, as in production (the test
    settings leave it to the first download): here and in workers started after this fixture."""
    settings.DPPORTAL_PREBUILD_PACKAGES = True
    monkeypatch.setenv("DPPORTAL_PREBUILD_PACKAGES", "1")


@pytest.fixture
def a_minute_later(monkeypatch):
    """Show auditors the world as it will be a minute from now: they see events and status
    changes only once their minute has passed (T10, dpportal/access/timing.py)."""
    from datetime import timedelta

    from django.utils import timezone

    from dpportal.access import timing

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


def pytest_collection_modifyitems(config, items):
    """Long runs (marker ``slow``) are skipped, with a reason, unless the -m expression names
    them (./test.sh --long passes ``-m "slow or not slow"``), so a fast loop such as
    ``-m "not audit"`` never waits for them."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="long run: ./test.sh --long, or select it with -m slow")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)


def pytest_make_parametrize_id(config, val, argname):
    """Bytes parameters (gzip and zip archives carry their creation time) get an id from their
    length, so every pytest-xdist worker collects the same test names."""
    if isinstance(val, bytes):
        return f"{argname}-{len(val)}B"
    return None
