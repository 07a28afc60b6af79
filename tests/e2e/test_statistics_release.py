"""A grouped summary-statistics release in a real browser, with a real Celery worker and Redis:
choose "Summary statistics", tick two numeric columns and one categorical (the grouping), pick
count, mean and median, read each statistic's expected interval before spending, see the
preview warn that a median's interval is the whole range and confirm the spend next to the
button, submit, watch the job finish, and check the results table (statistics.csv: the
"(other)" group, which the data does not hold, gets no mean) and the error-bar charts plotly
drew (a marker for each group with an estimate).

Step screenshots (DPPORTAL_E2E_SCREENSHOTS=steps):
test-artifacts/e2e/test_custodian_publishes_grouped_statistics/.
"""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.test_release_flow import watch_release_finish
from tests.helpers import make_dataset

pytestmark = pytest.mark.e2e

STATISTICS = ["Count of rows", "Mean", "Median"]
NUMERIC, GROUP = ["age", "hours-per-week"], "sex"


@pytest.mark.timeout(300)
def test_custodian_publishes_grouped_statistics(browser, custodian, celery_worker_process):
    dataset = make_dataset(custodian, epsilon_total=2)
    browser.log_in("custodian")
    page = browser.page
    browser.goto(f"/datasets/{dataset.pk}/releases/new/")
    page.get_by_role("radio", name=re.compile("Summary statistics")).check()
    for name in [*NUMERIC, GROUP]:
        page.get_by_role("checkbox", name=re.compile(rf"^\s*{re.escape(name)} \(")).check()
    page.get_by_label("Privacy cost ε for this release").fill("1")
    kinds = page.locator("fieldset", has=page.get_by_text("Summary statistics settings"))
    for label in ("Count of rows", "Mean", "Median", "Sum"):
        box = kinds.get_by_role("checkbox", name=label, exact=True)
        box.set_checked(label in STATISTICS)
    # each change schedules an estimate 300 ms later and only the latest answer is shown:
    # wait for that one (the section is busy until it has arrived)
    page.locator("#preview[aria-busy=false]").wait_for()
    estimate = page.locator("#preview-body")
    expect(estimate).to_contain_text("5 statistics over 3 groups", timeout=15_000)
    text = estimate.inner_text()
    assert "Budget left after this release" in text, text
    assert re.search(r"mean of age: ε = 0\.2, typically ±[\d.,]+ age", text), text
    assert "median of age: ε = 0.2, interval: the whole declared range" in text, text
    confirm = page.locator("#confirm-box")
    expect(confirm).to_be_visible()
    assert "the 95% interval of median of age" in confirm.inner_text()
    browser.screenshot("statistics form with expected intervals and the warning")
    page.get_by_label("Spend anyway: I have read what the preview warns against").check()
    browser.click_and_wait(
        page.get_by_role("button", name="Spend this budget and make the release")
    )
    assert re.search(r"/releases/\d+/$", page.url), page.locator("main").inner_text()
    watch_release_finish(browser)

    table = page.locator("section[aria-labelledby=preview-heading] table")
    header = table.locator("thead th").all_inner_texts()
    assert header == [
        "statistic", "column", "sex", "estimate", "ci_lower", "ci_upper", "noise_scale",
        "epsilon", "note",
    ]  # fmt: skip
    rows = table.locator("tbody tr")
    assert rows.count() == 15  # 5 statistics x (Female, Male, (other))
    first = rows.nth(0).locator("td").all_inner_texts()
    assert first[:3] == ["count", "", "Female"]
    assert float(first[4].replace(",", "")) <= float(first[3].replace(",", ""))
    cells = [rows.nth(k).locator("td").all_inner_texts() for k in range(15)]
    mean_age = [c for c in cells if c[:2] == ["mean", "age"]]
    published = [c[2] for c in mean_age if c[3]]
    assert "Female" in published and "Male" in published  # about 1,000 rows each
    assert all(c[8] == "too few rows to publish" for c in mean_age if not c[3])

    captions = page.locator("figcaption").all_inner_texts()
    for title in ("count", "mean of age", "mean of hours-per-week", "median of age"):
        assert title in captions, captions
    chart = page.locator("[data-figure]").nth(captions.index("mean of age"))
    chart.locator(".main-svg").first.wait_for()  # plotly drew it
    assert chart.locator("g.errorbar").count() == len(published)  # one per published group
    assert chart.locator(".xtick text").all_text_contents() == published
    browser.screenshot("statistics results: table and charts")
    browser.assert_no_problems()
