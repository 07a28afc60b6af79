"""End-to-end fixtures: Debian's Chromium driven by Playwright against a live Django server.

The browser is the system's /usr/bin/chromium (never a browser downloaded by a test tool), headless,
with the flags that keep it off the network, in a fresh profile. Every page the test opens is
watched: console errors, uncaught exceptions, Content-Security-Policy violations, HTTP error
responses and (at each step) form controls without a label are collected, and the test
fails if any occurred. A failing test saves a full-page screenshot of its last page under
test-artifacts/e2e/<test name>/; with DPPORTAL_E2E_SCREENSHOTS=steps every step saves one too
(off by default: 61 full-page screenshots cost about 21 s of the browser tests' wall time).
"""

import contextlib
import gzip
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.conftest import DEMO_ADULT, REPO_ROOT

CHROMIUM = Path(os.environ.get("DPPORTAL_E2E_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = REPO_ROOT / "test-artifacts" / "e2e"
STEP_SCREENSHOTS = os.environ.get("DPPORTAL_E2E_SCREENSHOTS") == "steps"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
]
PASSWORD = "e2e correct horse battery"

# Form controls a screen reader could not name (no <label>, aria-label or aria-labelledby).
FIND_UNLABELLED = """() => Array.from(document.querySelectorAll('input, select, textarea'))
  .filter((e) => !['hidden', 'submit', 'button', 'reset'].includes(e.type))
  .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                 && !e.getAttribute('aria-labelledby'))
  .map((e) => `${e.tagName.toLowerCase()} name=${e.name || '(none)'}`)"""

# True once plotly has drawn every chart on the page (results pages and the budget ledger).
CHARTS_DRAWN = """() => Array.from(document.querySelectorAll('[data-figure], #ledger-chart'))
  .every((chart) => chart.querySelector('.main-svg'))"""

# Resolves after the next frame is painted and the tasks queued until then have run (the
# securitypolicyviolation events among them).
NEXT_FRAME = "() => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve)))"
SETTLE_TIMEOUT_S = 15

# Runs before any page script, in every frame: report CSP violations to the test process.
CSP_LISTENER = """
document.addEventListener('securitypolicyviolation', (e) => {
  window.__e2eReportCsp(`${e.violatedDirective} blocked ${e.blockedURI || 'inline'} `
                        + `at ${e.sourceFile || document.location.href}:${e.lineNumber}`);
});
"""


@dataclass
class PageProblems:
    """Everything that went wrong in the browser while a test ran."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)
    http_errors: list[str] = field(default_factory=list)
    unlabelled_fields: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return [
            *self.console_errors,
            *self.page_errors,
            *self.csp_violations,
            *self.http_errors,
            *self.unlabelled_fields,
        ]


class Browser:
    """One page in a fresh browser profile, with screenshots and problem collection."""

    def __init__(self, page, base_url: str, artifacts: Path):
        self.page = page
        self.base_url = base_url.rstrip("/")
        self.artifacts = artifacts
        self.problems = PageProblems()
        self._step = 0
        self._in_flight: set = set()
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.problems.page_errors.append(f"page error: {error}"))
        page.on("response", self._on_response)
        page.on("request", self._on_request)
        page.on("requestfailed", self._on_request_failed)

    def _on_console(self, message):
        if message.type == "error":
            self.problems.console_errors.append(f"console error on {self.page.url}: {message.text}")

    def record_csp_violation(self, description: str):
        self.problems.csp_violations.append(f"CSP violation: {description}")

    def _on_response(self, response):
        self._in_flight.discard(response.request)
        if response.status >= 400:
            self.problems.http_errors.append(f"HTTP {response.status} for {response.url}")

    def _on_request(self, request):
        self._in_flight.add(request)

    def _on_request_failed(self, request):
        self._in_flight.discard(request)

    def url(self, path: str) -> str:
        return self.base_url + path

    def goto(self, path: str):
        return self.page.goto(self.url(path))

    def settle(self):
        """Wait until the loaded page's own work is done: every chart drawn, a frame painted and
        the tasks queued by then run, and every request answered or failed (the favicon's among
        them), so that every problem it causes has been recorded. Stands in for Playwright's
        "networkidle", which always waits 500 ms more."""
        self.page.wait_for_function(CHARTS_DRAWN)
        self.page.evaluate(NEXT_FRAME)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while self._in_flight:
            if time.monotonic() > deadline:
                pending = sorted(request.url for request in self._in_flight)
                pytest.fail(f"requests still in flight on {self.page.url}: {pending}")
            self.page.wait_for_timeout(20)

    def wait_for_estimate(self):
        """Wait until the new-release form shows the estimate for its latest input (each input
        makes the section busy until the answer to the last one has arrived)."""
        self.page.locator("#preview[aria-busy=false]").wait_for()

    def screenshot(self, name: str) -> None:
        """A step of this test: note any form control on the page that has no label, and save
        a full-page screenshot as the next numbered step when step screenshots are on."""
        for control in self._unlabelled_controls():
            self.problems.unlabelled_fields.append(f"unlabelled {control} on {self.page.url}")
        self._step += 1
        if STEP_SCREENSHOTS:
            self.save_screenshot(name)

    def _unlabelled_controls(self) -> list:
        """The page's form controls without a label. A page that reloads itself (the job page,
        once its job has finished) may do so while this runs: then the new page is checked."""
        for _attempt in range(3):
            try:
                return self.page.evaluate(FIND_UNLABELLED)
            except PlaywrightError as exc:
                if "Execution context was destroyed" not in str(exc):
                    raise
                self.page.wait_for_load_state()
        return self.page.evaluate(FIND_UNLABELLED)

    def save_screenshot(self, name: str) -> Path:
        """Save a full-page screenshot of the page as now shown, numbered by the last step."""
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        path = self.artifacts / f"{self._step:02d}-{slug}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def log_in(self, username: str, password: str = PASSWORD):
        self.goto("/accounts/login/")
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(password)
        self.screenshot("login form")
        self.click_and_wait(self.page.get_by_role("button", name="Log in"))

    def click_and_wait(self, locator):
        """Click a link or submit button and wait until the next page has loaded."""
        with self.page.expect_navigation():
            locator.click()

    def assert_no_problems(self):
        problems = self.problems.all()
        assert not problems, "problems in the browser:\n" + "\n".join(problems)


def artifacts_dir_for(request) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)
    path = ARTIFACTS / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture(scope="package")
def chromium():
    """One headless Chromium for the browser tests a pytest process runs from this package;
    each test gets a fresh context (`browser`). Package scope: it is stopped before the process
    runs any test from another package, and starting one costs about half a second.

    Playwright's synchronous API runs an event loop in this thread, which makes Django refuse ORM
    calls from test code; the live server answers from its own thread, so allowing them while
    Playwright runs is safe (the tests do not share connections with the event loop).
    """
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    from django.db import connections
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()
            connections.close_all()  # those the last test's teardown opened, before the loop stops


@pytest.fixture
def browser(chromium, live_server, request, tmp_path):
    """A page on the live server in a fresh context (own cookies, downloads accepted).

    Database connections opened while Playwright's loop runs belong to its context, so they are
    closed here, at the end of each test (otherwise PostgreSQL cannot drop the test database).
    """
    from django.db import connections

    context = chromium.new_context(
        accept_downloads=True, viewport={"width": 1280, "height": 900}, locale="en-GB"
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    session = Browser(page, live_server.url, artifacts_dir_for(request))
    context.expose_function("__e2eReportCsp", session.record_csp_violation)
    context.add_init_script(CSP_LISTENER)
    try:
        yield session
        if getattr(request.node, "call_failed", False):
            with contextlib.suppress(PlaywrightError):  # the page may be gone: keep the failure
                session.save_screenshot("after the failure")
    finally:
        context.close()
        connections.close_all()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Mark a browser test whose body failed, so that its `browser` saves the last page."""
    report = yield
    if report.when == "call" and report.failed:
        item.call_failed = True
    return report


@pytest.fixture
def custodian(transactional_db):
    from tests.helpers import make_user

    return make_user("custodian", PASSWORD)  # with the custodian grant


@pytest.fixture
def adult_csv(tmp_path):
    """The demo Adult table, uncompressed (the upload form takes CSV, TSV or XLSX)."""
    path = tmp_path / "adult.csv"
    with gzip.open(DEMO_ADULT, "rb") as source, open(path, "wb") as target:
        shutil.copyfileobj(source, target)
    return path


@pytest.fixture
def no_broker(monkeypatch):
    """Committed releases are not sent to the broker (the test runs them itself)."""
    from dpportal import services

    monkeypatch.setattr(services.delivery, "release_send", lambda release_id: False)
