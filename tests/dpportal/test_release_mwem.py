"""MWEM releases in the portal: parameters from the form, the estimate, results and charts."""

import html
import json

import numpy as np
import pandas as pd
from django.urls import reverse

import mechanisms
from dpportal.models import Release
from dpportal.releases import comparisons, packaging, utility
from dpportal.templatetags.portal_labels import parameter_text
from tests.helpers import (
    DEMO_SCHEMA,
    chart_figures,
    client_for,
    make_dataset,
    make_release,
    make_user,
    post_new_release,
    run_now,
)

COLUMNS = ["age", "sex", "income"]


def mwem_post(**overrides) -> dict:
    return {
        "mechanism": "mwem",
        "columns": COLUMNS,
        "epsilon": "1",
        "rows": "500",
        "mwem_marginal_size": "2",
        "mwem_rounds": "3",
        **overrides,
    }


def test_the_form_passes_a_marginal_workload_and_rounds_but_no_row_count(owner, dataset):
    post_new_release(client_for(owner), dataset.pk, mwem_post())
    release = Release.objects.get()
    assert release.params == {"workload": {"queries": [{"type": "marginals", "k": 2}]}, "rounds": 3}


def test_the_estimate_describes_rounds_and_noise(owner, dataset):
    result = (
        client_for(owner)
        .get(reverse("release_preview", args=[dataset.pk]), mwem_post(mwem_rounds=""))
        .json()
    )
    assert result["ok"], result
    assert "The workload has 3 patterns" in result["accuracy"][0]
    assert "noise of typically ±" in result["accuracy"][1]


def test_a_workload_asking_for_the_full_table_measures_it_once(owner, dataset, a_minute_later):
    """3 columns with 3-way marginals, small against n·ε: the plan measures the full table
    (mechanisms.mwem.plan.measures_joint); the estimate says so and the release does it."""
    fields = mwem_post(mwem_rounds="", mwem_marginal_size="3")
    url = reverse("release_preview", args=[dataset.pk])
    result = client_for(owner).get(url, fields).json()
    assert result["ok"], result
    assert "asks for the full table" in result["accuracy"][0]
    rows = result["accuracy_table"]["rows"]
    assert len(rows) == 1 and rows[0]["output"].startswith("Each count of the full table")
    post_new_release(client_for(owner), dataset.pk, fields)
    release = run_now(Release.objects.get())
    assert release.status == Release.Status.DONE, release.error_message
    document = json.loads(packaging.stored_file(release, "measurements.json"))
    assert document["budget_split"]["full_table"] is True
    (measured,) = document["measurements"]
    assert measured["query"]["columns"] == COLUMNS
    page = client_for(owner).get(reverse("release_detail", args=[release.pk]))
    assert page.status_code == 200 and "once, the whole budget" in page.content.decode()


def test_an_mwem_release_shows_its_rounds_publicly_and_its_errors_to_the_owner(
    owner, dataset, a_minute_later
):
    post_new_release(client_for(owner), dataset.pk, mwem_post())
    release = run_now(Release.objects.get())
    report = utility.load_report(release)
    assert report["synthetic_rows"] == dataset.row_count
    assert report["workload"]["cells"] > 0 and report["workload"]["rmse"] > 0
    auditor = make_user("auditor")
    dataset.auditors.add(auditor)
    titles = {}
    for user in (owner, auditor):
        page = client_for(user).get(reverse("release_detail", args=[release.pk]))
        assert page.status_code == 200
        titles[user.username] = [
            f["layout"]["title"]["text"] for f in chart_figures(page.content.decode())
        ]
    rounds_title = "MWEM: estimated error of the table measured in each round"
    workload_title = "Workload queries: noisy measurements against true counts"
    assert rounds_title in titles["owner"] and rounds_title in titles["auditor"]
    assert workload_title in titles["owner"] and workload_title not in titles["auditor"]
    rounds = next(
        f
        for f in chart_figures(page.content.decode())
        if f["layout"]["title"]["text"] == rounds_title
    )
    assert rounds["data"][0]["x"] == [1, 2, 3]
    assert [trace["name"] for trace in rounds["data"]] == [
        "estimated error of the worst table",
        "noise level of a measurement",
    ]
    page = client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert 'id="verdict-heading"' in page and "Verdict:" in page
    assert page.index('id="verdict"') < page.index('id="job"')  # the page opens with it
    seen_by_auditor = client_for(auditor).get(reverse("release_detail", args=[release.pk]))
    assert 'id="verdict"' not in seen_by_auditor.content.decode()  # custodian-only
    assert "What was measured, with 95% intervals" in page


