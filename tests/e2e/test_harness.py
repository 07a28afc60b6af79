"""The browser harness itself: it logs in through the real form, and it catches what it must.

The second test is the deliberately broken twin of every end-to-end test: a page served with the
portal's own Content-Security-Policy that breaks it (an inline script and an inline style), throws,
and has an input without a label; the harness must report each problem, or a clean run of the
other tests means nothing.
"""

import pytest

from dpportal.core.middleware import CONTENT_SECURITY_POLICY

pytestmark = pytest.mark.e2e

BROKEN_PAGE = """<!doctype html><html><head><title>broken</title></head><body>
<p style="color: red">inline style</p>
<form><label for="named">Named</label><input id="named" name="named">
<input name="nameless"></form>
<script>document.title = 'inline script ran';</script>
<script src="/static/js/e2e-broken.js"></script>
</body></html>"""
# A request the page makes after it has loaded (which settle() must wait for), then an error.
BROKEN_SCRIPT = """window.addEventListener('load',
  () => setTimeout(() => fetch('/e2e-late-request/')));
throw new Error('deliberate e2e failure');"""


def test_it_logs_in_through_the_form_and_records_the_login(browser, custodian):
    browser.log_in("custodian")
    page = browser.page
    assert page.get_by_text("Signed in as").is_visible()
    browser.screenshot("home after login")
    browser.click_and_wait(page.get_by_role("link", name="Audit"))
    row = page.get_by_role("row").filter(has_text="Logged in")
    assert row.filter(has_text="custodian").count() == 1
    browser.screenshot("audit log with login")
    browser.assert_no_problems()


def test_it_reports_csp_violations_console_errors_and_http_errors(browser, custodian):
    page = browser.page

    def serve_broken_page(route):
        route.fulfill(
            status=200,
            body=BROKEN_PAGE,
            content_type="text/html",
            headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY},
        )

    def serve_broken_script(route):
        route.fulfill(status=200, body=BROKEN_SCRIPT, content_type="text/javascript")

    browser.log_in("custodian")
    page.route("**/e2e-broken-page", serve_broken_page)
    page.route("**/static/js/e2e-broken.js", serve_broken_script)
    browser.goto("/e2e-broken-page")
    browser.settle()  # returns only once the request made after the load has been answered
    assert any("/e2e-late-request/" in error for error in browser.problems.http_errors)
    assert page.title() == "broken"  # the inline script was blocked
    browser.screenshot("broken page")
    browser.goto("/no-such-page-for-e2e/")  # a real 404 from the live server
    page.wait_for_load_state("load")

    problems = browser.problems
    directives = " ".join(problems.csp_violations)
    assert "script-src" in directives and "style-src" in directives, problems
    assert any("deliberate e2e failure" in error for error in problems.page_errors), problems
    assert any("Content Security Policy" in error for error in problems.console_errors), problems
    assert any(error.startswith("HTTP 404") for error in problems.http_errors), problems
    assert [error.split(" on ")[0] for error in problems.unlabelled_fields] == [
        "unlabelled input name=nameless"
    ], problems
    with pytest.raises(AssertionError, match="problems in the browser"):
        browser.assert_no_problems()
