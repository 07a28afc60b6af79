"""Issue 41 item 8: one database error ended `reap_releases --loop` for good, and releases
submitted while Redis was down then stayed queued until a person restarted the reaper.

A real reaper loop process talks to the test database and to Redis through TCP forwarders
that the test cuts and restores: its database backend is terminated mid-loop
(pg_terminate_backend), then the database is unreachable for a few seconds, then the broker;
ten releases are submitted while the broker is down. The reaper must keep running, and send
the ten once the broker is back. A real worker whose database goes away as a job arrives must
finish that release once it is back. Heartbeats show a killed worker, and /healthz a stopped
reaper or queue.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit

import kombu.exceptions
import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection

from dpportal.core import heartbeats
from dpportal.models import Release
from dpportal.services import delivery
from tests import conftest
from tests.conftest import REPO_ROOT, wait_until
from tests.helpers import make_dataset, make_release, make_user, skip_unless_postgres
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]

APPLICATION_NAME = f"reaper-outage-{uuid.uuid4().hex[:8]}"


def reaper_environment(pg_port: int, broker_port: int, queue: str) -> dict:
    database = urlsplit(conftest.test_database_url(connection))
    broker = urlsplit(settings.CELERY_BROKER_URL)
    return dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=database._replace(
            netloc=f"{database.username}@127.0.0.1:{pg_port}",
            query=f"application_name={APPLICATION_NAME}",
        ).geturl(),
        DATABASE_CONN_MAX_AGE="600",  # one long-lived connection, as a terminated one would be
        CELERY_BROKER_URL=broker._replace(netloc=f"127.0.0.1:{broker_port}").geturl(),
        DPPORTAL_REAPER_SECONDS="1",
        DPPORTAL_CELERY_QUEUE=queue,  # no worker listens: the sent jobs stay in Redis to read
        DPPORTAL_CELERY_LONG_QUEUE=f"{queue}.long",
    )


def last_beat(pid: int) -> float:
    """Seconds since the reaper process `pid` last beat (infinite if it never did)."""
    raw = heartbeats.broker_redis().hget(heartbeats.HASH_KEY, f"reaper:{os.uname()[1]}:{pid}")
    return time.time() - json.loads(raw)["at"] if raw else float("inf")


def queued_ids(queue: str) -> set[int]:
    """The release ids of the jobs waiting in a Celery queue on Redis."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    ids = set()
    for raw in client.lrange(queue, 0, -1):
        message = json.loads(raw)
        ids.add(json.loads(_body(message))[0][0])
    return ids


def _body(message: dict) -> str:
    import base64

    return base64.b64decode(message["body"]).decode()


def terminate_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            [APPLICATION_NAME],
        )
        return cursor.fetchone()[0]


def test_the_reaper_loop_survives_database_and_broker_outages(tmp_path, monkeypatch):
    skip_unless_postgres()
    owner = make_user()
    dataset = make_dataset(owner, epsilon_total=10)
    database, broker = (
        urlsplit(conftest.test_database_url(connection)),
        urlsplit(settings.CELERY_BROKER_URL),
    )
    pg_proxy = TcpProxy(database.port or 5432).start()
    broker_proxy = TcpProxy(broker.port or 6379).start()
    queue = f"reaper-outage-{uuid.uuid4().hex[:8]}"
    log_path = tmp_path / "reaper.log"
    with open(log_path, "wb") as log:
        reaper = subprocess.Popen(
            [sys.executable, "manage.py", "reap_releases", "--loop"],
            cwd=REPO_ROOT,
            env=reaper_environment(pg_proxy.port, broker_proxy.port, queue),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: last_beat(reaper.pid) < 2, timeout=60)

        # 1. the database connection is broken mid-loop, then the database is away for 4 s
        assert wait_until(terminate_backends, timeout=30) >= 1
        pg_proxy.stop()
        time.sleep(4)
        pg_proxy.start()
        assert reaper.poll() is None, log_path.read_text()

        # 2. the broker is away while ten releases are submitted (their send fails, as it did)
        broker_proxy.stop()

        def broker_down(*args, **kwargs):
            raise kombu.exceptions.OperationalError("Error 111 connecting to redis: refused")

        monkeypatch.setattr(delivery.celery_app, "send_task", broker_down)
        releases = [make_release(owner, dataset, epsilon="0.1") for _ in range(10)]
        time.sleep(delivery_grace() + 4)  # the reaper tries to send them, and cannot
        unsent = Release.objects.filter(pk__in=[r.pk for r in releases], enqueued_at=None)
        assert unsent.count() == 10
        assert last_beat(reaper.pid) > heartbeats.STALE_AFTER_BEATS  # /healthz: "stopped"
        assert reaper.poll() is None, log_path.read_text()

        # 3. the broker is back: the reaper sends all ten, without a restart
        broker_proxy.start()
        wanted = {r.pk for r in releases}
        sent = wait_until(lambda: wanted <= queued_ids(queue) and wanted, timeout=90)
        assert not unsent.exists() and sent
        # and shows as running again (its next beat may wait for a sweep slowed by the outage)
        wait_until(lambda: last_beat(reaper.pid) < 5, timeout=60)
        assert reaper.poll() is None, log_path.read_text()
    finally:
        reaper.terminate()
        reaper.wait(timeout=30)
        pg_proxy.stop()
        broker_proxy.stop()
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue, f"{queue}.long")
    output = log_path.read_text()
    print(
        f"\nReaper outages: {output.count('Reaper sweep failed')} failed sweeps logged, "
        f"process alive throughout; 10/10 releases submitted during the broker outage sent"
    )
    assert "Reaper sweep failed (OperationalError" in output  # the outages really happened


def delivery_grace() -> float:
    from dpportal.services.reaper import SEND_GRACE

    return SEND_GRACE.total_seconds()


