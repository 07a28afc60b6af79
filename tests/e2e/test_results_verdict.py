"""Every kind of results page in Chromium, as its custodian sees it (issue 15, items 4 and 5).

One release of each mechanism on the 2,000-row Adult sample, run in this process; each results
page must open with the custodian-only verdict (before the job status and everything else),
and every chart's category labels must be drawn in full: one label per category (up to 30),
none overlapping another or the axis title, none outside the chart. Step screenshots
(DPPORTAL_E2E_SCREENSHOTS=steps), verdict first:
test-artifacts/e2e/test_each_results_page_opens_with_the_verdict/.
"""

import re

import pytest

from tests.helpers import make_dataset, make_release, run_now

pytestmark = pytest.mark.e2e

RELEASES = {
    "noisy histogram (long category names)": {
        "mechanism": "perturbed_histogram",
        "columns": ["education", "marital-status"],
        "params": {"rows": 2000},
        "epsilon": "1",
    },
    "smoothed histogram": {
        "mechanism": "smoothed_histogram",
        "columns": ["age", "sex"],
        "params": {"rows": 400},
        "epsilon": "1",
    },
    "MWEM": {
        "mechanism": "mwem",
        "columns": ["age", "sex", "income", "race"],
        "params": {"rounds": 4, "workload": {"queries": [{"type": "marginals", "k": 2}]}},
        "epsilon": "1",
    },
    "range counts": {
        "mechanism": "range_count",
        "columns": ["age", "hours-per-week"],
        "params": {"grid": [16, 16], "random_boxes": 40, "mechanism": "tree"},
        "epsilon": "1",
    },
}

# For every drawn chart: its tick labels per axis, pairs that overlap, labels outside the chart.
LABEL_PROBLEMS = """() => Array.from(document.querySelectorAll('[data-figure]')).map((chart) => {
  const box = chart.getBoundingClientRect();
  const result = {title: chart.getAttribute('aria-label'), ticks: {}, overlaps: [], outside: []};
  for (const axis of ['xtick', 'ytick']) {
    const labels = Array.from(chart.querySelectorAll(`g.${axis} text`))
      .map((t) => ({text: t.textContent, r: t.getBoundingClientRect()}))
      .filter((l) => l.r.width > 0);
    result.ticks[axis] = labels.length;
    const title = chart.querySelector(axis === 'xtick' ? '.g-xtitle text' : '.g-ytitle text');
    if (title) {
      labels.push({text: `title ${title.textContent}`, r: title.getBoundingClientRect()});
    }
    labels.forEach((a, i) => {
      if (a.r.left < box.left - 1 || a.r.right > box.right + 1 || a.r.top < box.top - 1
          || a.r.bottom > box.bottom + 1) { result.outside.push(a.text); }
      labels.slice(i + 1).forEach((b) => {
        const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
        const h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
        if (w > 1 && h > 1) { result.overlaps.push(`${a.text} / ${b.text}`); }
      });
    });
  }
  return result;
})"""


@pytest.mark.timeout(300)
def test_each_results_page_opens_with_the_verdict(browser, custodian, no_broker):
    dataset = make_dataset(custodian, epsilon_total=10)
    browser.log_in("custodian")
    for name, arguments in RELEASES.items():
        release = run_now(make_release(custodian, dataset, **arguments))
        browser.goto(f"/releases/{release.pk}/")
        page = browser.page
        charts = page.locator("[data-figure]")
        for index in range(charts.count()):
            charts.nth(index).locator(".main-svg").first.wait_for()
        first = page.locator("main h1 + section")
        assert first.get_attribute("id") == "verdict", name
        text = first.inner_text()
        assert "Custodian-only" in text and "Verdict" in text, text
        assert any(g in text for g in ("Good", "Usable with care", "Not usable")), text
        assert "No grade" not in text, text
        browser.screenshot(f"results page of the {name}, verdict first")
        for chart in page.evaluate(LABEL_PROBLEMS):
            assert not chart["overlaps"], (name, chart)
            assert not chart["outside"], (name, chart)
            if chart["title"] == "education × marital-status in the release":
                assert chart["ticks"] == {"xtick": 8, "ytick": 17}, chart
    browser.assert_no_problems()


@pytest.mark.timeout(120)
def test_the_planner_proposes_an_epsilon_and_fills_it_in(browser, custodian, no_broker):
    """The custodian asks for counts within ±50 rows: a table of ε per kind of release with the
    budget left appears, and "Use" puts that ε and mechanism into the form."""
    dataset = make_dataset(custodian, epsilon_total=10)
    browser.log_in("custodian")
    browser.goto(f"/datasets/{dataset.pk}/releases/new/")
    page = browser.page
    for name in ("age", "sex"):
        page.get_by_role("checkbox", name=re.compile(rf"^\s*{name} \(")).check()
    page.get_by_label("Counts within ± (rows)").fill("50")
    page.get_by_role("button", name="Propose ε for each kind of release").click()
    table = page.locator("#plan-body table")
    table.wait_for()
    assert "ε needed for counts within ±50 rows at 95%" in table.inner_text()
    browser.screenshot("planner proposals for 50 rows")
    use = table.get_by_role("row", name=re.compile("Noisy histogram")).get_by_role("button")
    proposed = use.inner_text().removeprefix("Use ε = ")
    use.click()
    assert page.get_by_label("Privacy cost ε for this release").input_value() == proposed
    assert page.locator("#id_mechanism_perturbed_histogram").is_checked()
    page.locator("#preview-body table").first.wait_for()
    browser.screenshot("form with the proposed epsilon and its 95% table")
    browser.assert_no_problems()
