"""The custodian's whole path in a real browser, with a real Celery worker and Redis:
log in, upload the Adult table, confirm a schema, make an MWEM release, watch it finish, see its
charts, download the package and check it, switch the release's public page on and read it
(its PDF's text extracted, its release.xlsx read back with openpyxl; no raw-data figure in
any of them), publish the dataset's signed record and check it offline with `dp-release verify`
and the key the portal's key page shows, and find the release in the audit log.

Step screenshots (DPPORTAL_E2E_SCREENSHOTS=steps):
test-artifacts/e2e/test_custodian_publishes_an_mwem_release/.
Kept short (a few columns, small ε, three MWEM rounds): about a minute on two cores.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.conftest import REPO_ROOT
from tests.e2e.package_checks import problems_in_package
from tests.package_text import pdf_text, xlsx_cells

pytestmark = pytest.mark.e2e

EPSILON = "0.5"
RELEASED = ["age", "sex", "income"]
# The custodian's public knowledge, typed in by hand (never copied from the data).
PUBLIC_SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
        {"name": "sex", "type": "categorical", "categories": ["Female", "Male"]},
        {"name": "income", "type": "categorical", "categories": ["<=50K", ">50K"]},
    ]
}
RELEASE_TIMEOUT_S = 120
PACKAGE_TIMEOUT_MS = 90_000
MECHANISM_CARD = re.compile(r"Synthetic data \(MWEM\)")
MECHANISM_SETTINGS = {"MWEM rounds": "3"}


@pytest.mark.timeout(300)
def test_custodian_publishes_an_mwem_release(
    browser, custodian, celery_worker_process, adult_csv, tmp_path
):
    browser.log_in("custodian")
    upload_dataset(browser, adult_csv)
    confirm_schema(browser, adult_csv.open().readline().strip().split(","))
    request_release(browser)
    release_id = watch_release_finish(browser)
    check_charts(browser)
    fingerprint = browser.page.locator("code").filter(has_text=re.compile(r"^[0-9a-f]{64}$"))
    raw = adult_csv.read_bytes()
    assert fingerprint.inner_text() == hashlib.sha256(raw).hexdigest()
    zip_path = download_package(browser, tmp_path)
    problems = problems_in_package(
        zip_path.read_bytes(),
        epsilon=EPSILON,
        columns=RELEASED,
        schema=PUBLIC_SCHEMA,
        raw_bytes=raw,
        raw_sha256=hashlib.sha256(raw).hexdigest(),
    )
    assert problems == []
    check_public_page(browser, release_id, raw_figures(adult_csv, {release_id}), tmp_path)
    check_public_record(browser, adult_csv, tmp_path)
    check_audit_log(browser, release_id)
    browser.assert_no_problems()


def upload_dataset(browser, csv_path):
    page = browser.page
    browser.click_and_wait(page.get_by_role("link", name=re.compile("upload", re.I)).first)
    page.get_by_label(re.compile(r"^Name:?$")).fill("Adult census extract")
    page.get_by_label("Table file").set_input_files(str(csv_path))
    page.get_by_label("Total privacy budget ε (epsilon)").fill("2")
    browser.screenshot("upload form filled in")
    browser.click_and_wait(page.get_by_role("button", name=re.compile("upload", re.I)))
    assert page.get_by_text("48,842 rows").first.is_visible()
    browser.screenshot("schema proposal after upload")


def confirm_schema(browser, header):
    """Declare the released columns from public knowledge; ignore every other column."""
    page = browser.page
    wanted = {column["name"]: column for column in PUBLIC_SCHEMA["columns"]}
    for name in header:
        column = wanted.get(name, {"type": "ignored"})
        kind = page.get_by_label(f"Type of {name}", exact=True)
        if kind.is_disabled():  # the person question's column: its row needs nothing
            continue
        kind.select_option(column["type"])
        if column["type"] == "numeric":
            for key, label in (
                ("lower", "Lower bound"),
                ("upper", "Upper bound"),
                ("bins", "Bins"),
            ):
                page.get_by_label(f"{label} of {name}", exact=True).fill(str(column[key]))
        elif column["type"] == "categorical":
            page.get_by_label(f"Categories of {name}, one per line", exact=True).fill(
                "\n".join(column["categories"])
            )
    page.get_by_label(re.compile("come from public knowledge")).check()
    browser.screenshot("schema filled in")
    browser.click_and_wait(page.get_by_role("button", name=re.compile("confirm", re.I)))
    assert page.get_by_text("Schema confirmed").is_visible()
    browser.screenshot("dataset page with confirmed schema")


def request_release(browser, risk_subject="a given row has some property"):
    """Fill the new-release form, check its accuracy and risk preview, spend. `risk_subject`:
    whose property the risk sentence names (a row; a person's rows at person level)."""
    page = browser.page
    browser.click_and_wait(page.get_by_role("link", name=re.compile("new release", re.I)).first)
    page.get_by_role("radio", name=MECHANISM_CARD).check()
    for name in RELEASED:
        page.get_by_role("checkbox", name=re.compile(rf"^\s*{re.escape(name)} \(")).check()
    page.get_by_label("Privacy cost ε for this release").fill(EPSILON)
    for label, value in MECHANISM_SETTINGS.items():
        page.get_by_label(label).fill(value)
    estimate = page.locator("#preview-body")
    estimate.filter(has_text="Budget left after this release").wait_for()
    browser.screenshot("release form with accuracy estimate")
    browser.wait_for_estimate()  # the estimate has caught up with the last input
    # the risk in words, before spending: replace-one rows, epsilon 0.5 (the formula's p1 for
    # p0 = 10%: e^0.5 * 0.1 / (0.9 + e^0.5 * 0.1) = 15.5%, rounded up)
    assert f"{float(EPSILON):g}" == "0.5"
    risk = estimate.get_by_text(re.compile(r"^Someone who was 10\.0% sure, before this release"))
    assert risk_subject in risk.inner_text()
    assert "is at most 15.5% sure after it." in risk.inner_text()
    confirm = page.locator("#confirm-box")
    if confirm.is_visible():  # the person-level flow: k = 2 rows per person makes counts noisy
        assert "is large against an average combination" in confirm.inner_text()
        page.get_by_label(re.compile(r"^Spend anyway")).check()
    browser.click_and_wait(
        page.get_by_role("button", name="Spend this budget and make the release")
    )
    if not re.search(r"/releases/\d+/$", page.url):
        browser.screenshot("release form refused")
        errors = page.locator(".errorlist, [role=alert]").all_text_contents()
        pytest.fail(f"the release form was refused: {errors}")


def watch_release_finish(browser) -> int:
    """The job page shows the job queued or running, then reaches Done by itself (the test only
    watches: the page's own script polls the progress and reloads when the job has finished)."""
    page = browser.page
    release_id = int(re.search(r"/releases/(\d+)/", page.url).group(1))
    browser.screenshot("job page just after submitting")
    seen: list[str] = []  # each status shown, in order ("" while the page reloads is skipped)
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while not (seen and seen[-1] in ("Done", "Failed", "Cancelled")):
        if time.monotonic() > deadline:
            break
        status = read_status(page)
        if status and seen[-1:] != [status]:
            seen.append(status)
            browser.screenshot(f"job page shows {status}")
        page.wait_for_timeout(100)
    if seen[-1:] != ["Done"]:
        pytest.fail(
            f"statuses seen: {seen}; the page says: {page.locator('main').inner_text()}"
            f"\n--- worker log (end) ---\n{worker_log_tail()}"
        )
    order = [STATUS_ORDER.index(status) for status in seen]
    assert order == sorted(order), f"status went backwards: {seen}"
    return release_id


STATUS_ORDER = ["Queued", "Running", "Done"]


def worker_log_tail(characters=4000) -> str:
    logs = sorted(
        Path(os.environ["DPPORTAL_DATA_DIR"]).glob("worker-*.log"),
        key=lambda path: path.stat().st_mtime,
    )
    return logs[-1].read_text(errors="replace")[-characters:] if logs else "(no worker log)"


def read_status(page) -> str:
    """The job status shown, or "" while the page is reloading."""
    try:
        return page.locator("#job-status").inner_text(timeout=2000).strip()
    except PlaywrightError:
        return ""


def check_charts(browser):
    page = browser.page
    charts = page.locator("[data-figure]")
    captions = " ".join(page.locator("figcaption").all_inner_texts())
    assert all(name in captions for name in RELEASED), captions
    for index in range(charts.count()):
        charts.nth(index).locator(".main-svg").first.wait_for()  # plotly drew this chart
    browser.screenshot("results page with charts")


def download_package(browser, folder):
    page = browser.page
    # the package (report.pdf, release.xlsx of 48,842 rows) may still be in the making
    with page.expect_download(timeout=PACKAGE_TIMEOUT_MS) as download_info:
        page.get_by_role("link", name=re.compile("Download the whole package")).click(
            timeout=PACKAGE_TIMEOUT_MS
        )
    path = folder / download_info.value.suggested_filename
    download_info.value.save_as(path)
    assert path.suffix == ".zip"
    return path


def raw_figures(csv_path, public_ids=frozenset()) -> dict[str, tuple[str, re.Pattern]]:
    """Figures computed from the raw table that no public artifact may show, each as written
    and as a pattern: the file's SHA-256 and size, and the true count of every released category
    and age bin (with or without a thousands separator, not inside a longer number or word:
    a hex digest such as record.json's file hashes holds some 3-digit number between two
    letters ("e148b") now and then), except
    those below 100 or between 1900 and 2100, which occur in any text as numbers or years, and
    those equal to one of `public_ids`, the release's and dataset's numbers the artifact shows
    (given by the database, not the data: a release numbered 148 once matched a true count of
    148 in record.json)."""
    import numpy as np
    import pandas as pd

    frame = pd.read_csv(csv_path, usecols=RELEASED)
    age = PUBLIC_SCHEMA["columns"][0]
    width = (age["upper"] - age["lower"]) / age["bins"]
    bins = np.clip(((frame["age"] - age["lower"]) // width).astype(int), 0, age["bins"] - 1)
    counts = [*np.bincount(bins), *frame["sex"].value_counts(), *frame["income"].value_counts()]
    figures = {
        f"true count {n:,}": (
            f"{n:,}",
            re.compile(rf"(?<![\w.,])({n}|{n:,})(?![\w]|[.,]\d)"),
        )
        for n in map(int, counts)
        if n >= 100
        and not 1900 <= n <= 2100  # small numbers and years (the papers') are common
        and n not in public_ids
    }
    raw = csv_path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    figures["sha256"] = (sha, re.compile(sha[:16]))
    figures["size in bytes"] = (str(len(raw)), re.compile(rf"(?<![\w.,]){len(raw)}(?![\w])"))
    return figures


def check_public_page(browser, release_id, figures, folder):
    """The owner switches the public page on; the page, its PDF and its workbook say what was
    released and its guarantee, and show no raw-data figure."""
    page = browser.page
    browser.click_and_wait(page.get_by_role("button", name="Switch the public page on"))
    browser.click_and_wait(page.locator(f'a[href="/public/releases/{release_id}/"]'))
    assert page.url.endswith(f"/public/releases/{release_id}/")
    text = page.locator("main").inner_text()
    for phrase in ("The privacy guarantee", "epsilon = 0.5", "How to read them", "Hardt"):
        assert phrase in text, phrase
    assert page.locator("figure svg").count() == len(RELEASED)  # one chart per column
    assert page.evaluate("document.querySelectorAll('style, script').length") == 0
    browser.screenshot("public page of the release")
    pdf = page.request.get(browser.url(f"/public/releases/{release_id}/report.pdf"))
    assert pdf.ok and pdf.headers["content-type"] == "application/pdf"
    pdf_words = " ".join(pdf_text(pdf.body()).split())
    assert "epsilon = 0.5" in pdf_words and "Hardt" in pdf_words
    with page.expect_download(timeout=PACKAGE_TIMEOUT_MS) as download_info:
        page.get_by_role("link", name="release.xlsx").click(timeout=PACKAGE_TIMEOUT_MS)
    xlsx_path = folder / "release.xlsx"
    download_info.value.save_as(xlsx_path)
    sheets = xlsx_cells(xlsx_path.read_bytes())
    assert list(sheets) == ["About", "synthetic"]
    assert any("epsilon = 0.5" in str(row[0]) for row in sheets["About"])
    header, *rows = sheets["synthetic"]
    ages = [row[0] for row in rows]  # numbers, or empty in the declared "(missing)" cell
    assert header == RELEASED and all(isinstance(a, float | int) or a is None for a in ages)
    assert sum(a is None for a in ages) < len(ages) / 2
    cells = "\n".join("\t".join(map(str, row)) for rows in sheets.values() for row in rows)
    seen = {"public page": text, "report.pdf": pdf_words, "release.xlsx": cells}
    leaks = {
        (where, name)
        for where, body in seen.items()
        for name, (_, pattern) in figures.items()
        if pattern.search(body)
    }
    print(
        f"\nPublic page, report.pdf ({len(pdf_words):,} characters) and release.xlsx "
        f"({len(rows):,} synthetic rows): {len(leaks)} of {len(figures)} raw-data figures found"
    )
    assert leaks == set(), leaks
    # twin: each pattern finds its figure where it is written, beside other text
    assert all(p.search(f"{text} {value} rows") for value, p in figures.values())
    browser.goto(f"/releases/{release_id}/")  # back to the portal (the report has no menu)


def check_public_record(browser, csv_path, folder):
    """The owner publishes the dataset's record from its page; the zip verifies offline with
    `dp-release verify` and the key the portal's key page shows, and record.json shows no
    raw-data figure."""
    page = browser.page
    browser.click_and_wait(page.get_by_role("link", name=re.compile("Adult census extract")))
    browser.click_and_wait(page.get_by_role("button", name="Publish the dataset's record"))
    assert page.get_by_text("The public record is on").is_visible()
    browser.screenshot("dataset page with its public record on")
    with page.expect_download(timeout=PACKAGE_TIMEOUT_MS) as download_info:
        page.get_by_role("link", name="The record as a zip").click()
    zip_path = folder / "record.zip"
    download_info.value.save_as(zip_path)
    browser.click_and_wait(page.get_by_role("link", name="the portal's public key"))
    key = page.locator("#record-key").inner_text()
    browser.screenshot("the portal's key page")
    command = [sys.executable, "-m", "mechanisms", "verify", str(zip_path), "--key", key]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    print(f"\ndp-release verify of the downloaded record: exit {result.returncode}")
    print(result.stdout)
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert "epsilon spent 0.5 of 2" in result.stdout
    with zipfile.ZipFile(zip_path) as archive:
        [name] = [n for n in archive.namelist() if n.endswith("/record.json")]
        record_text = archive.read(name).decode()
    record = json.loads(record_text)
    ids = {record["dataset"]["id"], *(entry["id"] for entry in record["public_releases"])}
    figures = raw_figures(csv_path, ids)
    leaks = {name for name, (_, pattern) in figures.items() if pattern.search(record_text)}
    assert leaks == set(), leaks


def check_audit_log(browser, release_id):
    page = browser.page
    browser.click_and_wait(
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit")
    )
    this_release = page.get_by_role("link", name=f"Release {release_id}", exact=True)
    for action in ("Release requested", "Release started", "Release done", "Download"):
        rows = page.get_by_role("row").filter(has_text=action).filter(has=this_release)
        assert rows.count() >= 1, f"no '{action}' event for release {release_id}"
    browser.screenshot("audit log with the release")
