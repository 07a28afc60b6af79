"""The new-release form, its accuracy estimate, submission, the job page, progress and cancel."""

import math
import re
from datetime import timedelta
from decimal import Decimal

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import mechanisms
from dpportal import services
from dpportal.access import timing
from dpportal.models import AuditEvent, BudgetLedgerEntry, PrivacyBudget, Release
from dpportal.releases import engine as release_engine
from mechanisms import accuracy, plans
from tests.helpers import (
    client_for,
    histogram_post,
    make_dataset,
    make_demo_dataset,
    make_release,
    make_user,
    post_new_release,
)

pytestmark = pytest.mark.database

# ---------------------------------------------------------------- the form


def test_it_shows_the_form_with_cards_and_schema_columns(owner, dataset):
    response = client_for(owner).get(reverse("release_new", args=[dataset.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Noisy histogram" in page and "Good for:" in page
    assert 'value="age"' in page and 'value="sex"' in page
    assert 'value="fnlwgt"' not in page  # ignored in the schema: not releasable
    assert "sex (categorical, 2 categories + (other))" in page
    # preselected, so the estimate appears at once
    assert re.search(r'value="perturbed_histogram"\s+checked', page)
    assert "seed" not in page.lower()


def test_it_answers_404_to_auditors_and_strangers(dataset, auditor, stranger):
    for user in (auditor, stranger):
        client = client_for(user)
        assert client.get(reverse("release_new", args=[dataset.pk])).status_code == 404
        assert post_new_release(client, dataset.pk, histogram_post()).status_code == 404
        assert client.get(reverse("release_preview", args=[dataset.pk])).status_code == 404
    assert not Release.objects.exists()


def test_it_asks_for_a_confirmed_schema_first(owner):
    dataset = make_dataset(owner, schema=None)
    client = client_for(owner)
    response = client.get(reverse("release_new", args=[dataset.pk]))
    assert response.status_code == 200
    assert reverse("dataset_schema", args=[dataset.pk]) in response.content.decode()
    post_new_release(client, dataset.pk, histogram_post())
    assert not Release.objects.exists()


def test_it_creates_a_queued_release_and_redirects_to_its_page(owner, dataset):
    response = post_new_release(client_for(owner), dataset.pk, histogram_post())
    release = Release.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("release_detail", args=[release.pk])
    assert release.status == Release.Status.QUEUED
    assert release.params == {"rows": 200} and release.columns == ["age", "sex"]
    assert release.epsilon == Decimal("0.5") and release.delta == 0
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == Decimal("0.5")
    assert BudgetLedgerEntry.objects.get().kind == BudgetLedgerEntry.Kind.DEBIT


def test_it_refuses_overspending_and_says_what_is_left(owner, dataset):
    client = client_for(owner)
    post_new_release(client, dataset.pk, histogram_post(epsilon="0.75"))
    response = post_new_release(client, dataset.pk, histogram_post(epsilon="0.5"))
    assert response.status_code == 200
    assert "only ε = 0.25 is left of 1" in response.content.decode()
    assert Release.objects.count() == 1
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == Decimal("0.75")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("epsilon", "-1", "greater than or equal to 0.000001"),
        ("epsilon", "abc", "Enter a number"),
        ("rows", "0", "greater than or equal to 1"),
        ("columns", [], "This field is required"),
    ],
)
def test_it_explains_bad_input_on_the_form(owner, dataset, field, value, message):
    response = post_new_release(client_for(owner), dataset.pk, histogram_post(**{field: value}))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Release.objects.exists()


def test_it_never_takes_a_seed_from_the_request(owner, dataset):
    post_new_release(client_for(owner), dataset.pk, histogram_post(seed="7"))
    assert "seed" not in Release.objects.get().params


def test_it_forces_delta_to_zero_for_pure_mechanisms(owner):
    dataset = make_dataset(owner, delta_total="0.00001")
    post_new_release(client_for(owner), dataset.pk, histogram_post(delta="0.000001"))
    assert Release.objects.get().delta == 0


# ---------------------------------------------------------------- the estimate


def test_the_estimate_predicts_accuracy_and_budget_without_the_data(owner, monkeypatch):
    dataset = make_demo_dataset(owner)  # the full table: ~2,000 rows per combination

    def no_raw_data(*args, **kwargs):
        raise AssertionError("the estimate must not read the raw data")

    monkeypatch.setattr(release_engine, "load_columns", no_raw_data)
    monkeypatch.setattr("pandas.read_csv", no_raw_data)
    response = client_for(owner).get(
        reverse("release_preview", args=[dataset.pk]), histogram_post(epsilon="0.25")
    )
    result = response.json()
    assert response.status_code == 200 and result["ok"], result
    assert result["epsilon_left"] == "0.75" and result["fits"] is True
    noise = accuracy.discrete_laplace_std(2 / 0.25)
    assert f"±{noise:,.1f} rows" in result["accuracy"][0]
    assert "24 combinations (8 age bins × 2 declared sex values + (other))" in result["accuracy"][0]
    assert "error is under 1% of that" in result["accuracy"][1]  # ±11 rows of ~2,000


def test_the_estimate_warns_when_the_budget_does_not_fit(owner, dataset):
    result = (
        client_for(owner)
        .get(reverse("release_preview", args=[dataset.pk]), histogram_post(epsilon="3"))
        .json()
    )
    assert result["ok"] and result["fits"] is False and result["epsilon_left"] == "-2"


def test_the_estimate_lists_what_to_fix(owner, dataset):
    result = (
        client_for(owner)
        .get(reverse("release_preview", args=[dataset.pk]), histogram_post(epsilon=""))
        .json()
    )
    assert result["ok"] is False
    assert any(error.startswith("Privacy cost ε") for error in result["errors"])


def test_discrete_laplace_std_matches_samples_and_differs_from_continuous():
    """Sample size 200 000 per scale (seeded, so deterministic); the relative standard error of
    a Laplace-like sample std is about sqrt(5/(4n)) = 0.25%, so the 1% tolerance is 4 standard
    errors (false-alarm rate below 1e-4 for a fresh seed). The broken twin, the continuous
    Laplace std sqrt(2)*scale, is 4% off at scale 1 and must be caught."""
    rng = mechanisms.seeded_source(2026)
    for scale in (1.0, 4.0):
        samples = np.asarray(rng.discrete_laplace(scale, 200_000), dtype=float)
        predicted = accuracy.discrete_laplace_std(scale)
        assert abs(samples.std() / predicted - 1) < 0.01
    samples = np.asarray(rng.discrete_laplace(1.0, 200_000), dtype=float)
    assert abs(samples.std() / (math.sqrt(2) * 1.0) - 1) > 0.01


# ---------------------------------------------------------------- job page, progress, cancel


def test_the_job_page_shows_a_queued_release_with_progress_and_cancel(owner, dataset):
    release = make_release(owner, dataset)
    response = client_for(owner).get(reverse("release_detail", args=[release.pk]))
    page = response.content.decode()
    assert response.status_code == 200
    assert "Queued" in page and "<progress" in page and "Waiting for a worker" in page
    assert reverse("release_cancel", args=[release.pk]) in page
    assert 'id="progress-config"' in page


def test_progress_json_reports_stage_and_percent(owner, dataset, auditor, a_minute_later):
    release = make_release(owner, dataset, mechanism="mwem")
    Release.objects.filter(pk=release.pk).update(
        status=Release.Status.RUNNING,
        progress_done=3,
        progress_total=12,
        progress_stage="running",
        started_at=timezone.now(),
    )
    result = client_for(owner).get(reverse("release_progress", args=[release.pk])).json()
    assert result["status"] == "running" and result["stage"] == "Round 3 of 12"
    assert result["percent"] == 25 and result["terminal"] is False
    result = client_for(auditor).get(reverse("release_progress", args=[release.pk])).json()
    assert result == {
        "status": "running",
        "status_label": "Running",
        "stage": "Running",
        "done": 0,
        "total": 0,
        "percent": 0,
        "elapsed": "about 1 min",
        "terminal": False,
    }  # coarse: no steps, whole minutes
    stranger = make_user("stranger")
    assert (
        client_for(stranger).get(reverse("release_progress", args=[release.pk])).status_code == 404
    )
    Release.objects.filter(pk=release.pk).update(mechanism="range_count")
    result = client_for(owner).get(reverse("release_progress", args=[release.pk])).json()
    assert result["stage"] == "Running: step 3 of 12"
    Release.objects.filter(pk=release.pk).update(
        progress_stage="reading data", progress_done=0, progress_total=1
    )
    result = client_for(owner).get(reverse("release_progress", args=[release.pk])).json()
    assert result["stage"] == "Reading data" and result["percent"] == 0


def test_cancelling_a_queued_release_refunds_its_budget(owner, dataset):
    release = make_release(owner, dataset)
    response = client_for(owner).post(reverse("release_cancel", args=[release.pk]))
    assert response.status_code == 302
    release.refresh_from_db()
    dataset.refresh_from_db()
    assert release.status == Release.Status.CANCELLED
    assert dataset.epsilon_spent == 0
    kinds = list(release.ledger.values_list("kind", flat=True))
    assert kinds == [BudgetLedgerEntry.Kind.DEBIT, BudgetLedgerEntry.Kind.REFUND]
    actions = set(AuditEvent.objects.filter(release=release).values_list("action", flat=True))
    assert {AuditEvent.Action.RELEASE_CANCELLED, AuditEvent.Action.RELEASE_REFUNDED} <= actions
    page = client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "was given back to the dataset" in page


def test_only_queued_releases_can_be_cancelled_and_only_by_the_owner(owner, dataset, auditor):
    release = make_release(owner, dataset)
    assert client_for(auditor).post(reverse("release_cancel", args=[release.pk])).status_code == 404
    Release.objects.filter(pk=release.pk).update(status=Release.Status.RUNNING)
    response = client_for(owner).post(reverse("release_cancel", args=[release.pk]), follow=True)
    assert "Only a queued release can be cancelled; this one is running." in (
        response.content.decode()
    )
    release.refresh_from_db()
    assert release.status == Release.Status.RUNNING
    assert not release.ledger.filter(kind=BudgetLedgerEntry.Kind.REFUND).exists()


def test_cancel_needs_post(owner, dataset):
    release = make_release(owner, dataset)
    assert client_for(owner).get(reverse("release_cancel", args=[release.pk])).status_code == 405


def test_a_failed_release_says_why_and_that_its_budget_stays_spent(owner, dataset):
    release = make_release(owner, dataset)
    Release.objects.filter(pk=release.pk).update(
        status=Release.Status.FAILED,
        data_was_read=True,
        error_message="column 'age' has 3 missing or non-numeric values (first at row 7)",
    )
    page = client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "This release failed." in page and "first at row 7" in page
    assert "stays spent" in page


def test_job_pages_answer_404_to_strangers(owner, dataset, stranger):
    release = make_release(owner, dataset)
    client = client_for(stranger)
    assert client.get(reverse("release_detail", args=[release.pk])).status_code == 404
    assert client.get(reverse("release_detail", args=[999])).status_code == 404
    anonymous = Client().get(reverse("release_detail", args=[release.pk]))
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))


