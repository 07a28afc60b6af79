"""The vendored plotly.js draws under our strict CSP (style-src 'self', no 'unsafe-inline').

plotly injects two <style> elements unless the page has (1) a link to its stylesheet with id
'plotly.js-style-global' and class 'no-inline-styles' (static/css/vendor/plotly.css) and (2) an
element whose id is that of the bundled map stylesheet (see templates/dpportal/audit/ledger.html).
In real Chromium: the ledger chart draws with no inline style, CSP violation or console error;
the twins (the same page with either element removed) raise a CSP violation.

Every other page is opened under the same CSP by the accessibility sweep
(tests/e2e/test_accessibility.py), which fails on any CSP violation, console error, uncaught
exception or failed request as well as on axe findings.
"""

import pytest
from django.urls import reverse

from tests.helpers import make_dataset, make_release

pytestmark = pytest.mark.e2e


def ledger_with_two_debits(owner):
    """A dataset whose ledger has two debits (ε 0.5 and 0.25), made by the real submission path;
    the releases stay queued (no_broker)."""
    dataset = make_dataset(owner, epsilon_total=2)
    for epsilon in ("0.5", "0.25"):
        make_release(owner, dataset, epsilon=epsilon)
    return dataset


def open_ledger(browser, dataset):
    browser.log_in("custodian")
    browser.goto(reverse("dataset_ledger", kwargs={"pk": dataset.pk}))
    browser.page.wait_for_selector("#ledger-chart .main-svg")


def test_the_ledger_chart_draws_under_the_csp(no_broker, browser, custodian):
    open_ledger(browser, ledger_with_two_debits(custodian))
    traces = browser.page.locator("#ledger-chart .scatterlayer .trace").count()
    browser.page.hover("#ledger-chart .nsewdrag")  # the modebar and hover labels appear
    browser.page.wait_for_timeout(300)
    browser.screenshot("ledger chart")
    styles = browser.page.evaluate("document.querySelectorAll('style').length")
    print(
        f"\nCSP and plotly: ledger chart drew {traces} traces, {styles} inline <style> "
        f"elements, {len(browser.problems.all())} CSP violations or console errors"
    )
    assert traces == 2 and styles == 0
    browser.assert_no_problems()


MAP_STYLES_ID = "9f215cf04c5486422605d13261cb87401f4e7763b6296af81e98efbc0130da53"


def serve_without(browser, fragment):
    """Serve the ledger page (with its real CSP header) minus the element naming `fragment`."""

    def strip(route):
        response = route.fetch()
        lines = response.text().splitlines(keepends=True)
        kept = [line for line in lines if fragment not in line]
        assert len(kept) == len(lines) - 1
        route.fulfill(response=response, body="".join(kept))

    browser.page.route("**/ledger/", strip)


@pytest.mark.parametrize("fragment", ['id="plotly.js-style-global"', f'id="{MAP_STYLES_ID}"'])
def test_without_either_element_plotly_breaks_the_csp(no_broker, browser, custodian, fragment):
    serve_without(browser, fragment)
    open_ledger(browser, ledger_with_two_debits(custodian))
    browser.settle()  # as the page sweeps wait: the violations are reported by then
    assert browser.page.evaluate("document.querySelectorAll('style').length") >= 1
    assert any("style-src" in v for v in browser.problems.csp_violations)
