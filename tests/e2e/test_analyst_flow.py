"""Issue 46 in a real browser, with a real Celery worker and Redis: the owner invites an analyst
with an allotment, the e-mailed link makes the analyst's account, the analyst prepares a noisy
histogram with the planner and the accuracy preview and sends it as a request (and a second
one), the owner is e-mailed and sees both on the home page, reads the first with its accuracy,
budget impact and risk and approves it, declines the second (which spends nothing), and the
analyst, told by e-mail, downloads the public package of its release. The analysts' pages pass
axe (no serious or critical finding).

Step screenshots (DPPORTAL_E2E_SCREENSHOTS=steps): test-artifacts/e2e/test_an_analyst_.../.
"""

import hashlib
import re
import time

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.core import mail

from dpportal.models import Analyst, Dataset, ReleaseRequest
from tests.e2e.conftest import PASSWORD
from tests.e2e.package_checks import problems_in_package
from tests.helpers import DEMO_SCHEMA, SMALL_ADULT, make_dataset

pytestmark = pytest.mark.e2e

COLUMNS = ["age", "sex"]
ALLOTMENT = "0.8"
RELEASE_TIMEOUT_S = 90
PACKAGE_TIMEOUT_MS = 90_000
AXE = Axe()


def no_serious_findings(browser):
    findings = AXE.run(browser.page).response["violations"]
    serious = [f["id"] for f in findings if f["impact"] in ("serious", "critical")]
    assert serious == [], f"{browser.page.url}: {serious}"


@pytest.mark.timeout(300)
def test_an_analyst_requests_the_owner_approves_and_the_analyst_downloads(
    browser, custodian, celery_worker_process, a_minute_later, tmp_path
):
    custodian.email = "custodian@example.org"
    custodian.save(update_fields=["email"])
    dataset = make_dataset(custodian, epsilon_total=2, name="Adult sample")
    browser.log_in("custodian")
    invite(browser, dataset)
    link = re.search(r"https?://[^/\s]+(/invitations/[^/\s]+/)", mail.outbox[-1].body).group(1)
    log_out(browser)

    join(browser, link)
    first = request_release(browser, dataset, purpose="Age by sex for the annual report")
    second = request_release(browser, dataset, epsilon="0.1", purpose="A second look")
    log_out(browser)
    waiting = [m for m in mail.outbox if m.to == ["custodian@example.org"]]
    assert len(waiting) == 2 and all("waits for your decision" in m.subject for m in waiting)

    browser.log_in("custodian")
    decide(browser, first, "approve", "Fine: coarse enough.", axe=True)
    spent_before = Dataset.objects.get(pk=dataset.pk).epsilon_spent
    decide(browser, second, "decline", "One release is enough for now.")
    assert Dataset.objects.get(pk=dataset.pk).epsilon_spent == spent_before  # spends nothing
    analyst = Analyst.objects.get(dataset=dataset)
    assert (
        analyst.epsilon_held
        == analyst.epsilon_allotted - ReleaseRequest.objects.get(pk=first).epsilon
    )
    log_out(browser)
    told = [m.subject for m in mail.outbox if m.to == ["ann@example.org"]]
    assert any("was approved" in s for s in told) and any("was declined" in s for s in told)

    browser.log_in("ann")
    zip_bytes = download_package(browser, first, tmp_path)
    raw = SMALL_ADULT.read_bytes()
    problems = problems_in_package(
        zip_bytes,
        epsilon=str(ReleaseRequest.objects.get(pk=first).epsilon),
        columns=COLUMNS,
        schema=DEMO_SCHEMA,
        raw_bytes=raw,
        raw_sha256=hashlib.sha256(raw).hexdigest(),
    )
    assert problems == []
    browser.assert_no_problems()


def invite(browser, dataset):
    page = browser.page
    browser.goto(f"/datasets/{dataset.pk}/")
    browser.click_and_wait(page.get_by_role("link", name="Analysts", exact=True))
    page.get_by_label("E-mail address of the analyst").fill("ann@example.org")
    page.get_by_label("Allotment ε").fill(ALLOTMENT)
    browser.screenshot("owner invites an analyst with an allotment")
    no_serious_findings(browser)
    browser.click_and_wait(
        page.get_by_role("button", name="Reserve the allotment and send the invitation")
    )
    assert "its allotment is reserved" in page.locator("main").inner_text()
    assert page.get_by_role("cell", name="ann@example.org").is_visible()


