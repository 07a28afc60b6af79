"""The new-release form's estimate answers the last input, and its planner the last click, never
an older one, in a real browser.

Each input schedules an estimate 300 ms later. An answer to a request sent before the last input
(still on its way when the user typed again) must not be shown, nor end the section's busy state:
otherwise the page (and a test waiting for `aria-busy=false`) reads an estimate, and a missing
"Spend anyway" box, for settings no longer on the form. Playwright's fake clock holds the 300 ms
wait and a route holds each preview request, so the order is forced, not hoped for.
"""

import json
import re

import pytest
from playwright.sync_api import expect

from tests.helpers import make_dataset

pytestmark = pytest.mark.e2e

PREVIEW = re.compile(r"/releases/preview/")
STALE_ANSWER_PROCESSED_MS = 1_000  # after its body has arrived, the script's parse and render


def held_requests(page, held: list, count: int):
    """Wait (real time, at most 15 s) until `count` preview requests are held by the route."""
    for _ in range(300):
        if len(held) >= count:
            return
        page.wait_for_timeout(50)
    pytest.fail(f"{count} preview requests expected, {len(held)} sent")


@pytest.mark.timeout(120)
def test_an_answer_to_older_input_is_not_shown(browser, custodian):
    dataset = make_dataset(custodian, epsilon_total=2)
    browser.log_in("custodian")
    page = browser.page
    held: list = []
    page.route(PREVIEW, lambda route: held.append(route))
    page.clock.install()  # the form's 300 ms wait runs only when the test moves the clock
    browser.goto(f"/datasets/{dataset.pk}/releases/new/")
    page.get_by_role("radio", name=re.compile("Summary statistics")).check()
    page.get_by_role("checkbox", name=re.compile(r"^\s*age \(")).check()
    epsilon = page.get_by_label("Privacy cost ε for this release")
    epsilon.fill("0.5")
    page.clock.run_for(400)
    held_requests(page, held, 1)  # the request for ε = 0.5, held

    epsilon.fill("1.5")  # new input while the answer for ε = 0.5 is on its way
    with page.expect_response(PREVIEW) as stale:
        held[0].continue_()
    stale.value.finished()
    page.wait_for_timeout(STALE_ANSWER_PROCESSED_MS)
    preview = page.locator("#preview")
    assert preview.get_attribute("aria-busy") == "true", "an answer to older input ended the wait"
    assert "Budget left after this release" not in page.locator("#preview-body").inner_text()

    page.clock.run_for(400)
    held_requests(page, held, 2)  # the request for ε = 1.5
    held[1].continue_()
    page.locator("#preview[aria-busy=false]").wait_for()
    expect(page.locator("#preview-body")).to_contain_text(
        "Budget left after this release: ε = 0.5 of 2"
    )
    page.unroute(PREVIEW)


PLAN = re.compile(r"/releases/plan/")


def plan_answer(target: str) -> str:
    """A planner answer with no proposals, in the shape the page's script reads (the test is of
    the page's order, not of the planner: tests/e2e/test_results_verdict.py runs the real one)."""
    return json.dumps(
        {
            "ok": True,
            "proposals": [],
            "target": target,
            "confidence": "95%",
            "epsilon_remaining": "10",
        }
    )


@pytest.mark.timeout(120)
def test_the_planner_shows_the_answer_to_the_last_click(browser, custodian):
    """Two clicks of "Propose ε", the second's answer arriving first: the first's, arriving
    after it, must not replace it."""
    dataset = make_dataset(custodian, epsilon_total=10)
    browser.log_in("custodian")
    page = browser.page
    held: list = []
    page.route(PLAN, lambda route: held.append(route))
    browser.goto(f"/datasets/{dataset.pk}/releases/new/")
    page.get_by_role("checkbox", name=re.compile(r"^\s*age \(")).check()
    propose = page.get_by_role("button", name="Propose ε for each kind of release")
    for count in (1, 2):
        propose.click()
        held_requests(page, held, count)

    table = page.locator("#plan-body table")
    held[1].fulfill(content_type="application/json", body=plan_answer("the second click"))
    expect(table).to_contain_text("within the second click")
    with page.expect_response(PLAN) as first:
        held[0].fulfill(content_type="application/json", body=plan_answer("the first click"))
    first.value.finished()
    page.wait_for_timeout(STALE_ANSWER_PROCESSED_MS)
    expect(table).to_contain_text("within the second click")
    page.unroute(PLAN)