def test_the_smoothed_histogram_gets_a_balanced_default_row_count(owner, dataset):
    client = client_for(owner)
    post = histogram_post(mechanism="smoothed_histogram", rows="", epsilon="1")
    result = client.get(reverse("release_preview", args=[dataset.pk]), post).json()
    assert result["ok"] and "spread evenly over all cells" in result["accuracy"][0]
    post_new_release(client, dataset.pk, post)
    rows = Release.objects.get().params["rows"]
    assert rows == plans.smoothed_default_rows(dataset.row_count, 24, 1.0)
    assert 1 <= rows < dataset.row_count


def test_smoothed_default_rows_balances_mixing_against_sampling():
    from mechanisms.histogram import min_admissible_mix

    rows = plans.smoothed_default_rows(48842, 24, 1.0)
    assert 0 < min_admissible_mix(1.0, 48842, 24, rows) < 0.5
    more = plans.smoothed_default_rows(48842, 24, 4.0)
    assert more > rows  # a larger budget affords more rows


def test_the_smoothed_histogram_is_refused_when_the_row_count_is_private(owner, dataset):
    PrivacyBudget.objects.filter(pk=dataset.budget_id).update(neighbouring="add-remove")
    response = post_new_release(
        client_for(owner), dataset.pk, histogram_post(mechanism="smoothed_histogram")
    )
    assert "needs the number of rows to be public" in response.content.decode()
    assert not Release.objects.exists()


