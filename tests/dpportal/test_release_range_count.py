"""Range-count releases in the portal: form checks, the data-free estimate, results, and new
questions answered from the released structure at no budget cost."""

import io

import numpy as np
import pandas as pd
import pytest
from django.urls import reverse

from dpportal.models import BudgetLedgerEntry, Release
from dpportal.releases import engine as release_engine
from dpportal.releases import packaging, utility
from tests.helpers import (
    DEMO_SCHEMA,
    SMALL_ADULT,
    chart_figures,
    client_for,
    make_dataset,
    make_user,
    post_new_release,
    run_now,
)


@pytest.fixture
def dataset(owner):
    return make_dataset(owner, delta_total="0.00001")


def range_post(**overrides) -> dict:
    return {
        "mechanism": "range_count",
        "columns": ["age", "hours-per-week"],
        "epsilon": "1",
        "delta": "0.000001",
        "range_workload": "boxes",
        "range_queries": "40",
        "range_grid": "16",
        "range_method": "auto",
        **overrides,
    }


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"columns": ["age", "sex"]}, "Range counts need numeric columns; sex is categorical."),
        ({"columns": ["age"], "range_workload": "halfspaces"}, "need at least two columns"),
        ({"range_method": "mn12", "delta": ""}, "needs δ &gt; 0"),
        ({"range_method": "mn12_laplace", "delta": ""}, "needs δ &gt; 0"),
        ({"range_grid": "4096"}, "use at most 65,536"),
    ],
)
def test_the_form_refuses_range_counts_it_cannot_run(owner, dataset, overrides, message):
    response = post_new_release(client_for(owner), dataset.pk, range_post(**overrides))
    assert message in response.content.decode()
    assert not Release.objects.exists()


def test_the_form_turns_choices_into_mechanism_parameters(owner, dataset):
    post_new_release(client_for(owner), dataset.pk, range_post())
    release = Release.objects.get()
    assert release.params == {"grid": [16, 16], "mechanism": "auto", "random_boxes": 40}
    assert str(release.delta) == "0.000001000000000"


def test_the_estimate_plans_without_reading_the_data(owner, dataset, monkeypatch):
    def no_raw_data(*args, **kwargs):
        raise AssertionError("the estimate must not read the raw data")

    monkeypatch.setattr(release_engine, "load_columns", no_raw_data)
    result = (
        client_for(owner).get(reverse("release_preview", args=[dataset.pk]), range_post()).json()
    )
    assert result["ok"], result
    assert (
        "40 ranges over a 16 × 16 grid (age × hours-per-week: 256 points). The method used will "
        "be a" in (result["accuracy"][0])
    )
    assert "with 95% probability" in result["accuracy"][1]
    assert result["accuracy"][2].startswith("Rounding: none.")  # random boxes snap to the grid
    assert result["delta_left"] == "0.000009"


def test_a_range_count_release_answers_new_questions_for_free(owner, dataset):
    post_new_release(client_for(owner), dataset.pk, range_post(range_method="tree"))
    release = run_now(Release.objects.get())
    dataset.refresh_from_db()
    spent, entries = dataset.epsilon_spent, BudgetLedgerEntry.objects.count()
    client = client_for(owner)
    url = reverse("release_detail", args=[release.pk])
    page = client.get(url).content.decode()
    assert "Preview of answers.csv" in page and "Ask a new range question" in page
    assert "no privacy budget" in page
    query = {"ask": "1", "kind": "box", "lo_0": "17", "hi_0": "40", "lo_1": "1", "hi_1": "99"}
    response = client.get(url, query)
    answer = response.context["range_answer"]
    page = " ".join(response.content.decode().split())
    assert response.status_code == 200 and "with 95% confidence" in page
    assert 0 < answer["std"] < 1000 and abs(answer["answer"]) < 10 * dataset.row_count
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == spent and BudgetLedgerEntry.objects.count() == entries
    halfspace = {"ask": "1", "kind": "halfspace", "a_0": "1", "a_1": "1", "b": "60"}
    assert client.get(url, halfspace).context["range_answer"]["std"] > 0
    missing = client.get(url, {"ask": "1", "kind": "halfspace", "a_0": "1", "a_1": "1"})
    assert "Enter a number for b." in missing.content.decode()
    assert "range_answer" not in missing.context


def held_share(answers_csv: bytes) -> float:
    """Share of the released boxes whose 95% interval holds the raw count of the test table,
    with values clamped into the schema's bounds and a box's upper edge included only at the
    upper bound (the mechanism's convention)."""
    bounds = {c["name"]: (c["lower"], c["upper"]) for c in DEMO_SCHEMA["columns"] if "upper" in c}
    table = pd.read_csv(SMALL_ADULT)
    answers = pd.read_csv(io.BytesIO(answers_csv))
    held = []
    for _, box in answers.iterrows():
        inside = np.ones(len(table), dtype=bool)
        for column in ("age", "hours-per-week"):
            lower, upper = bounds[column]
            values = table[column].clip(lower, upper)
            below_top = (
                values <= upper if box[f"hi_{column}"] >= upper else values < box[f"hi_{column}"]
            )
            inside &= (values >= box[f"lo_{column}"]).to_numpy() & below_top.to_numpy()
        held.append(box["ci_lower"] <= inside.sum() <= box["ci_upper"])
    return float(np.mean(held))


