"""T13, T14, T15 with real workers on the real Redis (slow: ./test.sh --long, or
`.venv/bin/pytest tests/dpportal/test_worker_kill.py -m slow -s`).

Ten 4-second jobs run on a two-process worker while a reaper process sweeps every second.
Checked: every release ends done (a kill costs an attempt, never the release: 10/10 done), no
release ever shows two different outputs (polled while running), one debit per release, and no
two executions of one release overlap in time. A release that is not done fails the test with
its error message.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from dpportal import services
from dpportal.models import BudgetLedgerEntry, Release
from tests import conftest
from tests.conftest import REPO_ROOT, wait_until
from tests.dpportal.worker_app import child_pids, executions, max_concurrent, start_worker
from tests.helpers import make_dataset, make_user

pytestmark = [
    pytest.mark.database,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("sleep_mechanism"),
]

FAST_RECOVERY = {
    "DPPORTAL_HEARTBEAT_SECONDS": "1",
    "DPPORTAL_LEASE_SECONDS": "5",
    "DPPORTAL_REAPER_SECONDS": "1",
    "DPPORTAL_VISIBILITY_TIMEOUT": "10",
    "DPPORTAL_RESTORE_SWEEP_SECONDS": "2",
}


@pytest.fixture
def jobs(tmp_path, settings):
    settings.DPPORTAL_LEASE_SECONDS = 5
    owner = make_user()
    dataset = make_dataset(owner, epsilon_total=5)
    log = tmp_path / "executions.log"

    def submit(count, seconds):
        return [
            services.release_create(
                dataset=dataset,
                user=owner,
                mechanism="test_sleep",
                columns=["age"],
                epsilon="0.1",
                params={"seconds": seconds, "tag": f"job{i}", "log": str(log)},
            )
            for i in range(count)
        ]

    return submit, log


@pytest.fixture
def reaper():
    env = dict(
        os.environ,
        DATABASE_URL=conftest.test_database_url(connection),
        DJANGO_SETTINGS_MODULE="tests.settings",
        **FAST_RECOVERY,
    )
    process = subprocess.Popen(
        [sys.executable, "manage.py", "reap_releases", "--loop"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    yield process
    process.terminate()
    process.wait(timeout=20)


class OutputWatch:
    """Polls the releases, remembering every output each one ever showed."""

    def __init__(self, releases):
        self.pks = [r.pk for r in releases]
        self.seen = {pk: set() for pk in self.pks}

    def poll(self):
        for release in Release.objects.filter(pk__in=self.pks).exclude(output_dir=""):
            path = Path(django_settings.DATA_DIR) / release.output_dir / "noise.txt"
            self.seen[release.pk].add(path.read_bytes())
        return Release.objects.filter(pk__in=self.pks, status__in=Release.TERMINAL).count()

    def wait_all_terminal(self, timeout):
        return wait_until(lambda: self.poll() == len(self.pks), timeout=timeout, interval=0.5)


def report_and_check(name, watch, log, started, killed_at):
    releases = list(Release.objects.filter(pk__in=watch.pks))
    runs = executions(log)
    statuses = {s: sum(r.status == s for r in releases) for s in ("done", "failed", "running")}
    debits = [BudgetLedgerEntry.objects.filter(release=r, kind="debit").count() for r in releases]
    overlap = max(max_concurrent(runs.get(f"job{i}", []), killed_at) for i in range(len(releases)))
    print(
        f"\n{name}: {len(releases)} jobs → {statuses} in {time.monotonic() - started:.0f} s; "
        f"executions {sum(len(v) for v in runs.values())}, max concurrent per release "
        f"{overlap}, max outputs per release {max(len(s) for s in watch.seen.values())}, "
        f"max debits per release {max(debits)}"
    )
    failed = {r.pk: r.error_message for r in releases if r.status != "done"}
    assert statuses["done"] == len(releases), f"not done: {failed}"
    assert all(len(s) <= 1 for s in watch.seen.values())
    assert set(debits) == {1} and overlap == 1


def test_t13_kill_9_of_a_worker_child_loses_nothing(jobs, reaper):
    submit, log = jobs
    with start_worker(connection, concurrency=2, env=FAST_RECOVERY) as (worker, _):
        started = time.monotonic()
        watch = OutputWatch(submit(10, seconds=4))
        wait_until(lambda: len(executions(log)) >= 2, timeout=30)
        victim = child_pids(worker.pid)[0]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        watch.wait_all_terminal(timeout=120)
    report_and_check("T13 kill -9 one child", watch, log, started, killed_at)


def test_t14_kill_9_of_the_whole_worker_then_restart(jobs, reaper):
    submit, log = jobs
    started = time.monotonic()
    with start_worker(connection, concurrency=2, env=FAST_RECOVERY, name="first") as (worker, _):
        watch = OutputWatch(submit(10, seconds=4))
        wait_until(lambda: len(executions(log)) >= 2, timeout=30)
        for pid in [*child_pids(worker.pid), worker.pid]:
            os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        worker.wait()
    with start_worker(connection, concurrency=2, env=FAST_RECOVERY, name="second"):
        watch.wait_all_terminal(timeout=180)
    report_and_check("T14 kill -9 whole worker + restart", watch, log, started, killed_at)


@pytest.mark.parametrize("heartbeat", ["1", "0"], ids=["heartbeat", "twin-without-heartbeat"])
def test_t15_a_job_longer_than_the_visibility_timeout_never_runs_twice_at_once(jobs, heartbeat):
    """VT 3 s, restore sweep 1 s, lease 2 s, a silent 7 s job: Redis redelivers it and the
    heartbeat-renewed lease refuses the copy. The twin without a heartbeat lets the lease lapse
    and runs the job twice at once (the store's lease check still publishes only one output)."""
    submit, log = jobs
    env = {
        **FAST_RECOVERY,
        "DPPORTAL_VISIBILITY_TIMEOUT": "3",
        "DPPORTAL_LEASE_SECONDS": "2",
        "DPPORTAL_RESTORE_SWEEP_SECONDS": "1",
        "DPPORTAL_HEARTBEAT_SECONDS": heartbeat,
    }
    with start_worker(connection, concurrency=2, env=env) as (_, worker_log):
        watch = OutputWatch(submit(1, seconds=7))
        watch.wait_all_terminal(timeout=60)
        time.sleep(3)  # let any late redelivery arrive
        received = worker_log.read_text().count("] received")
    runs = executions(log)["job0"]
    overlap = max_concurrent(runs)
    print(
        f"\nT15 [{'heartbeat every 1 s' if heartbeat == '1' else 'twin: no heartbeat'}]: "
        f"7 s job, visibility timeout 3 s, lease 2 s: delivered {received} times, executed "
        f"{len(runs)} times, max concurrent {overlap}, outputs ever shown "
        f"{len(watch.seen[watch.pks[0]])}"
    )
    assert received >= 2  # the redelivery really happened
    assert len(watch.seen[watch.pks[0]]) == 1
    if heartbeat == "1":
        assert len(runs) == 1 and overlap == 1
    else:
        assert overlap == 2
