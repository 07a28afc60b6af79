"""Accessibility of every page in Chromium: axe-core (4.12, bundled by the pinned
axe-playwright-python) runs on every HTML page the owner and an auditor can open, and every
`aria-describedby` in the rendered page names an element that exists (help text read aloud).

The test fails on any "serious" or "critical" axe violation and prints each one with the page
and the elements concerned. Moderate and minor findings are printed, not failed. The same sweep
is the CSP sweep: every page is served with the production Content-Security-Policy, and any CSP
violation, console error, uncaught exception or failed request fails it (`Browser.problems`).
"""

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.helpers import dangling_references, html_pages

pytestmark = pytest.mark.e2e

BLOCKING = {"serious", "critical"}
AXE = Axe()


def axe_findings(page) -> list[dict]:
    """axe's violations on the page as now rendered (every rule axe runs by default)."""
    return AXE.run(page).response["violations"]


def describe(finding, url) -> str:
    targets = ", ".join(" ".join(node["target"]) for node in finding["nodes"][:5])
    return f"{finding['impact']} {finding['id']} on {url}: {finding['help']} [{targets}]"


@pytest.mark.django_db(transaction=True)
def test_every_page_passes_axe_and_the_csp_and_names_its_help_text(
    no_broker, browser, pages_world, a_minute_later
):
    world, blocking, other, visited = pages_world, [], [], 0
    from dpportal import services  # the public page of a release is one of the pages

    services.release_set_public(release=pages_world.release, user=pages_world.alice, public=True)
    for user in (world.alice, world.carol):
        browser.page.context.clear_cookies()
        browser.log_in(user.username, "pw-unused-1")
        for url in html_pages(user, world, releases=[world.range_release]):
            browser.goto(url)
            browser.settle()
            visited += 1
            for finding in axe_findings(browser.page):
                found = describe(finding, url)
                (blocking if finding["impact"] in BLOCKING else other).append(found)
            missing, _count = dangling_references(browser.page.content())
            blocking += [f"aria-describedby names no element on {url}: {m}" for m in missing]
        browser.screenshot(f"last page as {user.username}")
    print(
        f"\naxe-core sweep: {visited} page views (owner and auditor), {len(blocking)} serious or "
        f"critical findings, {len(other)} moderate or minor"
    )
    print("\n".join(blocking + other))
    assert visited >= 20
    assert blocking == [], "\n".join(blocking)
    browser.assert_no_problems()


def test_axe_catches_an_unlabelled_field_and_low_contrast(browser):
    """The twin: a page with a nameless input and light-grey text fails with serious findings."""
    browser.page.set_content(
        '<html lang="en"><head><title>t</title></head><body><main>'
        '<input type="text"><p style="color:#ccc;background:#fff">faint</p></main></body></html>'
    )
    ids = {f["id"] for f in axe_findings(browser.page) if f["impact"] in BLOCKING}
    assert {"label", "color-contrast"} <= ids