def test_range_count_results_compare_errors_with_predictions_for_the_owner_only(
    owner, dataset, a_minute_later
):
    post_new_release(client_for(owner), dataset.pk, range_post(range_method="identity"))
    release = run_now(Release.objects.get())
    report = utility.load_report(release)
    assert report["answers"]["count"] == 40
    assert report["answers"]["rmse"] > 0 and report["answers"]["predicted_rmse"] > 0
    owner_page = client_for(owner).get(reverse("release_detail", args=[release.pk]))
    titles = [
        figure["layout"]["title"]["text"] for figure in chart_figures(owner_page.content.decode())
    ]
    assert "Range answers: squared error against predicted variance" in titles
    assert "Range answers with their 95% intervals" in titles
    # The report's coverage is the share of released intervals holding the raw count, counted
    # here independently from the uploaded file. (Whether the intervals reach 95% is a
    # statistical promise, audited with a stated sample size and false-alarm rate in
    # tests/mechanisms/test_range_count_intervals.py; 40 correlated answers cannot state one.)
    assert report["answers"]["coverage"] == held_share(
        packaging.stored_files(release)["answers.csv"]
    )
    auditor = make_user("auditor")
    dataset.auditors.add(auditor)
    auditor_page = client_for(auditor).get(reverse("release_detail", args=[release.pk]))
    titles = [
        figure["layout"]["title"]["text"] for figure in chart_figures(auditor_page.content.decode())
    ]
    assert titles == [
        "Range answers with their 95% intervals",
        "Ranges answered, drawn over the grid (age across, hours-per-week up)",
    ]
    assert "Ask a new range question" in auditor_page.content.decode()


def test_typed_bounds_are_answered_as_typed_and_the_grid_range_is_named_beside(owner):
    """Issue 43: "asked 35–45, answered 37–43.25; the true count of what was typed lies outside
    the interval". At ε = 1000 the noise is under a row, so the interval of a range answered as
    typed must hold the true count of the rows typed (its cut cells' rows are inside it), and
    the nearest range on the grid's edges (age cells 4.625 wide from 16.5: 35 to 44.25, which
    also holds the rows aged 35 and 44) is a different range, named as such. From > below gets
    a message, not an answer."""
    dataset = make_dataset(owner, epsilon_total=100)
    post = range_post(range_method="tree", epsilon="100", delta="")
    post_new_release(client_for(owner), dataset.pk, post)
    release = run_now(Release.objects.get())
    client, url = client_for(owner), reverse("release_detail", args=[release.pk])
    query = {"ask": "1", "kind": "box", "lo_0": "36", "hi_0": "44", "lo_1": "", "hi_1": ""}
    response = client.get(url, query)
    answer, grid = response.context["range_answer"], response.context["grid_answer"]
    ages = pd.read_csv(SMALL_ADULT)["age"]
    typed = int(((ages >= 36) & (ages < 44)).sum())
    assert answer["ci_lower"] <= typed <= answer["ci_upper"]
    assert not answer["exact"] and "age from 36 up to (not including) 44" in answer["region"]
    assert answer["asked"] == "age between 36 and 44 (from 36, below 44)"  # any hours: unsaid
    assert grid["exact"] and "age from 35 up to (not including) 44.25" in grid["region"]
    assert grid["ci_upper"] - grid["ci_lower"] < answer["ci_upper"] - answer["ci_lower"]
    page = " ".join(response.content.decode().split())
    assert "age between 36 and 44 (from 36, below 44): about" in page  # as the column is named
    assert "The nearest range on the grid's edges, age from " in page
    assert (
        page.index("Answer (free)")
        < page.index("with 95% confidence. It is a different range")
        < page.index("</form>", page.index("Answer (free)"))
    )
    backwards = {**query, "lo_0": "50", "hi_0": "20"}
    refused = client.get(url, backwards).content.decode()
    assert "must be below ‘below’" in refused and "range_answer" not in str(refused)


def test_questions_in_words_one_side_of_a_line_and_north_of_a_value(owner, dataset):
    """'hours from 40 up' (one column open below: "north of" it on a map) is the box of every
    age and hours at least 40; 'below the line through (20, 20) and (60, 60)' is hours ≤ age
    (the half-plane -40·age + 40·hours ≤ 0). Both are answered as asked."""
    post_new_release(client_for(owner), dataset.pk, range_post(range_method="tree"))
    release = run_now(Release.objects.get())
    client, url = client_for(owner), reverse("release_detail", args=[release.pk])
    north = {"ask": "1", "kind": "box", "lo_1": "40"}
    answer = client.get(url, north).context["range_answer"]
    assert answer["asked"] == "hours-per-week from 40 up"
    assert answer["region"] == (
        "age from the lower bound to the upper bound 90.5 and hours-per-week from 40 to the "
        "upper bound 99.5"
    )
    line = {"ask": "1", "kind": "line", "p1_0": "60", "p1_1": "60", "p2_0": "20", "p2_1": "20",
            "side": "below"}  # fmt: skip
    answer = client.get(url, line).context["range_answer"]
    assert answer["asked"] == (
        "below the line through (age 60, hours-per-week 60) and (age 20, hours-per-week 20)"
    )
    assert answer["region"] == "-40·age + 40·hours-per-week ≤ 0"
    upright = {**line, "p2_0": "60"}
    refused = client.get(url, upright).content.decode()
    assert "the line is upright" in refused


