"""Schema page in a real browser: no value from the data is pre-filled (types only), a pasted
line of values becomes one per line, and the type dropdown shows its whole label."""

import pytest

from dpportal import services
from dpportal.models import Release
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


def test_estimate_for_me_sends_the_person_question_chosen_on_the_page(browser, custodian, tmp_path):
    """Issue 41 item 1: the person column and k chosen on the page (not confirmed) go with the
    script's estimate request, which then bounds rows per person and records one person."""
    path = tmp_path / "visits.csv"
    rows = [f"v{i // 2},{20 + i % 50}" for i in range(4000)]
    path.write_text("visitor,age\n" + "\n".join(rows) + "\n")
    dataset = services.dataset_create_from_path(
        owner=custodian, name="Visits", source_path=path, epsilon_total=10, delta_total=0
    )
    browser.log_in(custodian.username)
    browser.goto(f"/datasets/{dataset.pk}/schema/")
    page = browser.page
    page.get_by_label("Type of visitor", exact=True).select_option("ignored")
    page.get_by_label("Type of age", exact=True).select_option("numeric")
    page.locator("select[name='person_column']").select_option("visitor")
    page.locator("input[name='max_rows_per_person']").fill("2")
    page.locator("input[name='spend_numeric'][value='10']").check()  # 1%: 0.025 a row, too little
    page.locator(".schema-row[data-column='1'] button.estimate-button").click()
    shown = page.locator(".schema-row[data-column='1'] .number-only .dp-estimate:not([hidden])")
    shown.wait_for()
    assert shown.inner_text().startswith("DP estimate bounds"), shown.inner_text()
    release = Release.objects.get(dataset=dataset)
    assert release.params["person_column"] == "visitor"
    assert release.manifest["guarantee"]["unit"].startswith("one person: all rows with the same")
    assert release.manifest["guarantee"]["sensitivity"] == 4  # replace-one, k = 2
    assert page.locator("input[name='form-1-upper']").input_value() != ""
    browser.assert_no_problems()


def test_enter_in_an_input_confirms_and_never_spends_on_an_estimate(browser, custodian):
    """The estimate buttons are submit buttons of the schema form (so they send its person
    question); Enter in a field must still submit the form's default action, "Confirm the
    schema", never an estimate that spends budget."""
    dataset = services.dataset_create_from_path(
        owner=custodian, name="Fresh", source_path=SMALL_ADULT, epsilon_total=1, delta_total=0
    )
    browser.log_in(custodian.username)
    browser.goto(f"/datasets/{dataset.pk}/schema/")
    page = browser.page
    upper = page.locator("input[name$='-upper']").first
    upper.fill("100")
    with page.expect_navigation():
        upper.press("Enter")
    assert not Release.objects.filter(dataset=dataset).exists()
    assert "Nothing was saved" in page.content() or "Schema confirmed" in page.content()
