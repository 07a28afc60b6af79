"""T16 (reaper), T17 (time limits) and T18 (enqueue after commit, broker down), with real
Celery workers and a real Redis where the guarantee depends on them."""

import shutil
import socket
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection, transaction
from django.utils import timezone

from dpportal import services
from dpportal.celery import app as celery_app
from dpportal.models import BudgetLedgerEntry, Release
from tests.conftest import wait_until
from tests.dpportal.worker_app import executions, start_worker
from tests.helpers import make_dataset, make_user

pytestmark = [pytest.mark.database, pytest.mark.usefixtures("sleep_mechanism")]

WORKER_DB = pytest.mark.django_db(transaction=True)  # a worker process must see committed rows


def submit(owner, dataset, log, tag, seconds, **params):
    return services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="test_sleep",
        columns=["age"],
        epsilon="0.1",
        params={"seconds": seconds, "tag": tag, "log": str(log), **params},
    )


def terminal(release):
    return Release.objects.filter(pk=release.pk, status__in=Release.TERMINAL).first()


@pytest.fixture
def owner_and_dataset():
    owner = make_user()
    return owner, make_dataset(owner)


@pytest.fixture
def exec_log(tmp_path):
    return tmp_path / "executions.log"


@pytest.fixture
def broker_url():
    """Point the web side's Celery app at another broker URL for one test."""

    def switch(url):
        celery_app.conf.broker_write_url = url  # what the web side publishes to
        celery_app._after_fork()  # drop pooled connections to the previous broker

    yield switch
    switch(None)


# ---------------------------------------------------------------- T18: enqueue after commit


@pytest.mark.django_db
def test_rolled_back_submission_enqueues_nothing_and_a_committed_one_exactly_once(
    owner_and_dataset, django_capture_on_commit_callbacks, monkeypatch
):
    owner, dataset = owner_and_dataset
    sent = []
    monkeypatch.setattr(
        celery_app, "send_task", lambda name, args, queue: sent.append((name, args, queue))
    )
    with django_capture_on_commit_callbacks(execute=True) as rolled_back:
        with pytest.raises(RuntimeError), transaction.atomic():
            services.release_create(
                dataset=dataset,
                user=owner,
                mechanism="perturbed_histogram",
                columns=["age"],
                params={},
                epsilon="0.1",
            )
            raise RuntimeError("the request failed after the release was written")
    dataset.refresh_from_db()
    assert (len(rolled_back), len(sent), Release.objects.count()) == (0, 0, 0)
    assert dataset.epsilon_spent == 0 and not BudgetLedgerEntry.objects.exists()
    with django_capture_on_commit_callbacks(execute=True) as committed:
        release = services.release_create(
            dataset=dataset,
            user=owner,
            mechanism="perturbed_histogram",
            columns=["age"],
            params={},
            epsilon="0.1",
        )
    queue = django_settings.CELERY_TASK_DEFAULT_QUEUE
    assert len(committed) == 1 and sent == [("dpportal.run_release", [release.pk], queue)]
    assert Release.objects.get(pk=release.pk).enqueued_at is not None
    print(f"\nT18: rolled back → {len(rolled_back)} tasks, ε spent 0; committed → {len(sent)} task")


@WORKER_DB
def test_broker_down_keeps_the_job_and_it_runs_when_the_broker_returns(
    owner_and_dataset, broker_url
):
    owner, dataset = owner_and_dataset
    broker_url("redis://127.0.0.1:1/15")  # nothing listens on port 1
    started = time.monotonic()
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age"],
        params={},
        epsilon="0.1",
    )
    seconds = time.monotonic() - started
    release.refresh_from_db()
    assert release.status == Release.Status.QUEUED and release.enqueued_at is None
    broker_url(django_settings.CELERY_BROKER_URL)
    with start_worker(connection):
        counts = services.release_reap(now=timezone.now() + timedelta(minutes=1))
        done = wait_until(lambda: terminal(release), timeout=90)
    assert counts["sent"] == 1
    assert done.status == Release.Status.DONE, done.error_message
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == release.epsilon  # spent once, on a release that ran
    print(
        f"\nT18: broker down → submission answered in {seconds:.1f} s, job kept in the "
        f"database; after the broker returned the reaper sent it and it ended {done.status}"
    )


