"""A person-level release in a real browser, with a real Celery worker and Redis: upload a table
where each person (column `visitor`) has 3 rows, answer the schema page's person question (the
column and k = 2), confirm, make an MWEM release, and check that the results page, the package's
README and manifest state the unit (one person, at most 2 rows), and that no visitor ID appears
in any downloaded file (the zip's members read as text: PDF, workbook and zip contents too).

Step screenshots (DPPORTAL_E2E_SCREENSHOTS=steps):
test-artifacts/e2e/test_custodian_publishes_a_person_level_release/.
"""

import hashlib
import json
import re

import pandas as pd
import pytest

from tests.e2e.package_checks import problems_in_package, read_package
from tests.e2e.test_release_flow import (
    EPSILON,
    PUBLIC_SCHEMA,
    RELEASED,
    confirm_schema,
    download_package,
    request_release,
    watch_release_finish,
)
from tests.helpers import SMALL_ADULT
from tests.package_text import readable_text

pytestmark = pytest.mark.e2e

K = 2
UNIT = f"one person: all rows with the same visitor, at most {K} rows each"
ID_MARK = "-vq7"  # in every visitor ID and nowhere else


@pytest.fixture
def visits_csv(tmp_path):
    table = pd.read_csv(SMALL_ADULT)
    table.insert(0, "visitor", [f"P{i // 3:04d}{ID_MARK}" for i in range(len(table))])
    path = tmp_path / "visits.csv"
    table.to_csv(path, index=False)
    return path


@pytest.mark.timeout(300)
def test_custodian_publishes_a_person_level_release(
    browser, custodian, celery_worker_process, visits_csv, tmp_path
):
    browser.log_in("custodian")
    page = browser.page
    browser.click_and_wait(page.get_by_role("link", name=re.compile("upload", re.I)).first)
    page.get_by_label(re.compile(r"^Name:?$")).fill("Clinic visits")
    page.get_by_label("Table file").set_input_files(str(visits_csv))
    page.get_by_label("Total privacy budget ε (epsilon)").fill("2")
    browser.click_and_wait(page.get_by_role("button", name=re.compile("upload", re.I)))
    assert page.get_by_text("2,000 rows").first.is_visible()

    question = "Can one person appear in several rows? Which column identifies them?"
    page.get_by_label(question).select_option(label="Yes: the column visitor")
    page.get_by_label("At most how many rows of one person should a release use?").fill(str(K))
    for column in PUBLIC_SCHEMA["columns"]:  # no empty cells there; package_checks wants none
        page.get_by_label(f"Type of {column['name']}", exact=True).select_option(column["type"])
        missing = page.get_by_label(f"Missing values of {column['name']}", exact=True)
        missing.select_option("reject")
    browser.screenshot("person question answered")
    confirm_schema(browser, visits_csv.open().readline().strip().split(","))

    request_release(browser, risk_subject="a given person's rows have some property")
    watch_release_finish(browser)
    main = " ".join(page.locator("main").inner_text().split())
    assert "Unit of privacy" in main and UNIT in main, main
    browser.screenshot("results page states the unit")

    zip_path = download_package(browser, tmp_path)
    raw = visits_csv.read_bytes()
    problems = problems_in_package(
        zip_path.read_bytes(),
        epsilon=EPSILON,
        columns=RELEASED,
        schema=PUBLIC_SCHEMA,
        raw_bytes=raw,
        raw_sha256=hashlib.sha256(raw).hexdigest(),
    )
    files = read_package(zip_path.read_bytes())
    assert problems == []
    guarantee = json.loads(files["manifest.json"])["guarantee"]
    assert guarantee["unit"] == UNIT and guarantee["max_rows_per_person"] == K
    readme = " ".join(files["README.txt"].decode().split())
    assert UNIT in readme and "all the rows of any one person" in readme, readme
    leaks = [name for name, content in files.items() if ID_MARK in readable_text(name, content)]
    assert leaks == [] and "visitor" not in files.get("synthetic.csv", b"").decode()
    browser.assert_no_problems()
