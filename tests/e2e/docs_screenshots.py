"""The README's screenshots, taken from the real pages: upload, schema, results.

Not part of the suite (pytest collects only test_*.py files): `scripts/docs_screenshots.sh`
runs it on demand and writes docs/images/*.png. It walks the custodian's path as the README
tells it, in Chromium against a live server with a real Celery worker: upload the demo Adult
table, declare the public schema of three columns, make a noisy histogram of age × sex and
open its results. Each picture is the 1280 × 800 window (not the whole page), so each file
stays small.
"""

import re

import pytest

from tests.conftest import REPO_ROOT
from tests.e2e.test_release_flow import read_status

pytestmark = pytest.mark.e2e

IMAGES = REPO_ROOT / "docs" / "images"
WINDOW = {"width": 1280, "height": 800}
# The custodian's public knowledge (census documentation, not the data).
AGE = {"lower": "17", "upper": "90", "bins": "8"}
CATEGORIES = {"sex": ["Female", "Male"], "income": ["<=50K", ">50K"]}
RELEASED = ["age", "sex"]
RELEASE_TIMEOUT_MS = 120_000


def shoot(browser, name: str, top=None) -> None:
    """Save the window as docs/images/<name>.png, scrolled so that the element `top` (else the
    page's top) is at its top."""
    page = browser.page
    if top is None:
        page.evaluate("() => window.scrollTo(0, 0)")
    else:
        top.evaluate("(element) => element.scrollIntoView({block: 'start'})")
        page.evaluate("() => window.scrollBy(0, -16)")
    browser.settle()
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / f"{name}.png"))


@pytest.mark.timeout(300)
def test_take_the_readme_screenshots(browser, custodian, celery_worker_process, adult_csv):
    page = browser.page
    page.set_viewport_size(WINDOW)
    browser.log_in(custodian.username)
    upload(browser, adult_csv)
    declare_schema(browser, adult_csv.open().readline().strip().split(","))
    request_release(browser)
    page.locator("#job-status").filter(has_text="Done").wait_for(timeout=RELEASE_TIMEOUT_MS)
    assert read_status(page) == "Done"
    page.locator("#verdict").wait_for()
    shoot(browser, "results")
    browser.assert_no_problems()


def upload(browser, csv_path):
    page = browser.page
    browser.click_and_wait(page.get_by_role("link", name=re.compile("upload", re.I)).first)
    page.get_by_label("Total privacy budget ε (epsilon)").fill("2")
    page.get_by_label("Table file").set_input_files(str(csv_path))
    page.get_by_label(re.compile(r"^Name:?$")).fill("Adult census extract")
    shoot(browser, "upload")
    browser.click_and_wait(page.get_by_role("button", name=re.compile("upload", re.I)))


def declare_schema(browser, header):
    page = browser.page
    for name in header:
        kind = "numeric" if name == "age" else "categorical" if name in CATEGORIES else "ignored"
        page.get_by_label(f"Type of {name}", exact=True).select_option(kind)
    for key, label in (("lower", "Lower bound"), ("upper", "Upper bound"), ("bins", "Bins")):
        page.get_by_label(f"{label} of age", exact=True).fill(AGE[key])
    for name, categories in CATEGORIES.items():
        page.get_by_label(f"Categories of {name}, one per line", exact=True).fill(
            "\n".join(categories)
        )
    page.get_by_label(re.compile("come from public knowledge")).check()
    shoot(browser, "schema", page.locator(".schema-table"))
    browser.click_and_wait(page.get_by_role("button", name=re.compile("confirm", re.I)))
    assert page.get_by_text("Schema confirmed").is_visible()


def request_release(browser):
    page = browser.page
    browser.click_and_wait(page.get_by_role("link", name=re.compile("new release", re.I)).first)
    page.get_by_role("radio", name=re.compile(r"Noisy histogram")).check()
    for name in RELEASED:
        page.get_by_role("checkbox", name=re.compile(rf"^\s*{re.escape(name)} \(")).check()
    page.get_by_label("Privacy cost ε for this release").fill("0.5")
    page.locator("#preview-body").filter(has_text="Budget left after this release").wait_for()
    browser.wait_for_estimate()
    browser.click_and_wait(
        page.get_by_role("button", name="Spend this budget and make the release")
    )
