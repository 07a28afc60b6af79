"""Real Celery worker processes for tests, and the test-only "test_sleep" mechanism.

Start a worker with `start_worker(...)`: `celery -A tests.dpportal.celery_app worker` on the
real Redis, sharing the live test database; the worker registers `TEST_SLEEP` in its own
catalogue (tests/dpportal/celery_app.py). The test process registers it only for the tests
that submit it, and removes it after (the `sleep_mechanism` fixture of
tests/dpportal/conftest.py), so it never leaks into another test's catalogue.

"test_sleep" stands in for a long release: it reads the data, sleeps (optionally without
reporting progress, like a long NumPy call), writes a temp file, logs each execution's start
and end, and returns a fresh random output, so that a second execution or a second published
output would be visible.
"""

import os
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import mechanisms
from tests.conftest import REPO_ROOT, test_database_url, wait_for_worker_ready


def _sleep_mechanism(inputs: mechanisms.MechanismInputs):
    from celery.exceptions import SoftTimeLimitExceeded

    params = inputs.params
    log = params["log"]
    fd, temp_path = tempfile.mkstemp(prefix="scratch-")
    os.write(fd, b"scratch")
    os.close(fd)
    _log(log, f"start {params['tag']} {os.getpid()} {time.time():.3f} {temp_path}")
    deadline = time.monotonic() + params["seconds"]
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except SoftTimeLimitExceeded:
            if not params.get("ignore_soft_limit"):
                raise
    _log(log, f"end {params['tag']} {os.getpid()} {time.time():.3f}")
    return mechanisms.ReleaseOutput(
        files={"noise.txt": secrets.token_hex(16).encode()},
        manifest={},
        trace={},
        spent={"epsilon": inputs.epsilon, "delta": inputs.delta},
    )


def _log(path, line):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


TEST_SLEEP = mechanisms.MechanismSpec(
    name="test_sleep",
    title="Test sleep",
    summary="a stand-in for a long release (tests only)",
    run=_sleep_mechanism,
    parameters=(),
    plan=mechanisms.catalogue.CATALOGUE["perturbed_histogram"].plan,
    guarantee=mechanisms.catalogue.pure_guarantee,
    files={"noise.txt": "random bytes"},
)


def executions(log_path) -> dict[str, list[dict]]:
    """Per tag, the executions logged by test_sleep: pid, start, end (None if killed)."""
    runs = {}
    if not Path(log_path).exists():
        return runs
    for line in Path(log_path).read_text().splitlines():
        kind, tag, pid, stamp, *rest = line.split()
        if kind == "start":
            runs.setdefault(tag, []).append(
                {"pid": int(pid), "start": float(stamp), "end": None, "temp": rest[0]}
            )
        else:
            run = next(r for r in runs[tag] if r["pid"] == int(pid) and r["end"] is None)
            run["end"] = float(stamp)
    return runs


def max_concurrent(runs, killed_at=None) -> int:
    """Most executions of one tag alive at once (an unfinished one lasts until `killed_at`)."""
    events = []
    for run in runs:
        events += [(run["start"], 1), (run["end"] or killed_at or float("inf"), -1)]
    alive = peak = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):
        alive += change
        peak = max(peak, alive)
    return peak


@contextmanager
def start_worker(connection, *, concurrency=1, queues=None, env=None, name="w"):
    """Run a real `celery worker` process; yield (process, log path); stop it afterwards."""
    from django.conf import settings

    queues = queues or [settings.CELERY_TASK_DEFAULT_QUEUE, settings.DPPORTAL_CELERY_LONG_QUEUE]
    full_env = dict(
        os.environ,
        DATABASE_URL=test_database_url(connection),
        DJANGO_SETTINGS_MODULE="tests.settings",
        **(env or {}),
    )
    log_path = Path(settings.DATA_DIR) / f"worker-{name}-{time.time_ns()}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.dpportal.celery_app",
                "worker",
                "--loglevel=INFO",
                f"--concurrency={concurrency}",
                "--pool=prefork",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"{name}-{time.time_ns()}@%h",
                "-Q",
                ",".join(queues),
            ],
            cwd=REPO_ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_worker_ready(log_path, process)
            yield process, log_path
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def child_pids(pid) -> list[int]:
    """Processes whose parent is `pid` (the prefork pool's children)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children
