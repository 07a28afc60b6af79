"""Issue 41 item 5c in a real browser: the dataset page's "Same people as another dataset" form
passes axe (no serious or critical finding), and submitting it joins the two budgets."""

import pytest
from axe_playwright_python.sync_playwright import Axe

from dpportal.models import Dataset
from tests.helpers import SMALL_SCHEMA, make_dataset

pytestmark = pytest.mark.e2e


def test_the_owner_declares_two_datasets_hold_the_same_people(browser, custodian, tmp_path):
    first_path, copy_path = tmp_path / "survey.csv", tmp_path / "copy.csv"
    first_path.write_text("age,sex,city\n34,F,Leeds\n51,M,York\n29,F,Leeds\n")
    copy_path.write_text("age,sex,city,wave\n34,F,Leeds,1\n51,M,York,1\n29,F,Leeds,1\n")
    wave = {"columns": [*SMALL_SCHEMA["columns"], {"name": "wave", "type": "ignored"}]}
    first = make_dataset(custodian, schema=SMALL_SCHEMA, path=first_path, name="Survey")
    copy = make_dataset(custodian, schema=wave, path=copy_path, name="Survey with wave")
    browser.log_in(custodian.username)
    browser.goto(f"/datasets/{first.pk}/")
    page = browser.page
    findings = Axe().run(page).response["violations"]
    assert [f["id"] for f in findings if f["impact"] in ("serious", "critical")] == []
    page.get_by_label("Dataset with the same people").select_option(str(copy.pk))
    page.get_by_label("Both datasets hold the same people", exact=False).check()
    browser.click_and_wait(page.get_by_role("button", name="Share one budget"))
    assert "now share one privacy budget" in page.content()
    assert Dataset.objects.get(pk=first.pk).budget_id == Dataset.objects.get(pk=copy.pk).budget_id
    browser.assert_no_problems()
