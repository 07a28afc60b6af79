"""T25 (nightly): wapiti scans the running portal, signed in as the demo custodian, for at most
5 minutes: zero high or critical findings and zero server errors.

The portal runs under gunicorn with production settings (plain HTTP on loopback, so cookies are
not marked Secure here) on a throwaway SQLite database with the demo dataset. wapiti lives in
its own virtualenv under /tmp, created from requirements-scan.txt on first use.
"""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

SCAN_VENV = Path(os.environ.get("DPPORTAL_SCAN_VENV", "/tmp/dpportal-scan-venv"))
MAX_SCAN_SECONDS = 300
# Attack modules that work without an outside service (no out-of-band endpoint, no downloads);
# wapiti's endpoints point at a closed loopback port, so nothing leaves the machine.
MODULES = (
    "sql,exec,file,xss,permanentxss,redirect,crlf,csrf,csp,cookieflags,"
    "http_headers,methods,upload,backup,htaccess,shellshock"
)
MAX_ATTACK_SECONDS = 15  # per module, so all of them fit in the scan time
LOOPBACK_ENDPOINT = "http://127.0.0.1:9/"
HIGH = 3  # wapiti's levels: 0 info, 1 low, 2 medium, 3 high, 4 critical


def wapiti() -> Path:
    executable = SCAN_VENV / "bin" / "wapiti"
    if not executable.exists():
        subprocess.run([sys.executable, "-m", "venv", str(SCAN_VENV)], check=True)
        subprocess.run(
            [
                str(SCAN_VENV / "bin" / "pip"),
                "install",
                "-q",
                "-r",
                str(REPO_ROOT / "requirements-scan.txt"),
            ],
            check=True,
        )
    return executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def portal_env(folder: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DPPORTAL_"))}
    env.update(
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        DJANGO_SECURE_SSL_REDIRECT="0",
        DJANGO_SECURE_COOKIES="0",
        DPPORTAL_DATA_DIR=str(folder),
        DJANGO_STATIC_ROOT=str(folder / "static"),
        DATABASE_URL=f"sqlite:///{folder / 'scan.sqlite3'}",
        CELERY_BROKER_URL="redis://127.0.0.1:6379/15",
        DPPORTAL_CELERY_QUEUE=f"scan-{secrets.token_hex(6)}",  # no worker: removed afterwards
    )
    return env


def manage(env, *args) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout


# Cookies of a signed-in demo session, with a CSRF secret so that wapiti's form posts carry a
# valid token (wapiti keeps -C cookies fixed and would otherwise never hold a CSRF cookie).
DEMO_COOKIES = (
    "from django.contrib.auth import get_user_model; from django.test import Client; "
    "from django.middleware.csrf import _get_new_csrf_string; "
    "c = Client(); c.force_login(get_user_model().objects.get(username='demo')); "
    "print(f\"sessionid={c.cookies['sessionid'].value};csrftoken={_get_new_csrf_string()}\")"
)


@pytest.fixture
def running_portal(tmp_path):
    env = portal_env(tmp_path)
    manage(env, "migrate", "--no-input")
    manage(env, "collectstatic", "--no-input")
    manage(env, "load_demo")
    cookies = manage(env, "shell", "-c", DEMO_COOKIES).strip().splitlines()[-1]
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "dpportal.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--access-logfile",
            str(tmp_path / "access.log"),
            "--error-logfile",
            str(tmp_path / "error.log"),
        ],
        cwd=REPO_ROOT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "healthz", timeout=2)  # noqa: S310 (loopback)
                break
            except OSError:
                time.sleep(0.2)
        yield url, cookies, tmp_path
    finally:
        server.terminate()
        server.wait(timeout=30)
        queue = env["DPPORTAL_CELERY_QUEUE"]
        redis.Redis.from_url(env["CELERY_BROKER_URL"]).delete(queue, f"{queue}.long")


def test_wapiti_finds_nothing_high_and_no_server_errors(running_portal):
    url, cookies, folder = running_portal
    report = folder / "wapiti.json"
    started = time.monotonic()
    subprocess.run(
        [
            str(wapiti()),
            "-u",
            url,
            "--scope",
            "folder",
            "-C",
            cookies,
            "-x",
            url + "accounts/logout/",
            "-x",
            url + "accounts/password/",
            "-x",
            url + "static/*",
            "-m",
            MODULES,
            "--max-attack-time",
            str(MAX_ATTACK_SECONDS),
            "--endpoint",
            LOOPBACK_ENDPOINT,
            "--dns-endpoint",
            "localhost",
            "--max-scan-time",
            str(MAX_SCAN_SECONDS),
            "--flush-session",
            "--no-bugreport",
            "-f",
            "json",
            "-o",
            str(report),
        ],
        check=True,
        capture_output=True,
        timeout=MAX_SCAN_SECONDS + 120,
    )
    results = json.loads(report.read_text())
    findings = [
        (category, item) for category, items in results["vulnerabilities"].items() for item in items
    ]
    high = [f"{c}: {i['info']} at {i['path']}" for c, i in findings if i["level"] >= HIGH]
    errors = [
        f"{i['method']} {i['path']}"
        for c, items in results["anomalies"].items()
        for i in items
        if "Internal Server Error" in c
    ]
    crawled = results.get("infos", {}).get("crawled_pages_nbr", "?")
    (REPO_ROOT / "test-artifacts").mkdir(exist_ok=True)
    (REPO_ROOT / "test-artifacts" / "wapiti.json").write_text(report.read_text())
    print(
        f"\nT25 wapiti: {time.monotonic() - started:.0f} s, {crawled} pages crawled, "
        f"{len(findings)} findings ({len(high)} high or critical), {len(errors)} server errors"
    )
    for category, item in findings:
        print(
            f"  level {item['level']} {category}: {item['method']} {item['path']}: "
            f"{item['info'][:160]}"
        )
    assert high == [] and errors == [], high + errors