# ---------------------------------------------------------------- heartbeats and /healthz


def beats_of(name_part: str) -> list[dict]:
    raw = heartbeats.broker_redis().hgetall(heartbeats.HASH_KEY)
    return [json.loads(v) for k, v in raw.items() if name_part in k.decode()]


def test_a_real_worker_beats_and_shows_as_stopped_once_killed():
    from tests.dpportal.worker_app import child_pids, start_worker

    name = f"beat-{uuid.uuid4().hex[:8]}"
    with start_worker(connection, env={"DPPORTAL_HEARTBEAT_SECONDS": "1"}, name=name) as (w, _):
        entries = wait_until(lambda: beats_of(name), timeout=30)
        assert set(entries[0]["queues"]) == {
            settings.CELERY_TASK_DEFAULT_QUEUE,
            settings.DPPORTAL_CELERY_LONG_QUEUE,
        }
        assert heartbeats._group(entries, time.time())["state"] == "ok"
        check = [
            sys.executable,
            "-m",
            "dpportal.core.heartbeats",
            "worker",
        ]  # compose's health check
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings")
        assert subprocess.run(check, cwd=REPO_ROOT, env=env, timeout=60).returncode == 0
        for pid in [*child_pids(w.pid), w.pid]:  # kill -9, pool processes included
            os.kill(pid, signal.SIGKILL)
        w.wait()
    time.sleep(heartbeats.STALE_AFTER_BEATS + 1.5)
    assert heartbeats._group(beats_of(name), time.time())["state"] == "stopped"


@pytest.fixture
def own_heartbeats(monkeypatch):
    """Heartbeats under a key of this test's own (other test runs share the broker's Redis),
    and /healthz without its few seconds of caching."""
    from dpportal.core import views

    monkeypatch.setattr(heartbeats, "HASH_KEY", f"test-heartbeats-{uuid.uuid4().hex}")
    monkeypatch.setattr(views, "HEALTH_CACHE_SECONDS", 0)
    yield
    heartbeats.broker_redis().delete(heartbeats.HASH_KEY)


def beat_at(monkeypatch, seconds_ago, role, every, **facts):
    monkeypatch.setattr(heartbeats.time, "time", lambda: REAL_TIME() - seconds_ago)
    heartbeats.beat(role, every, **facts)
    monkeypatch.setattr(heartbeats.time, "time", REAL_TIME)


REAL_TIME = time.time


def test_healthz_shows_a_reaper_or_worker_that_stopped(client, own_heartbeats, monkeypatch):
    queues = [settings.CELERY_TASK_DEFAULT_QUEUE, settings.DPPORTAL_CELERY_LONG_QUEUE]
    beat_at(monkeypatch, 1, "reaper", 15, name="r1")
    beat_at(monkeypatch, 1, "worker", 10, name="w1", queues=queues[:1])
    beat_at(monkeypatch, 1, "worker", 10, name="w2", queues=queues[1:])
    healthy = client.get("/healthz")
    assert healthy.status_code == 200 and healthy.json()["status"] == "ok"
    beat_at(monkeypatch, 46, "reaper", 15, name="r1")  # three intervals and a second ago
    beat_at(monkeypatch, 31, "worker", 10, name="w2", queues=queues[1:])
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200 and body["status"] == "degraded"
    assert body["reaper"] == {
        "state": "stopped",
        "running": 0,
        "stopped": 1,
        "last_beat_seconds_ago": pytest.approx(46, abs=1),
    }
    assert body["workers"][queues[0]]["state"] == "ok"
    assert body["workers"][queues[1]]["state"] == "stopped"


def test_healthz_says_what_is_unreachable(client, own_heartbeats, settings, monkeypatch):
    from dpportal.core import views

    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "degraded", "database": "ok", "broker": "unreachable"}

    def database_down():
        raise OperationalError("connection refused")

    monkeypatch.setattr(views.connection, "cursor", database_down)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "database": "unreachable"}


def test_a_job_that_meets_a_database_outage_is_retried(monkeypatch):
    """Before, the job failed (and was acknowledged), leaving its release queued with no job."""
    from dpportal import tasks

    calls = []

    def database_away_once(*, release_id):
        calls.append(release_id)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(tasks.services, "release_run", database_away_once)
    result = tasks.run_release.apply(args=[7])  # eager: the retry runs at once, in order
    assert calls == [7, 7] and result.successful()


def test_a_real_worker_finishes_a_release_that_met_a_database_outage(monkeypatch):
    """A real worker reaches the database through a forwarder that is cut when the job
    arrives and restored 4 s later: the job is retried and the release ends done. Before, the
    job failed once, was acknowledged, and the release stayed queued for good."""
    from tests.dpportal import worker_app

    skip_unless_postgres()

    database = urlsplit(conftest.test_database_url(connection))
    pg_proxy = TcpProxy(database.port or 5432).start()
    proxied = database._replace(netloc=f"{database.username}@127.0.0.1:{pg_proxy.port}").geturl()
    monkeypatch.setattr(worker_app, "test_database_url", lambda _: proxied)
    owner = make_user()
    dataset = make_dataset(owner)
    try:
        with worker_app.start_worker(connection, name="outage") as (worker, log_path):
            pg_proxy.stop()
            release = make_release(owner, dataset)  # sent to the broker: the worker takes it
            wait_until(lambda: "OperationalError" in log_path.read_text(), timeout=60)
            time.sleep(4)
            pg_proxy.start()
            wait_until(lambda: Release.objects.get(pk=release.pk).is_terminal, timeout=120)
            release.refresh_from_db()
            assert release.status == Release.Status.DONE, release.error_message
            assert worker.poll() is None
    finally:
        pg_proxy.stop()
