"""The custodian-only verdict on range-count releases (issue 15): good at ε = 1, not usable at a
tiny ε, and a broken release of each kind caught.

Each case is a range-count release of age × hours-per-week from the 2,000-row Adult sample
(tree on a 16 × 16 grid, 40 random boxes), made with a seeded source and graded with a seeded
baseline: deterministic, so no case can pass or fail by chance (the grades at several ε on
fresh secure draws: benchmarks/range_verdict_grades.py).
"""

import io
import json

import numpy as np
import pandas as pd
import pytest
from django.urls import reverse

import mechanisms
from dpportal.releases import utility
from dpportal.releases.kinds.range_count import verdict as range_verdict
from dpportal.releases.packaging import with_numbers
from mechanisms.range_count import Support
from tests.helpers import (
    DEMO_SCHEMA,
    SMALL_ADULT,
    client_for,
    make_dataset,
    make_release,
    make_user,
    run_now,
)

SCHEMA = mechanisms.Schema.from_dict(DEMO_SCHEMA)
COLUMNS = ["age", "hours-per-week"]
RAW = pd.read_csv(SMALL_ADULT, dtype=str)[COLUMNS]
PARAMS = {"grid": [16, 16], "random_boxes": 40, "mechanism": "tree"}


def release(epsilon: float, seed: int = 7) -> dict[str, bytes]:
    output = mechanisms.run_release(
        "range_count",
        RAW,
        SCHEMA,
        columns=COLUMNS,
        params=PARAMS,
        epsilon=epsilon,
        rng=mechanisms.seeded_source(seed),
    )
    return output.files


def grade(files: dict[str, bytes], epsilon: float) -> dict:
    return range_verdict.assess(
        SCHEMA,
        COLUMNS,
        RAW,
        files,
        epsilon=epsilon,
        neighbouring="replace-one",
        rng=mechanisms.seeded_source(11),
    )


def with_answers(files: dict[str, bytes], change) -> dict[str, bytes]:
    """The release with its answers.csv changed by `change` (a deliberately broken twin)."""
    answers = pd.read_csv(io.BytesIO(files["answers.csv"]))
    out = io.StringIO()
    change(answers).to_csv(out, index=False)
    return {**files, "answers.csv": out.getvalue().encode()}


def test_a_release_at_epsilon_one_is_good_and_says_why():
    result = grade(release(1.0), 1.0)
    assert result["grade"] == "good", result["reason"]
    assert result["label"] == "Good" and "fresh sample" in result["reason"]
    assert result["ranges"] == 40 and result["rmse"] <= 2 * result["floor"]
    assert result["baseline_name"] == "independent noisy one-way counts"
    assert result["rmse"] < result["baseline"] and result["coverage"] >= 0.8


def test_a_release_at_a_tiny_epsilon_is_not_usable_and_says_what_to_do():
    result = grade(release(0.01), 0.01)
    assert result["grade"] == "bad" and result["label"] == "Not usable", result["reason"]
    assert "spend more ε, use a coarser grid or release fewer columns" in result["reason"]
    assert result["rmse"] > result["baseline"]


def test_answers_no_better_than_the_baseline_are_not_usable():
    """Broken twin of the good release: each answer replaced by the total spread evenly over the
    box's share of the grid (what a release that learnt nothing would say)."""
    files = release(1.0)

    def even(answers):
        share = np.ones(len(answers))
        for column, (lower, upper) in zip(COLUMNS, [(16.5, 90.5), (0.5, 99.5)], strict=True):
            lo = answers[f"lo_{column}"].clip(lower, upper)
            hi = answers[f"hi_{column}"].clip(lower, upper)
            share *= (hi - lo) / (upper - lower)
        return answers.assign(estimate=len(RAW) * share)

    result = grade(with_answers(files, even), 1.0)
    assert result["grade"] == "bad", result["reason"]
    assert "no better than independent noisy one-way counts at the same ε" in result["reason"]


def test_intervals_that_miss_are_caught():
    """Broken twin: every interval shrunk to its estimate (rounded), so most miss the truth."""
    files = release(1.0)
    point = with_answers(
        files, lambda a: a.assign(ci_lower=a["estimate"].round(), ci_upper=a["estimate"].round())
    )
    result = grade(point, 1.0)
    assert result["grade"] == "care" and result["coverage"] < 0.8, result["reason"]
    assert "95% intervals held the true count on" in result["reason"]


