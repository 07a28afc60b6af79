"""Every cell of a heatmap is drawn (issue 43 item 7: "a heatmap drops a row and a column, NaN
in the browser console").

Plotly guesses an axis's type from its labels: whole-number bins ("1", "2", …) with a
"(missing)" cell read as numbers, so the "(missing)" row and column were dropped and their
labels placed at NaN. A perturbed histogram of two whole-number columns that may miss values
(education-num 1–17, age 17–22: one bin per value, the last two values together) is drawn on
its results page; each heatmap must have a category axis on both sides with every label, and
the browser must log nothing.
"""

import pytest

from tests.helpers import DEMO_SCHEMA, make_dataset, make_release, run_now

pytestmark = pytest.mark.e2e

NUMBERED = {
    "education-num": {"name": "education-num", "type": "numeric", "lower": 1, "upper": 17,
                      "bins": 16, "integer": True, "missing": "cell"},
    "age": {"name": "age", "type": "numeric", "lower": 17, "upper": 22, "bins": 5,
            "integer": True, "missing": "cell"},
}  # fmt: skip
HEATMAPS = """() => Array.from(document.querySelectorAll('[data-figure]'))
  .filter((chart) => chart.data && chart.data[0].type === 'heatmap')
  .map((chart) => ({
    types: [chart._fullLayout.xaxis.type, chart._fullLayout.yaxis.type],
    z: [chart.calcdata[0][0].z.length, chart.calcdata[0][0].z[0].length],
    across: Array.from(chart.querySelectorAll('.xtick text')).map((t) => t.textContent),
    down: Array.from(chart.querySelectorAll('.ytick text')).map((t) => t.textContent),
  }))"""


@pytest.mark.timeout(180)
def test_every_cell_of_a_heatmap_is_drawn(browser, custodian, no_broker):
    columns = [NUMBERED.get(c["name"], c) for c in DEMO_SCHEMA["columns"]]
    dataset = make_dataset(custodian, schema={**DEMO_SCHEMA, "columns": columns})
    release = run_now(
        make_release(custodian, dataset, columns=["education-num", "age"], params={"rows": 500})
    )
    browser.log_in("custodian")
    browser.goto(f"/releases/{release.pk}/")
    browser.settle()
    drawn = browser.page.evaluate(HEATMAPS)
    education = [str(v) for v in range(1, 16)] + ["16 to 17", "(missing)"]
    ages = ["17", "18", "19", "20", "21 to 22", "(missing)"]
    assert drawn == [
        {"types": ["category", "category"], "z": [17, 6], "across": ages, "down": education}
    ]
    browser.screenshot("heatmap with every cell")
    browser.assert_no_problems()
