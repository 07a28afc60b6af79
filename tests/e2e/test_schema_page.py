"""Schema page in a real browser: a "from your data" mark disappears once the custodian types a
value of their own, and the type dropdown shows its whole label."""

import pytest

from dpportal import services
from tests.helpers import SMALL_ADULT

pytestmark = pytest.mark.e2e


def test_a_from_your_data_mark_goes_once_the_value_is_edited(browser, custodian):
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
    upper = page.locator("input[name$='-upper']").first
    mark = page.locator(f".from-data[data-for='{upper.get_attribute('id')}']")
    assert mark.is_visible()
    upper.fill("95")
    browser.screenshot("schema with an edited upper bound")
    assert not mark.is_visible()
    type_select = page.locator("select[name$='-type']").first
    assert type_select.evaluate("e => e.scrollWidth <= e.clientWidth")  # label not cut off
    browser.assert_no_problems()