def test_settings_the_mechanism_would_refuse_are_caught_before_spending(
    owner, dataset, monkeypatch
):
    def refuse(*args, **kwargs):
        raise mechanisms.MechanismError("rows (0) must be a whole number >= 1")

    monkeypatch.setattr(release_engine, "expected_accuracy", refuse)
    response = post_new_release(client_for(owner), dataset.pk, histogram_post())
    assert "These settings cannot work: rows (0) must be a whole number &gt;= 1" in (
        response.content.decode()
    )
    assert not Release.objects.exists()
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == 0


@pytest.mark.parametrize(
    "remaining, suggested",
    [
        ("10", "1"),
        ("1", "0.25"),
        ("0.3", "0.075"),
        ("0.123", "0.03"),
        ("0", None),
    ],
)
def test_the_form_suggests_a_quarter_of_what_is_left_at_most_one(remaining, suggested):
    from dpportal.releases.forms import suggested_epsilon

    result = suggested_epsilon(Decimal(remaining))
    assert (str(result) if result is not None else None) == suggested


def test_a_deleted_dataset_takes_no_new_releases(owner, dataset):
    services.dataset_delete(dataset=dataset, user=owner)
    client = client_for(owner)
    page = client.get(reverse("release_new", args=[dataset.pk])).content.decode()
    assert "This dataset has been deleted" in page and "<form" not in page.split("<main")[1]
    post_new_release(client, dataset.pk, histogram_post())
    assert not Release.objects.exists()


