"""Schema page in a real browser: no value from the data is pre-filled (types only), a pasted
line of values becomes one per line, and the type dropdown shows its whole label."""

import re

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


LONG_NAME = "household_income_in_the_last_twelve_months"
UNBROKEN = "HouseholdIncomeInTheLastTwelveMonthsBeforeTheInterviewInDollars"


def newcomer_table(path):
    """400 rows, 8 per person: an ID, a long column name, coordinates, lower-case answers."""
    lines = [f"person_id,{LONG_NAME},longitude,latitude,sex,smoker,age,{UNBROKEN}"]
    for i in range(400):
        sex = ("female", "male")[i % 2]
        smoker = ("yes", " No ", "no")[i % 3]
        lines.append(
            f"{1000 + i // 8},{20000 + 37 * i},{-93.6 + i / 1000:.4f},{42.0 + i / 2000:.4f},"
            f"{sex},{smoker},{20 + i % 60},{i}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_newcomer_confirms_the_schema_in_a_1280_px_window(browser, custodian, tmp_path):
    """Issue 43 item 1: the page fits a 1,280 px window; the person column is chosen in one
    place and needs nothing else; coordinates without bins get the public default; one-click
    lists match lower-case data; bounds that clamp most values are explained and asked again."""
    dataset = services.dataset_create_from_path(
        owner=custodian,
        name="Newcomer",
        source_path=newcomer_table(tmp_path / "newcomer.csv"),
        epsilon_total=1,
        delta_total=0,
    )
    browser.log_in(custodian.username)
    browser.goto(f"/datasets/{dataset.pk}/schema/")
    page = browser.page
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    names = page.locator(".column-name .name-text")
    fits = "e => e.getBoundingClientRect().width <= e.parentElement.clientWidth"
    assert names.nth(1).evaluate(fits) and names.nth(7).evaluate(fits)
    assert names.nth(1).evaluate("e => e.scrollWidth <= e.clientWidth")  # wrapped after "_"
    assert names.nth(7).evaluate("e => e.scrollWidth > e.clientWidth")  # cut ...
    assert names.nth(7).get_attribute("title") == UNBROKEN  # ... with its whole name as title
    page.locator("select[name='person_column']").select_option("person_id")
    page.locator("input[name='max_rows_per_person']").fill("8")
    page.get_by_label(f"Type of {LONG_NAME}", exact=True).select_option("ignored")
    page.get_by_label(f"Type of {UNBROKEN}", exact=True).select_option("ignored")
    for column, lower, upper in (("longitude", -180, 180), ("latitude", -90, 90), ("age", 0, 10)):
        page.get_by_label(f"Type of {column}", exact=True).select_option("numeric")
        page.get_by_label(f"Lower bound of {column}", exact=True).fill(str(lower))
        page.get_by_label(f"Upper bound of {column}", exact=True).fill(str(upper))
        page.get_by_label(f"Bins of {column}", exact=True).fill("")  # the public default
    for column, listed in (("sex", "sexes"), ("smoker", "yes-no")):
        page.get_by_label(f"Type of {column}", exact=True).select_option("categorical")
        page.get_by_label(f"Fill the categories of {column} from a public list").select_option(
            listed
        )
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    page.get_by_label(re.compile("come from public knowledge")).check()
    browser.screenshot("schema filled in by a newcomer")
    browser.click_and_wait(page.get_by_role("button", name="Confirm the schema"))
    check = page.locator(".clamping-check")
    assert "Column 'age'" in check.inner_text()
    assert "narrow" in check.inner_text()
    assert "sex" not in check.inner_text() and "smoker" not in check.inner_text()
    browser.screenshot("asked again before confirming")
    dataset.refresh_from_db()
    assert not dataset.schema_confirmed
    page.get_by_label(re.compile("Confirm anyway")).check()
    page.get_by_label(re.compile("come from public knowledge")).check()
    browser.click_and_wait(page.get_by_role("button", name="Confirm the schema"))
    assert page.get_by_text("Schema confirmed").is_visible()
    dataset.refresh_from_db()
    columns = {c["name"]: c for c in dataset.schema["columns"]}
    assert columns["person_id"] == {"name": "person_id", "role": "person_id"}
    assert columns["sex"]["categories"] == ["Female", "Male"]
    assert columns["sex"]["match"] == "casefold"
    assert columns["longitude"]["bins"] == 10
    moved = {c["column"]: c["moved"] for c in dataset.profile["clamping"]}
    assert moved.get("sex", 0) == 0 and moved.get("smoker", 0) == 0
    browser.screenshot("dataset page after the newcomer's schema")
    browser.assert_no_problems()