def test_measurement_errors_are_zero_when_the_measurements_are_exact():
    schema = mechanisms.Schema.from_dict(DEMO_SCHEMA)
    frame = pd.DataFrame({"age": ["20", "30", "80", "85"], "sex": ["Male"] * 3 + ["Female"]})
    exact_marginal = schema.cell_counts(frame, ["age", "sex"]).ravel().tolist()
    measurements = [
        {"query": {"type": "marginal", "columns": ["age", "sex"]}, "noisy_answer": exact_marginal},
        {"query": {"type": "box", "columns": ["age"], "bins": [[6, 7]]}, "noisy_answer": [2]},
    ]
    errors = comparisons.measurement_errors(schema, frame, measurements)
    assert errors["cells"] == 24 + 1 and errors["rmse"] == 0
    measurements[1]["noisy_answer"] = [5]  # the two oldest rows are in bins 6-7: truth is 2
    assert comparisons.measurement_errors(schema, frame, measurements)["mean_abs_error"] == 3 / 25


def test_how_the_model_was_held_in_words():
    note = "In 3 of 5 rounds the memory budget left out patterns ..."
    record = {"whole_cells": 1 << 22, "memory_cells": 8192, "left_out_rounds": 3, "rounds": 5,
              "note": note}  # fmt: skip
    assert parameter_text("model_blocks", json.dumps(record)) == note
    quiet = dict(record, left_out_rounds=0, note="")
    assert parameter_text("model_blocks", json.dumps(quiet)) == (
        "model: blocks of up to 4,194,304 cells as whole tables, larger ones as junction trees "
        "of smaller tables (every pattern could be chosen in every round)"
    )
    whole = dict(quiet, whole_cells=None)
    assert parameter_text("model_blocks", json.dumps(whole)).startswith(
        "model: every block one whole table"
    )


def test_a_table_above_2_22_cells_leaves_no_pattern_out(owner, tmp_path, a_minute_later):
    """4 columns of 64 bins (65^4 cells with "(missing)", above the whole-table limit of 2^22):
    no round leaves a pattern out (a speed cap once did from round 3 on:
    tests/mechanisms/test_mwem.py, WIDE), and the results page says how the model was held."""
    rng = np.random.default_rng(44)
    path = tmp_path / "wide.csv"
    pd.DataFrame(rng.uniform(0, 64, size=(2000, 4)), columns=list("abcd")).to_csv(path, index=False)
    schema = {"columns": [{"name": c, "type": "numeric", "lower": 0, "upper": 64, "bins": 64}
                          for c in "abcd"]}  # fmt: skip
    dataset = make_dataset(owner, epsilon_total=10, schema=schema, path=path, name="Wide")
    workload = mechanisms.workload.marginals_spec(2)
    release = make_release(owner, dataset, mechanism="mwem", columns=list("abcd"), epsilon="10",
                           params={"workload": workload, "rounds": 5})  # fmt: skip
    release = run_now(release)
    assert release.manifest["parameters"]["model_blocks"]["left_out_rounds"] == 0
    page = html.unescape(
        client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    )
    assert "model: blocks of up to 4,194,304 cells as whole tables" in page
