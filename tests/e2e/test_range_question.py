"""A new range question asked with the sliders, in Chromium (issue 15: sliders on the grid's
edges; issue 43: typed values answered as typed).

A range-count release of age × hours-per-week on a 16 × 16 grid (age's cells 4.625 wide from
16.5, hours' 6.1875 from 0.5): the custodian moves one slider with the keyboard and drags
another with the mouse, types a value between edges (it stays as typed; its slider moves to
the nearest edge), asks, and reads the answer next to the button, with the nearest range on
the grid's edges named beside it; a range whose "from" is above its "below" is refused with a
message. axe-core finds nothing serious on the page with its sliders showing.
Step screenshots (DPPORTAL_E2E_SCREENSHOTS=steps):
test-artifacts/e2e/test_the_sliders_ask_a_box_on_the_grid_edges/.
"""

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.helpers import make_dataset, make_release, run_now

pytestmark = pytest.mark.e2e

AGE_LOWER, AGE_STEP = 16.5, 4.625
HOURS_LOWER, HOURS_STEP = 0.5, 6.1875


def is_edge(text: str, lower: float, step: float) -> bool:
    k = (float(text) - lower) / step
    return abs(k - round(k)) < 1e-9


@pytest.mark.timeout(180)
def test_the_sliders_ask_a_box_on_the_grid_edges(browser, custodian, no_broker):
    dataset = make_dataset(custodian, epsilon_total=2)
    release = run_now(
        make_release(
            custodian,
            dataset,
            mechanism="range_count",
            columns=["age", "hours-per-week"],
            params={"grid": [16, 16], "random_boxes": 20, "mechanism": "tree"},
            epsilon="1",
        )
    )
    browser.log_in("custodian")
    browser.goto(f"/releases/{release.pk}/")
    page = browser.page
    age_from, age_to = (
        page.get_by_label("age from", exact=True),
        page.get_by_label("age below", exact=True),
    )
    from_slider = page.get_by_role("slider", name="age from, on the grid")
    to_slider = page.get_by_role("slider", name="age below, on the grid")
    assert age_from.input_value() == "" and age_to.input_value() == ""  # any age
    assert from_slider.input_value() == "16.5" and to_slider.input_value() == "90.5"

    from_slider.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    assert age_from.input_value() == "30.375"  # 16.5 + 3 cells
    assert from_slider.get_attribute("aria-valuetext") == "30.375"

    box = to_slider.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 4, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.55, box["y"] + box["height"] / 2, steps=8)
    page.mouse.up()
    dragged = age_to.input_value()
    assert is_edge(dragged, AGE_LOWER, AGE_STEP) and 40 < float(dragged) < 70, dragged

    hours_from = page.get_by_label("hours-per-week from", exact=True)
    hours_from.fill("10")
    hours_from.press("Tab")  # the value stays as typed; the slider shows the nearest edge
    assert hours_from.input_value() == "10"
    hours_slider = page.get_by_role("slider", name="hours-per-week from, on the grid")
    assert hours_slider.input_value() == "12.875"
    assert not [
        v for v in Axe().run(page).response["violations"] if v["impact"] in {"serious", "critical"}
    ]
    browser.screenshot("box set with the sliders")

    button = page.get_by_role("button", name="Answer (free)")
    browser.click_and_wait(button)
    answer = page.locator("#range-answer")
    assert f"age from 30.375 up to (not including) {dragged}" in answer.inner_text()
    assert "hours-per-week from 10 to the upper bound" in answer.inner_text()  # as typed
    grid = page.locator("#grid-answer").inner_text()
    assert "hours-per-week from 12.875" in grid and "a different range" in grid
    gap = answer.bounding_box()["y"] - (
        button.bounding_box()["y"] + button.bounding_box()["height"]
    )
    assert 0 <= gap < 120, gap  # the answer appears just under the button
    assert from_slider.input_value() == "30.375"  # the sliders keep the box asked
    browser.screenshot("answer next to the button")

    from_slider.focus()
    page.keyboard.press("End")
    to_slider.focus()
    page.keyboard.press("Home")
    assert age_from.input_value() == "90.5" and age_to.input_value() == "16.5"
    browser.click_and_wait(page.get_by_role("button", name="Answer (free)"))
    assert "must be below ‘below’" in page.locator("#range-query").inner_text()
    assert page.locator("#range-answer").count() == 0
    browser.screenshot("from above up to refused")
    browser.assert_no_problems()