def log_out(browser):
    browser.click_and_wait(browser.page.get_by_role("button", name="Log out"))


def join(browser, link):
    """The invited person opens the link and makes an account: the analyst's workspace."""
    page = browser.page
    browser.goto(link)
    assert "within a privacy budget of ε = 0.8" in page.locator("main").inner_text()
    page.get_by_label("Username").fill("ann")
    page.get_by_label(re.compile(r"^Password:?$")).fill(PASSWORD)
    page.get_by_label(re.compile(r"^Password confirmation:?$")).fill(PASSWORD)
    browser.screenshot("analyst makes an account from the invitation")
    browser.click_and_wait(page.get_by_role("button", name="Create my account and accept"))
    assert page.get_by_role("heading", name="Your allotment").is_visible()
    no_serious_findings(browser)


def request_release(browser, dataset, *, purpose, epsilon=None) -> int:
    """From the workspace: a noisy histogram of age × sex, its ε from the planner (or given),
    the preview read, sent as a request. Returns the request's id."""
    page = browser.page
    browser.goto(f"/datasets/{dataset.pk}/workspace/")
    browser.click_and_wait(page.get_by_role("link", name="New request"))
    page.get_by_role("radio", name=re.compile("Noisy histogram")).check()
    for name in COLUMNS:
        page.get_by_role("checkbox", name=re.compile(rf"^\s*{re.escape(name)} \(")).check()
    page.get_by_label("Rows to synthesise").fill("500")
    if epsilon is None:
        page.get_by_label("Counts within ± (rows)").fill("60")
        page.get_by_role("button", name="Propose ε for each kind of release").click()
        row = page.locator("#plan-body tr", has_text="Noisy histogram")
        row.get_by_role("button", name=re.compile(r"^Use ε = ")).click()
    else:
        page.get_by_label("Privacy cost ε for this release").fill(epsilon)
    page.get_by_label("What is the release for? (the owner reads this)").fill(purpose)
    browser.wait_for_estimate()
    estimate = page.locator("#preview-body")
    estimate.filter(has_text="Budget left after this release").wait_for()
    assert "with 95% probability" in estimate.inner_text()
    assert "all releases from your allotment together" in estimate.inner_text()
    browser.screenshot("analyst's request with its preview")
    browser.click_and_wait(page.get_by_role("button", name="Send the request to the owner"))
    assert "Nothing is spent until it is approved" in page.locator("main").inner_text()
    return int(re.search(r"/requests/(\d+)/$", page.url).group(1))


def decide(browser, request_pk, decision, note, axe=False):
    """The owner finds the request on the home page, reads it, and decides with a note."""
    page = browser.page
    browser.goto("/")
    waiting = page.get_by_role("region", name="Requests waiting for your decision")
    browser.click_and_wait(waiting.get_by_role("link", name=f"Request {request_pk}"))
    text = page.locator("main").inner_text()
    for part in ("Expected accuracy", "Budget impact", "Risk in words", "Someone who was"):
        assert part in text, part
    if axe:  # the request page (once: each axe run costs about 2 s)
        no_serious_findings(browser)
    label = "Approve: make the release" if decision == "approve" else "Decline: nothing is spent"
    page.get_by_role("radio", name=re.compile(re.escape(label))).check()
    page.get_by_label("Note (the analyst and the auditors read it)").fill(note)
    browser.screenshot(f"owner decides: {decision}")
    browser.click_and_wait(page.get_by_role("button", name="Record my decision"))
    expected = "Approved" if decision == "approve" else "Declined"
    assert page.locator("#request-status").inner_text() == expected


def download_package(browser, request_pk, folder) -> bytes:
    """The analyst's request page shows the package once the release is done (the page is
    reloaded until then); the zip is downloaded through it."""
    page = browser.page
    browser.goto(f"/requests/{request_pk}/")
    link = page.get_by_role("link", name="Download the public package (zip)")
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while not link.count() and time.monotonic() < deadline:
        assert page.locator("#release-status").inner_text() not in ("Failed", "Cancelled")
        page.wait_for_timeout(500)
        page.reload()
    browser.screenshot("analyst's request with its package")
    with page.expect_download(timeout=PACKAGE_TIMEOUT_MS) as download_info:
        link.click(timeout=PACKAGE_TIMEOUT_MS)
    path = folder / download_info.value.suggested_filename
    download_info.value.save_as(path)
    assert path.suffix == ".zip"
    return path.read_bytes()