# ---------------------------------------------------------------- T16: the reaper


@pytest.mark.django_db
def test_reaper_retries_a_release_whose_heartbeat_stopped_then_gives_up(
    owner_and_dataset, monkeypatch, settings
):
    settings.DPPORTAL_RELEASE_MAX_ATTEMPTS = 2
    owner, dataset = owner_and_dataset
    sent = []
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: sent.append(pk) or True)
    monkeypatch.setattr(services.reaper, "_broker_lost_its_messages", lambda: False)
    release = services.release_create(
        dataset=dataset, user=owner, mechanism="x", columns=["age"], params={}, epsilon="0.1"
    )
    lease = timedelta(seconds=settings.DPPORTAL_LEASE_SECONDS)
    for attempt in (1, 2):
        services.execution._release_claim(release.pk)
        services.execution._mark_data_read(release, Release.objects.get(pk=release.pk).lease_token)
        # the worker runs on another machine and then dies: only its heartbeat can tell
        Release.objects.filter(pk=release.pk).update(lease_owner="elsewhere:1")
        beat = Release.objects.get(pk=release.pk).heartbeat_at
        assert services.release_reap(now=beat + lease - timedelta(seconds=1))["retried"] == 0
        counts = services.release_reap(now=beat + lease + timedelta(seconds=1))
        status = Release.objects.get(pk=release.pk).status
        print(f"\nT16: attempt {attempt}, heartbeat stale by lease+1 s → {counts} → {status}")
    release.refresh_from_db()
    assert sent == [release.pk] and release.attempts == 2
    assert release.status == Release.Status.FAILED and "stopped 2 times" in release.error_message
    assert not BudgetLedgerEntry.objects.filter(kind="refund").exists()  # its data was read


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def throwaway_redis(tmp_path):
    """A Redis without persistence that the test can restart; yields (url, restart)."""
    port, server = free_port(), shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")

    def start():
        process = subprocess.Popen(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(tmp_path),
            ],
            stdout=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        wait_until(lambda: _pings(url), timeout=10, interval=0.05)
        return process

    state = {"process": start()}

    def restart():
        state["process"].kill()
        state["process"].wait()
        state["process"] = start()

    yield f"redis://127.0.0.1:{port}/0", restart
    state["process"].kill()
    state["process"].wait()


def _pings(url):
    try:
        return redis.Redis.from_url(url).ping()
    except redis.ConnectionError:
        return False


@WORKER_DB
def test_reaper_resends_queued_jobs_lost_by_a_redis_restart(
    owner_and_dataset, throwaway_redis, broker_url, settings
):
    owner, dataset = owner_and_dataset
    url, restart = throwaway_redis
    settings.CELERY_BROKER_URL = url
    broker_url(url)
    queue = redis.Redis.from_url(url)
    services.release_reap()  # first sweep on this broker: marks it
    releases = [
        services.release_create(
            dataset=dataset,
            user=owner,
            mechanism="perturbed_histogram",
            columns=["age"],
            params={},
            epsilon="0.1",
        )
        for _ in range(2)
    ]
    name = settings.CELERY_TASK_DEFAULT_QUEUE
    before = queue.llen(name)
    restart()
    after_restart = queue.llen(name)
    counts = services.release_reap()
    resent = queue.llen(name)
    with start_worker(connection, env={"CELERY_BROKER_URL": url}):
        done = [wait_until(lambda r=r: terminal(r), timeout=90) for r in releases]
    print(
        f"\nT16: queued jobs in Redis: {before} → restart → {after_restart} → reaper "
        f"({counts}) → {resent}; then {[r.status for r in done]}"
    )
    assert (before, after_restart, counts["sent"], resent) == (2, 0, 2, 2)
    assert all(r.status == Release.Status.DONE for r in done)


