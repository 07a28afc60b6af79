"""Issue 14 in a real browser: upload a gzip-compressed CSV whose age column has empty cells,
fill the schema with a one-click public list and a DP "estimate for me" (filled in place,
labelled "DP estimate", its cost on the button before spending), confirm, make a
perturbed-histogram release, see it finish and its counts keep a "(missing)" cell for the
empty ages.

Step screenshots (DPPORTAL_E2E_SCREENSHOTS=steps):
test-artifacts/e2e/test_custodian_releases_from_a_gzip_upload/.
"""

import gzip
import io
import re
import time
from urllib.parse import urljoin

import pandas as pd
import pytest
from django.urls import reverse

from dpportal.models import BudgetLedgerEntry, Dataset
from tests.helpers import SMALL_ADULT

pytestmark = pytest.mark.e2e

RELEASE_TIMEOUT_S = 120


MISSING_EVERY = 10  # every tenth row's age is empty: 200 of 2,000


@pytest.fixture
def adult_gz(tmp_path):
    frame = pd.read_csv(SMALL_ADULT, dtype=str, keep_default_na=False)
    frame.loc[::MISSING_EVERY, "age"] = ""
    path = tmp_path / "adult_sample.csv.gz"
    path.write_bytes(gzip.compress(frame.to_csv(index=False).encode()))
    return path


@pytest.mark.timeout(300)
def test_custodian_releases_from_a_gzip_upload(browser, custodian, celery_worker_process, adult_gz):
    page = browser.page
    browser.log_in("custodian")
    browser.goto("/datasets/new/")
    page.get_by_label(re.compile(r"^Name:?$")).fill("Adult sample, gzip")
    page.get_by_label("Table file").set_input_files(str(adult_gz))
    page.get_by_label("Total privacy budget ε (epsilon)").fill("10")
    browser.click_and_wait(page.get_by_role("button", name=re.compile("upload", re.I)))
    assert page.get_by_text("2,000 rows").first.is_visible()
    browser.screenshot("schema page after a gzip upload")
    header = SMALL_ADULT.open().readline().strip().split(",")
    for name in header:
        if name not in ("age", "sex"):
            page.get_by_label(f"Type of {name}", exact=True).select_option("ignored")
    page.get_by_label("Type of sex", exact=True).select_option("categorical")
    page.get_by_label("Fill the categories of sex from a public list").select_option("sexes")
    categories = page.get_by_label("Categories of sex, one per line", exact=True)
    assert categories.input_value() == "Female\nMale"
    page.get_by_label("Type of age", exact=True).select_option("numeric")
    button = page.get_by_role("button", name=re.compile(r"Estimate bounds for me"))
    spend = page.get_by_label(re.compile(r"10% of the budget \(ε = 1\): on average at most"))
    assert spend.first.is_visible()  # what the spend can do, shown before spending
    spend.first.check()
    button.first.click()
    line = page.locator(".public-help .dp-estimate").first  # the age column's estimate line
    line.locator(".dp-estimate-label, .errorlist").wait_for()
    assert line.inner_text().startswith("DP estimate bounds "), line.inner_text()
    lower = page.get_by_label("Lower bound of age", exact=True)
    upper = page.get_by_label("Upper bound of age", exact=True)
    assert float(lower.input_value()) < float(upper.input_value())
    page.get_by_label("Bins of age", exact=True).fill("4")
    browser.screenshot("schema filled from a public list and a DP estimate")
    page.get_by_label(re.compile("come from public knowledge")).check()
    browser.click_and_wait(page.get_by_role("button", name=re.compile("confirm", re.I)))
    assert page.get_by_text("Schema confirmed").is_visible()
    dataset = Dataset.objects.get(name="Adult sample, gzip")
    assert [e.epsilon for e in BudgetLedgerEntry.objects.filter(dataset=dataset)] == [
        dataset.epsilon_total / 10  # the 10% chosen above
    ]

    browser.click_and_wait(page.get_by_role("link", name=re.compile("new release", re.I)).first)
    page.get_by_role("radio", name=re.compile(r"Histogram|histogram")).first.check()
    for name in ("age", "sex"):
        page.get_by_role("checkbox", name=re.compile(rf"^\s*{name} \(")).check()
    page.get_by_label("Privacy cost ε for this release").fill("1")
    page.locator("#preview-body").filter(has_text="Budget left after this release").wait_for()
    browser.wait_for_estimate()
    browser.click_and_wait(
        page.get_by_role("button", name="Spend this budget and make the release")
    )
    assert re.search(r"/releases/\d+/$", page.url), page.locator("main").inner_text()
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    status = ""
    while status not in ("Done", "Failed", "Cancelled") and time.monotonic() < deadline:
        page.wait_for_timeout(100)
        if page.locator("#job-status").count():
            status = page.locator("#job-status").inner_text().strip()
    browser.screenshot("release from the gzip upload")
    assert status == "Done", page.locator("main").inner_text()
    release = dataset.releases.get(mechanism="perturbed_histogram")
    url = urljoin(page.url, reverse("release_download_file", args=[release.pk, "noisy_counts.csv"]))
    download = page.request.get(url)  # as the logged-in custodian
    assert download.ok, download.status
    counts = pd.read_csv(io.BytesIO(download.body()), dtype=str, keep_default_na=False)
    assert "(missing)" in set(counts["age"])  # the empty ages have their own cell
    browser.assert_no_problems()
