"""The summary-statistics release in the portal: its card and settings, the preview of each
statistic's expected interval before spending, a grouped release run through the engine, and
its results page (the statistics.csv table and one error-bar chart per statistic)."""

import pandas as pd
from django.urls import reverse

from dpportal.models import Release
from dpportal.releases import packaging
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

POST = {
    "mechanism": "statistics",
    "columns": ["age", "hours-per-week", "sex"],
    "epsilon": "0.8",
    "stats_kinds": ["count", "mean", "median"],
    "stats_quantiles": "",
    "confirm": "on",  # at ε 0.16 a median's interval is the whole range: the preview warns
}


def test_the_form_offers_it_and_previews_each_interval(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    client = client_for(owner)
    page = client.get(reverse("release_new", args=[dataset.pk])).content.decode()
    assert 'id="id_mechanism_statistics"' in page and "Summary statistics" in page
    assert 'name="stats_kinds"' in page and 'name="stats_weights"' in page
    estimate = client.get(reverse("release_preview", args=[dataset.pk]), POST).json()
    assert estimate["ok"], estimate
    lines = estimate["accuracy"]
    assert lines[0].startswith("5 statistics over 3 groups")  # Female, Male, (other)
    assert any(line.startswith("mean of age: ε = 0.16, typically ±") for line in lines)
    weighted = {**POST, "stats_weights": "1, 2"}  # five statistics, two weights
    refused = client.get(reverse("release_preview", args=[dataset.pk]), weighted).json()
    assert not refused["ok"] and "one per statistic" in " ".join(refused["errors"])


def test_a_grouped_release_runs_and_shows_its_table_and_charts(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    client = client_for(owner)
    post_new_release(client, dataset.pk, POST)
    release = Release.objects.get()
    assert release.params["stat"] == [
        "count", "mean:age", "mean:hours-per-week", "median:age", "median:hours-per-week"
    ]  # fmt: skip
    assert release.params["by"] == ["sex"]
    release = run_now(release)
    table = packaging.read_csv((packaging.output_dir(release) / "statistics.csv").read_bytes())
    assert list(table.columns) == [
        "statistic", "column", "sex", "estimate", "ci_lower", "ci_upper", "noise_scale",
        "epsilon", "note",
    ]  # fmt: skip
    assert len(table) == 5 * 3
    assert 0.79 < release.manifest["accounting"]["epsilon"] <= 0.8
    withheld = table[table["estimate"] == ""]
    assert (withheld["note"] == "too few rows to publish").all()
    assert set(withheld["statistic"]) <= {"mean", "median"}
    numbers = table.drop(withheld.index)[["estimate", "ci_lower", "ci_upper"]].astype(float)
    assert (numbers["ci_lower"] <= numbers["estimate"]).all()
    assert (numbers["estimate"] <= numbers["ci_upper"]).all()
    detail = client.get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "statistics.csv" in detail and "ci_lower" in detail
    figures = [f for f in chart_figures(detail) if f["data"][0].get("error_y")]
    assert len(figures) == 5
    mean_age = next(f for f in figures if f["layout"]["title"]["text"] == "mean of age")
    trace = mean_age["data"][0]
    rows = table[(table["statistic"] == "mean") & (table["column"] == "age")]
    rows = rows[rows["estimate"] != ""]  # a group with too few rows has no marker
    assert trace["x"] == rows["sex"].tolist()
    assert trace["y"] == pd.to_numeric(rows["estimate"]).tolist()
    assert (
        trace["error_y"]["array"]
        == (pd.to_numeric(rows["ci_upper"]) - pd.to_numeric(rows["estimate"])).tolist()
    )


def test_a_column_with_ten_percent_missing_values_is_summarised_not_refused(db, tmp_path):
    """hours-per-week declared "missing": "cell", every 10th value blanked: the release runs,
    over the present values, and the preview, the manifest and the charts say they were left
    out."""
    table = pd.read_csv(SMALL_ADULT)
    table["hours-per-week"] = table["hours-per-week"].astype("Int64")
    table.loc[table.index % 10 == 0, "hours-per-week"] = pd.NA
    path = tmp_path / "adult_missing.csv"
    table.to_csv(path, index=False)
    schema = {
        **DEMO_SCHEMA,
        "columns": [
            {**c, "missing": "cell"} if c["name"] == "hours-per-week" else c
            for c in DEMO_SCHEMA["columns"]
        ],
    }
    owner = make_user("owner")
    dataset = make_dataset(owner, schema=schema, path=path)
    client = client_for(owner)
    post = {**POST, "stats_kinds": ["count", "mean", "std", "median"]}
    estimate = client.get(reverse("release_preview", args=[dataset.pk]), post).json()
    assert estimate["ok"], estimate
    assert any("hours-per-week are left out" in line for line in estimate["accuracy"])
    post_new_release(client, dataset.pk, post)
    release = run_now(Release.objects.get())
    assert release.manifest["parameters"]["missing_values_left_out"] == ["hours-per-week"]
    out = packaging.read_csv((packaging.output_dir(release) / "statistics.csv").read_bytes())
    hours = out[(out["column"] == "hours-per-week") & (out["statistic"] == "mean")]
    assert len(hours) == 3
    numbers = hours[hours["estimate"] != ""][["estimate", "ci_lower", "ci_upper"]].astype(float)
    assert (numbers["ci_lower"] <= numbers["estimate"]).all()
    assert (numbers["estimate"] <= numbers["ci_upper"]).all()
    detail = client.get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "Missing values left out." in detail
