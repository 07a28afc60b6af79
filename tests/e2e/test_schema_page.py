"""Schema page in a real browser: no value from the data is pre-filled (types only), a pasted
line of values becomes one per line, and the type dropdown shows its whole label."""

import pytest

from dpportal import services
from tests.helpers import SMALL_ADULT

pytestmark = pytest.mark.e2e


def test_no_bound_is_prefilled_and_a_pasted_line_is_split(browser, custodian):
    dataset = services.dataset_create_from_path(
        owner=custodian,
        name="Fresh upload",
        source_path=SMALL_ADULT,
        epsilon_total=1,
        delta_total=0,
    )
    browser.log_in(custodian.username)
    browser.goto(f"/datasets/{dataset.pk}/schema/")
    page = browser.page
    assert page.locator("input[name$='-upper']").first.input_value() == ""
    assert page.locator("input[name$='-lower']").first.input_value() == ""
    sex = page.get_by_label("Categories of sex, one per line", exact=True)
    page.get_by_label("Type of sex", exact=True).select_option("categorical")
    sex.focus()
    page.evaluate(
        """() => {
          const area = document.activeElement, data = new DataTransfer();
          data.setData("text", "Female, Male");
          area.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data, bubbles: true,
                                                           cancelable: true}));
        }"""
    )
    assert sex.input_value() == "Female\nMale"
    browser.screenshot("schema page with a pasted list")
    type_select = page.locator("select[name$='-type']").first
    assert type_select.evaluate("e => e.scrollWidth <= e.clientWidth")  # label not cut off
    browser.assert_no_problems()