def off_by(files: dict[str, bytes], columns, size) -> dict[str, bytes]:
    """Broken twin: every answer the true count ± `size(true counts)` rows, alternating, with
    intervals wide enough to hold the truth."""
    structure = json.loads(files["structure.json"])
    support = Support.from_dict(structure["support"])
    values = range_verdict.raw_values(columns, with_numbers(RAW, SCHEMA))
    true = range_verdict.true_counts(support, values, structure["workload"])
    signs = np.where(np.arange(len(true)) % 2 == 0, 1.0, -1.0)
    estimate = true + signs * size(true)
    return with_answers(
        files,
        lambda a: a.assign(estimate=estimate, ci_lower=estimate - 5000, ci_upper=estimate + 5000),
    )


def test_answers_three_times_the_sampling_noise_off_are_usable_with_care():
    """One column (age, 64 cells): the even-spread baseline is far off (over 300 rows), so
    answers off by 3 × the floor beat it but are not good."""
    files = one_column_release()
    floor = grade_one_column(files)["floor"]
    result = grade_one_column(off_by(files, ["age"], lambda true: 3 * floor))
    assert result["grade"] == "care", result["reason"]
    assert "3.0× a fresh sample's" in result["reason"] and "coarser grid" in result["reason"]


def test_answers_off_by_more_than_half_the_count_are_not_usable():
    """Graded against a baseline at ε = 0.01 (far off too), answers off by 0.6 × the average
    true count beat it yet tell little: not usable."""
    files = release(1.0)
    result = grade(off_by(files, COLUMNS, lambda true: 0.6 * true.mean()), 0.01)
    assert result["rmse"] < result["baseline"]
    assert result["grade"] == "bad" and "half the average true count" in result["reason"]


def one_column_release() -> dict[str, bytes]:
    return mechanisms.run_release(
        "range_count",
        RAW,
        SCHEMA,
        columns=["age"],
        params={"grid": [64], "random_boxes": 40, "mechanism": "tree"},
        epsilon=1.0,
        rng=mechanisms.seeded_source(3),
    ).files


def grade_one_column(files: dict[str, bytes]) -> dict:
    return range_verdict.assess(
        SCHEMA,
        ["age"],
        RAW,
        files,
        epsilon=1.0,
        neighbouring="replace-one",
        rng=mechanisms.seeded_source(5),
    )


def test_one_column_is_compared_with_a_noisy_total_spread_evenly():
    result = grade_one_column(one_column_release())
    assert result["baseline_name"] == "a noisy total spread evenly"
    assert result["rmse"] < result["baseline"] and result["grade"] != "bad", result["reason"]
    assert "fewer columns" not in result["reason"]


@pytest.mark.parametrize("files", [{}, {"synthetic.csv": b"age\n1\n"}])
def test_releases_without_range_answers_get_no_range_verdict(files):
    assert (
        range_verdict.assess(SCHEMA, COLUMNS, RAW, files, epsilon=1, neighbouring="replace-one")
        is None
    )


def test_the_range_count_results_page_opens_with_the_verdict_for_the_owner_only(owner):
    """Through the portal: the worker grades the release against the raw rows, the owner's
    page opens with the grade in words, an auditor's page has none of it."""
    dataset = make_dataset(owner, epsilon_total=2)
    made = make_release(owner, dataset, mechanism="range_count", columns=COLUMNS, params=PARAMS)
    done = run_now(made)
    verdict = utility.load_report(done)["verdict"]
    assert verdict["kind"] == "range" and verdict["ranges"] == 40
    page = client_for(owner).get(reverse("release_detail", args=[done.pk])).content.decode()
    heading = page.index('<h2 id="verdict-heading">Verdict: ')
    assert heading < page.index('id="job-heading"') and "No grade" not in page
    assert verdict["label"] in page[heading:] and "planned ranges" in page
    auditor = make_user("auditor")
    dataset.auditors.add(auditor)
    other = client_for(auditor).get(reverse("release_detail", args=[done.pk])).content.decode()
    assert 'id="verdict"' not in other and verdict["reason"] not in other