def test_a_line_question_is_the_half_plane_on_the_side_asked():
    from dpportal.releases.kinds.range_count.query_form import line_halfspace

    points = np.array([[0.0, 5.0], [10.0, 0.0], [10.0, 20.0], [5.0, 5.0]])  # line y = x
    for side, expected in (("below", [False, True, False, True]),
                           ("above", [True, False, True, True])):  # fmt: skip
        half = line_halfspace([(8.0, 8.0), (2.0, 2.0)], side)
        inside = points @ np.array(half["a"]) <= half["b"]
        assert inside.tolist() == expected, side


def test_a_per_query_release_says_it_cannot_answer_new_questions(owner, dataset):
    post_new_release(client_for(owner), dataset.pk, range_post(range_method="per_query"))
    release = run_now(Release.objects.get())
    page = (
        client_for(owner)
        .get(reverse("release_detail", args=[release.pk]), {"ask": "1", "kind": "box"})
        .content.decode()
    )
    assert "cannot answer new range questions" in page and "Ask a new range" not in page


def test_the_summary_lists_the_settings_the_mechanism_recorded(owner, dataset):
    post_new_release(client_for(owner), dataset.pk, range_post(range_method="tree"))
    release = run_now(Release.objects.get())
    page = client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "method used: a hierarchy of noisy counts" in page and "random boxes: 40" in page


def test_the_papers_laplace_version_runs_from_the_form(owner, dataset):
    post_new_release(
        client_for(owner),
        dataset.pk,
        range_post(range_method="mn12_laplace", range_workload="halfspaces"),
    )
    release = run_now(Release.objects.get())
    page = client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "method used: the halfspace decomposition with Laplace noise" in page


def test_the_preview_headline_and_its_table_state_the_same_interval(owner, dataset):
    """Issue 43: "±94 rows (typical ±48)" beside the preview table's ±144. The table read the
    noise's standard deviation as a discrete Laplace scale (48 × ln 20 ≈ 144); the headline's
    ±94 is the 95% half-width of the answers' noise. Now both state that half-width, and the
    planner aims at it too (`accuracy.plan_half_width`)."""
    from mechanisms import Schema, accuracy

    post = range_post(range_method="tree", delta="", range_workload="boxes")
    result = client_for(owner).get(reverse("release_preview", args=[dataset.pk]), post).json()
    headline = next(line for line in result["accuracy"] if line.startswith("Noise:"))
    stated = headline.split("within ±", 1)[1].split(" rows", 1)[0]
    table = result["accuracy_table"]["rows"]
    assert table[0]["within"] == f"±{stated} rows"
    assert "standard deviation" in table[0]["note"]
    plan = release_engine.noise_plan(
        dataset, Schema.from_dict(dataset.schema), "range_count", ["age", "hours-per-week"],
        {"grid": [16, 16], "mechanism": "tree", "random_boxes": 40}, 1.0, 0.0,
    )  # fmt: skip
    assert accuracy.plan_half_width(plan, dataset.row_count) == plan.details["noise_95"]
    assert plan.details["noise_95"] < 2.5 * plan.expected_error  # not sd × ln 20 ≈ 3 sd


@pytest.mark.parametrize(
    ("answer", "words", "not_words"),
    [
        (
            {"answer": 31.4, "ci_lower": 12, "ci_upper": 50},
            [
                "about <strong>31</strong> rows",
                "between <strong>12</strong> and <strong>50</strong>",
            ],
            ["at most"],
        ),
        (
            {"answer": 6.2, "ci_lower": -14, "ci_upper": 48},
            ["about <strong>6</strong> rows", "at most <strong>48</strong>"],
            ["-14", "between"],
        ),
        (
            {"answer": -9.6, "ci_lower": -40, "ci_upper": 21},
            ["about <strong>0</strong> rows", "estimate to -10", "at most <strong>21</strong>"],
            ["between"],
        ),
    ],
)
def test_a_range_answer_never_reads_as_fewer_than_zero_rows(answer, words, not_words):
    """No range holds fewer than 0 rows: the words say "at most" where the interval reaches
    below 0, and "about 0" where the noise took the estimate there (it read "between -14 and
    48")."""
    from django.template.loader import render_to_string

    text = " ".join(
        render_to_string(
            "dpportal/releases/kinds/range_count/answer.html", {"answer": answer}
        ).split()
    )
    for phrase in words:
        assert phrase in text, (phrase, text)
    for phrase in not_words:
        assert phrase not in text, (phrase, text)