def test_auditors_see_a_status_change_only_once_its_minute_has_passed(
    owner, dataset, auditor, monkeypatch
):
    """T10: polling the job page or its progress must not time a run to the second."""
    release = make_release(owner, dataset)
    minute = timing.last_whole_minute()
    Release.objects.filter(pk=release.pk).update(
        status=Release.Status.DONE,
        started_at=minute + timedelta(seconds=7),
        finished_at=minute + timedelta(seconds=19),
    )
    progress = reverse("release_progress", args=[release.pk])
    seen = []
    for now in (minute, minute + timedelta(minutes=1)):
        monkeypatch.setattr(timing, "last_whole_minute", lambda now=now: now)
        seen.append([client_for(who).get(progress).json()["status"] for who in (auditor, owner)])
    assert seen == [["queued", "done"], ["done", "done"]]
    monkeypatch.setattr(timing, "last_whole_minute", lambda: minute)
    page = client_for(auditor).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "Queued" in page and "Downloads" not in page
    assert (
        client_for(auditor).get(reverse("release_download_zip", args=[release.pk])).status_code
        == 404
    )
    for url in (
        reverse("dataset_detail", args=[dataset.pk]),
        reverse("release_list"),
        reverse("release_list") + "?status=queued",
    ):
        assert [
            ("<td>Queued</td>" in client_for(who).get(url).content.decode())
            for who in (auditor, owner)
        ] == [True, False], url
    rows = client_for(auditor).get(reverse("release_list_csv"), {"status": "done"})
    assert rows.content.decode().count("\r\n") == 1  # the header only


def test_only_the_owner_sees_why_a_release_failed(owner, monkeypatch, tmp_path, a_minute_later):
    """The mechanism's reason quotes the data (how many values fall outside the declared
    categories, and the first row); auditors get a generic reason on every page."""
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    path = tmp_path / "codes.csv"
    path.write_text("code\nA\nB\nZ\nZ\n")
    schema = {
        "columns": [
            {"name": "code", "type": "categorical", "categories": ["A", "B"], "unknown": "reject"}
        ]
    }
    dataset = make_dataset(owner, schema=None, path=path)
    # Confirmation now refuses such a schema; one confirmed before it checked the data remains.
    type(dataset).objects.filter(pk=dataset.pk).update(
        schema=schema, schema_confirmed_at=timezone.now()
    )
    dataset.refresh_from_db()
    auditor = make_user("auditor")
    dataset.auditors.add(auditor)
    release = make_release(owner, dataset, columns=["code"])
    services.release_run(release_id=release.pk)
    assert Release.objects.get(pk=release.pk).status == Release.Status.FAILED
    detail = "2 values outside its declared categories (first on data row 3)"
    pages = [
        reverse("release_detail", args=[release.pk]),
        reverse("audit_log"),
        reverse("audit_log_csv"),
    ]
    owner_saw = [detail in client_for(owner).get(url).content.decode() for url in pages]
    auditor_pages = [client_for(auditor).get(url).content.decode() for url in pages]
    assert owner_saw == [True, True, True]
    assert [("outside its declared" in page, "data row 3" in page) for page in auditor_pages] == [
        (False, False)
    ] * 3
    assert "The release failed; the custodian can see why." in auditor_pages[0]
