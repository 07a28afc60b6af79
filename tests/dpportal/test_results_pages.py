"""Results of a finished release: summary, preview, charts, and the custodian-only comparison,
which only the owner sees. Releases run synchronously through services.release_run."""

import csv
import io
import json
import re
import stat
from datetime import timedelta
from functools import partial

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from dpportal import services
from dpportal.core import files, object_store
from dpportal.core.files import dataset_path
from dpportal.models import Release
from dpportal.releases import packaging, utility
from dpportal.templatetags.portal_labels import parameter_text, short_number
from tests.conftest import wait_until
from tests.helpers import (
    chart_figures,
    client_for,
    histogram_post,
    make_dataset,
    make_release,
    make_user,
    post_new_release,
    run_now,
)

CUSTODIAN_BADGE = "Custodian-only: not part of the release"


@pytest.fixture
def done_release(owner, dataset):
    return run_now(make_release(owner, dataset, params={"rows": 60}))


def test_the_owner_sees_summary_preview_charts_and_the_custodian_box(owner, done_release):
    response = client_for(owner).get(reverse("release_detail", args=[done_release.pk]))
    page = response.content.decode()
    assert response.status_code == 200
    for text in (
        "Summary",
        "Noisy histogram",
        "Replace one row",
        "Requested by",
        "owner",
        "Preview of synthetic.csv",
        "Rows 1–25 of 60",
        CUSTODIAN_BADGE,
        done_release.dataset.sha256,
        "Total variation distance",
    ):
        assert text in page, text
    figures = chart_figures(page)
    names = [trace.get("name") for figure in figures for trace in figure["data"]]
    assert "Original (custodian-only)" in names and "Release" in names
    assert any(trace["type"] == "heatmap" for figure in figures for trace in figure["data"])


def test_the_results_page_is_readable(owner, done_release):
    """Contents list, settings in words, preview numbers rounded (the file keeps them in full)."""
    page = client_for(owner).get(reverse("release_detail", args=[done_release.pk])).content.decode()
    assert 'aria-label="On this page"' in page and 'href="#custodian-heading"' in page
    assert "synthetic rows: 60" in page and "drawn evenly at random within its bin" in page
    preview = page[page.index('id="preview-heading"') : page.index("Preview pages")]
    assert not re.search(r"<td>-?\d+\.\d{3,}", preview)
    full = packaging.package_file(done_release, "synthetic.csv").decode()
    # issue 14: the demo's ages are declared whole numbers, so the file holds whole ages only
    rows = list(csv.reader(io.StringIO(full)))[1:]
    odd = [
        row
        for row in rows
        if not (re.fullmatch(r"\d+", row[0]) and re.fullmatch(r"\w+|\(other\)", row[1]))
    ]
    assert rows and not odd, odd[:5]


def test_parameters_in_words():
    workload = json.dumps({"queries": [{"type": "marginals", "k": 2}]})
    assert parameter_text("workload", workload) == "patterns: all pairs of columns"
    assert parameter_text("grid", "[8, 16]") == "grid points per column: 8 × 16"
    assert parameter_text("mechanism", "tree") == "method: a hierarchy of noisy counts"
    shares = "[0.19999999999999998, 0.30000000000000004]"  # a statistics release's epsilons
    assert parameter_text("epsilon_per_statistic", shares) == (
        "ε per statistic (per row, in the order above): 0.2 × 0.3"
    )
    assert parameter_text("level", 0.95) == "confidence of each interval: 95%"
    assert short_number("41.123456789") == "41.12" and short_number("(other)") == "(other)"
    # MWEM releases made before junction trees recorded a speed cap: still said in words
    note = "In 13 of 16 rounds the speed cap left out patterns"
    assert parameter_text("speed_cap", {"cells": 4194304, "note": note}) == note
    assert parameter_text("speed_cap", {"cells": None}).startswith("speed cap: lifted")
    assert short_number("12") == "12" and short_number("3.5") == "3.5"


def test_auditors_see_only_public_parts(auditor, done_release, a_minute_later):
    response = client_for(auditor).get(reverse("release_detail", args=[done_release.pk]))
    page = response.content.decode()
    assert response.status_code == 200
    assert "Preview of synthetic.csv" in page and "Summary" in page
    assert CUSTODIAN_BADGE not in page and "Original" not in page
    assert done_release.dataset.sha256 not in page
    assert "Total variation" not in page and "utility-report" not in page
    assert re.search(r"Run time</th><td>about \d+ min", page)  # rounded for non-owners
    assert chart_figures(page)  # the release's own charts are public


def test_the_preview_is_paginated(owner, done_release):
    client = client_for(owner)
    url = reverse("release_detail", args=[done_release.pk])
    page = client.get(url, {"page": 3}).content.decode()
    assert "Rows 51–60 of 60" in page and "Page 3 of 3" in page
    page = client.get(url, {"file": "noisy_counts.csv", "page": 99}).content.decode()
    assert "Preview of noisy_counts.csv" in page and "Rows 1–24 of 24" in page
    assert "Rows 1–25 of 60" in client.get(url, {"page": "x"}).content.decode()


