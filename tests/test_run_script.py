"""run.sh says "running" only once the web server answers (scripts/common.sh wait_until_answers).

The readiness function runs in bash, as run.sh runs it, against a small local server that
answers 503 for its first seconds, one that never listens, and one whose process has ended.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

SERVER = """
import http.server, sys, time
ready_at = time.monotonic() + float(sys.argv[2])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if time.monotonic() >= ready_at else 503)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_answers(url: str, pid: int, log: Path, limit: int) -> subprocess.CompletedProcess:
    script = f'source scripts/common.sh; PY="{sys.executable}"; wait_until_answers "$@"'
    args = ["bash", "-c", script, "wait", url, str(pid), str(log), str(limit)]
    return subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


@pytest.fixture
def web_log(tmp_path):
    log = tmp_path / "web.log"
    log.write_text("".join(f"log line {k}\n" for k in range(30)))
    return log


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL)


def test_it_returns_once_the_server_answers_200_not_before(web_log):
    port = free_port()
    server = start("-c", SERVER, str(port), "3")
    try:
        began = time.monotonic()
        done = wait_until_answers(f"http://127.0.0.1:{port}/healthz", server.pid, web_log, 30)
        waited = time.monotonic() - began
    finally:
        server.kill()
        server.wait()
    assert done.returncode == 0, done.stderr
    assert 3 <= waited < 20  # the 503s of the first 3 s are not an answer


def test_a_server_that_never_answers_is_reported_with_its_log(web_log):
    listener = start("-c", "import time; time.sleep(60)")  # runs, but nothing listens
    try:
        began = time.monotonic()
        done = wait_until_answers(
            f"http://127.0.0.1:{free_port()}/healthz", listener.pid, web_log, 3
        )
        waited = time.monotonic() - began
    finally:
        listener.kill()
        listener.wait()
    assert done.returncode == 1 and 3 <= waited < 20
    assert "did not answer at http://127.0.0.1:" in done.stderr and "within 3 s" in done.stderr
    assert "log line 29" in done.stderr and "log line 10" in done.stderr
    assert "log line 9\n" not in done.stderr  # the last 20 lines, not the whole log


def test_a_server_that_stopped_is_reported_at_once(web_log):
    ended = start("-c", "pass")
    ended.wait()
    began = time.monotonic()
    done = wait_until_answers(f"http://127.0.0.1:{free_port()}/healthz", ended.pid, web_log, 60)
    assert done.returncode == 1 and time.monotonic() - began < 10
    assert "the server stopped before answering" in done.stderr and "log line 29" in done.stderr


def test_run_sh_waits_for_the_answer_before_saying_running():
    text = (REPO_ROOT / "run.sh").read_text()
    assert text.index("wait_until_answers") < text.index("DP Portal is running")