# ---------------------------------------------------------------- T17: time limits

LIMITS = {
    "DPPORTAL_TASK_SOFT_TIME_LIMIT": "2",
    "DPPORTAL_TASK_TIME_LIMIT": "5",
    "DPPORTAL_HEARTBEAT_SECONDS": "1",
    "DPPORTAL_LEASE_SECONDS": "4",
}
# The soft-limit test ends its job at the soft limit (2 s), then the worker records the failure
# and removes the work folder. With the hard limit 3 s later, a loaded machine (slow database
# writes, heartbeat thread) could be killed mid-cleanup, leaving the folder: the flake. Its hard
# limit is therefore far away; the job (20 s) would still finish, and be caught as done, if the
# soft limit did not stop it.
SOFT_ONLY = {**LIMITS, "DPPORTAL_TASK_TIME_LIMIT": "120"}


def use_limits(monkeypatch, env):
    """The limits travel in the task message, so the sending side must use them too."""
    from dpportal.tasks import run_release

    monkeypatch.setattr(run_release, "soft_time_limit", int(env["DPPORTAL_TASK_SOFT_TIME_LIMIT"]))
    monkeypatch.setattr(run_release, "time_limit", int(env["DPPORTAL_TASK_TIME_LIMIT"]))
    monkeypatch.setattr(run_release, "_exec_options", None)  # Celery caches them per task


@pytest.fixture
def short_limits(monkeypatch):
    use_limits(monkeypatch, LIMITS)


@WORKER_DB
def test_soft_time_limit_fails_the_release_and_removes_its_temp_files(
    owner_and_dataset, exec_log, monkeypatch
):
    use_limits(monkeypatch, SOFT_ONLY)
    owner, dataset = owner_and_dataset
    with start_worker(connection, env=SOFT_ONLY):
        release = submit(owner, dataset, exec_log, "soft", seconds=20)
        done = wait_until(lambda: terminal(release), timeout=60)
    run = executions(exec_log)["soft"][0]
    work_dirs = list((Path(django_settings.DATA_DIR) / "work").glob(f"{release.pk}-*"))
    print(
        f"\nT17 soft limit 2 s on a 20 s job: {done.status} after "
        f"{(done.finished_at - done.started_at).total_seconds():.1f} s, temp file left: "
        f"{Path(run['temp']).exists()}, work dirs left: {len(work_dirs)}"
    )
    assert done.status == Release.Status.FAILED and "time limit" in done.error_message
    assert run["end"] is None and not Path(run["temp"]).exists() and work_dirs == []
    assert done.data_was_read and not BudgetLedgerEntry.objects.filter(kind="refund").exists()


@WORKER_DB
def test_hard_time_limit_kills_the_job_and_the_reaper_ends_it(
    owner_and_dataset, exec_log, settings, short_limits
):
    settings.CELERY_TASK_TIME_LIMIT, settings.DPPORTAL_LEASE_SECONDS = 5, 4
    owner, dataset = owner_and_dataset
    with start_worker(connection, env=LIMITS):
        release = submit(owner, dataset, exec_log, "hard", seconds=30, ignore_soft_limit=True)
        wait_until(lambda: executions(exec_log).get("hard"), timeout=30)
        done = wait_until(
            lambda: services.release_reap() and terminal(release), timeout=60, interval=1
        )
        temp = Path(executions(exec_log)["hard"][0]["temp"])
        wait_until(
            lambda: services.release_reap() is not None and not temp.exists(),
            timeout=30,
            interval=1,
        )
    runs = executions(exec_log)["hard"]
    print(
        f"\nT17 hard limit 5 s on a job ignoring the soft limit: {len(runs)} execution(s), "
        f"killed: {runs[0]['end'] is None}; reaper → {done.status}: {done.error_message!r}; "
        "its temp files removed"
    )
    assert runs[0]["end"] is None and done.status == Release.Status.FAILED
    assert "time limit" in done.error_message