def test_the_utility_report_is_stored_privately_apart_from_the_package(done_release):
    path = files.utility_report_path(done_release)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    from dpportal.releases import packaging

    package_dir = packaging.output_dir(done_release)
    assert package_dir not in path.parents
    report = utility.load_report(done_release)
    assert report["rows"] == done_release.dataset.row_count
    age = next(entry for entry in report["columns"] if entry["column"] == "age")
    assert 0 <= age["tvd"] <= 1 and age["ks"] is not None
    assert abs(sum(age["original"]) - 1) < 1e-9
    assert report["cells"]["cells"] == 24


def test_a_release_runs_end_to_end_through_a_real_worker(celery_worker_process):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    client = client_for(owner)
    response = post_new_release(client, dataset.pk, histogram_post())
    assert response.status_code == 302
    release = Release.objects.get()
    done = wait_until(
        lambda: Release.objects.filter(pk=release.pk, status__in=Release.TERMINAL).first(),
        timeout=90,
    )
    assert done.status == Release.Status.DONE, done.error_message
    progress = client.get(reverse("release_progress", args=[release.pk])).json()
    assert progress["terminal"] and progress["percent"] == 100
    wait_until(lambda: utility.load_report(done), timeout=30)
    page = client.get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "Rows 1–25 of 200" in page and CUSTODIAN_BADGE in page
    download = client.get(reverse("release_download_zip", args=[release.pk]))
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"


def test_a_missing_comparison_is_made_again_then_said_to_have_failed(celery_worker_process):
    """A custodian-only comparison whose first try failed, or whose worker died, used to be
    "being computed ... in a moment" forever. Two minutes after the release the owner's page
    queues it again on the real worker, which makes it; one that cannot be made (its raw data
    gone) is said to have failed after three tries in all."""
    owner = make_user("owner")
    client = client_for(owner)
    assert post_new_release(client, make_dataset(owner).pk, histogram_post()).status_code == 302
    release = wait_until(
        lambda: Release.objects.filter(status__in=Release.TERMINAL).first(), timeout=90
    )
    wait_until(lambda: utility.load_report(release), timeout=30)
    page = partial(client.get, reverse("release_detail", args=[release.pk]))
    files.utility_report_path(release).unlink()
    assert "is being computed right after the" in page().content.decode()
    Release.objects.filter(pk=release.pk).update(finished_at=timezone.now() - timedelta(minutes=3))
    assert "it is being computed again" in page().content.decode()
    wait_until(lambda: utility.load_report(release), timeout=30)
    assert CUSTODIAN_BADGE in page().content.decode() and "Download this comparison" in (
        page().content.decode()
    )

    files.utility_report_path(release).unlink()
    object_store.remove(dataset_path(release.dataset))  # every try now fails
    cache.delete(f"utility-report-again:{release.pk}")  # as two minutes later
    assert "it is being computed again" in page().content.decode()  # the third try
    cache.delete(f"utility-report-again:{release.pk}")
    assert "could not be computed, after three tries" in page().content.decode()
    assert utility.load_report(release) is None


def test_a_smoothed_histogram_release_shows_its_comparison(owner, dataset):
    release = run_now(
        make_release(
            owner, dataset, mechanism="smoothed_histogram", params={"rows": 300}, epsilon="1"
        )
    )
    page = client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "Smoothed histogram" in page and "Rows 1–25 of 300" in page
    report = utility.load_report(release)
    assert report["synthetic_rows"] == 300 and report["cells"] is None
    assert {entry["column"] for entry in report["columns"]} == {"age", "sex"}


def test_deleting_the_dataset_removes_the_custodian_only_comparison(
    owner, dataset, done_release, django_capture_on_commit_callbacks
):
    path = files.utility_report_path(done_release)
    assert path.exists()
    with django_capture_on_commit_callbacks(execute=True):
        services.dataset_delete(dataset=dataset, user=owner)
    assert not path.exists()
    page = client_for(owner).get(reverse("release_detail", args=[done_release.pk]))
    assert page.status_code == 200 and "Preview of synthetic.csv" in page.content.decode()
    assert "deleted together with the dataset's raw data" in page.content.decode()


def test_the_worker_prepares_the_zip_and_chart_data_after_publishing(
    prebuild_packages, done_release
):
    from dpportal.releases import kinds, packaging

    cache = packaging.cache_dir(done_release)
    names = sorted(path.name for path in cache.iterdir())
    key = packaging.publishing_key(done_release)
    assert names == [
        f"charts-v{kinds.CHARTS_LAYOUT}.json",
        f"package-v{packaging.PACKAGE_LAYOUT}-{key}.zip",
    ]
    assert all(stat.S_IMODE((cache / name).stat().st_mode) == 0o600 for name in names)


def test_without_the_prebuild_the_zip_is_built_on_first_download(owner, done_release):
    """The test settings' default (DPPORTAL_PREBUILD_PACKAGES=0): chart data only after the
    release; the first download builds the zip and keeps it."""
    from dpportal.releases import kinds

    cache = packaging.cache_dir(done_release)
    assert sorted(path.name for path in cache.iterdir()) == [f"charts-v{kinds.CHARTS_LAYOUT}.json"]
    response = client_for(owner).get(reverse("release_download_zip", args=[done_release.pk]))
    assert response.status_code == 200
    kept = (
        cache / f"package-v{packaging.PACKAGE_LAYOUT}-{packaging.publishing_key(done_release)}.zip"
    )
    assert b"".join(response.streaming_content) == kept.read_bytes()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
