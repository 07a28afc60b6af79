"""Issue 14 item 5: the schema page shows no raw minimum, maximum or category; "estimate for me"
spends exactly its stated share of the budget, on the ledger and in the audit log like any
release, and its values are labelled "DP estimate"."""

import json
import re
from dataclasses import replace
from decimal import ROUND_DOWN, Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from django.urls import reverse

from dpportal import services
from dpportal.api import openapi
from dpportal.datasets.schema_proposals import public_proposal
from dpportal.models import AuditEvent, BudgetLedgerEntry, Release
from dpportal.releases.catalogue import cards
from mechanisms.__main__ import subcommands
from mechanisms.catalogue import CATALOGUE, SCHEMA_ESTIMATE
from tests.helpers import client_for, make_user

pytestmark = pytest.mark.django_db

# Canaries: the column's true minimum and maximum, and a category held by one row. None of them
# may appear on the schema page, before or after an estimate.
RAW_MIN, RAW_MAX, RAW_CATEGORY = "-77.125", "98765.4375", "Qzxv-canary-category"
REQUESTED_SHARE = Decimal("0.01")  # DPPORTAL_ESTIMATE_PERCENT = 1 (the default)


@pytest.fixture
def owner():
    return make_user("alice")


def canary_dataset(owner, tmp_path, *, epsilon_total="1", delta_total="0"):
    rng = np.random.default_rng(5)
    income = rng.uniform(100, 9000, 3000).round(2)
    income[7], income[8] = float(RAW_MIN), float(RAW_MAX)
    group = rng.choice(["Alpha", "Beta"], 3000).astype(object)
    group[11] = RAW_CATEGORY
    path = tmp_path / "canary.csv"
    pd.DataFrame({"income": income, "group": group}).to_csv(path, index=False)
    return services.dataset_create_from_path(
        owner=owner,
        name="Canary",
        source_path=path,
        epsilon_total=epsilon_total,
        delta_total=delta_total,
    )


def schema_page(owner, dataset) -> str:
    response = client_for(owner).get(reverse("dataset_schema", args=[dataset.pk]))
    assert response.status_code == 200
    return response.content.decode()


def assert_no_canary(text: str) -> None:
    for raw in (RAW_MIN, RAW_MAX, RAW_CATEGORY, "-77.12", "98765"):
        assert raw not in text, raw


def estimate(owner, dataset, index, kind, as_json=True, client=None):
    headers = {"HTTP_ACCEPT": "application/json"} if as_json else {}
    return (client or client_for(owner)).post(
        reverse("dataset_dp_estimate", args=[dataset.pk]),
        {"estimate": f"{index}:{kind}"},
        **headers,
    )


def test_the_schema_page_shows_no_raw_minimum_maximum_or_category(owner, tmp_path):
    dataset = canary_dataset(owner, tmp_path)
    assert (
        float(RAW_MAX)
        in pd.read_parquet(services.datasets.files.dataset_path(dataset))["income"].tolist()
    )  # the canaries are really in the stored table
    text = schema_page(owner, dataset)
    assert_no_canary(text)
    assert '<option value="numeric" selected>' in text  # types are still proposed
    assert '<option value="categorical" selected>' in text


def test_a_profile_stored_with_raw_values_still_shows_none_of_them(owner, tmp_path):
    """Profiles written before this rule held the data's extremes and categories."""
    dataset = canary_dataset(owner, tmp_path)
    dataset.profile["proposals"] = [
        {"name": "income", "type": "numeric", "lower": float(RAW_MIN), "upper": float(RAW_MAX),
         "bins": 10, "from_data": ["lower", "upper"]},
        {"name": "group", "type": "categorical", "categories": ["Alpha", "Beta", RAW_CATEGORY],
         "unknown": "other", "from_data": ["categories"]},
    ]  # fmt: skip
    dataset.save(update_fields=["profile"])
    assert_no_canary(schema_page(owner, dataset))
    assert public_proposal(dataset.profile["proposals"][0]) == {
        "name": "income",
        "type": "numeric",
        "bins": 10,
    }


@pytest.mark.parametrize("epsilon_total", ["1", "0.3", "7.123456"])
def test_a_bounds_estimate_spends_exactly_its_stated_share_on_the_ledger(
    owner, tmp_path, epsilon_total
):
    dataset = canary_dataset(owner, tmp_path, epsilon_total=epsilon_total)
    share = Decimal(epsilon_total) * REQUESTED_SHARE  # 1% of the total; the ledger keeps 6
    requested = share.quantize(Decimal("0.000001"), rounding=ROUND_DOWN)  # decimals, never more
    assert requested <= share < requested + Decimal("0.000001")
    text = schema_page(owner, dataset)
    assert f"1% of the budget (ε = {requested.normalize():f})" in text  # before spending
    response = estimate(owner, dataset, 0, "numeric")
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["ok"] and data["kind"] == "numeric" and "DP estimate" in data["text"]
    ledger = list(BudgetLedgerEntry.objects.filter(dataset=dataset))
    assert [(e.kind, e.epsilon, e.delta) for e in ledger] == [("debit", requested, Decimal(0))]
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == requested
    release = ledger[0].release
    assert (release.mechanism, release.status, release.columns) == (
        "dp_schema_estimate",
        "done",
        ["income"],
    )
    actions = list(
        AuditEvent.objects.filter(release=release).values_list("action", flat=True).order_by("pk")
    )
    assert actions == ["release_requested", "release_done"]


def test_a_category_estimate_spends_the_share_of_delta_too(owner, tmp_path):
    dataset = canary_dataset(owner, tmp_path, epsilon_total="10", delta_total="0.00001")
    response = estimate(owner, dataset, 1, "categorical")
    data = response.json()
    assert data["ok"] and data["categories"] == ["Alpha", "Beta"]  # not the one-row canary
    entry = BudgetLedgerEntry.objects.get(dataset=dataset)
    assert (entry.epsilon, entry.delta) == (Decimal("0.1"), Decimal("0.00001") * REQUESTED_SHARE)


def test_categories_need_delta_and_nothing_is_spent_without(owner, tmp_path):
    dataset = canary_dataset(owner, tmp_path)
    text = schema_page(owner, dataset)
    assert "this dataset has δ = 0, so choose a public list or paste one" in text
    response = estimate(owner, dataset, 1, "categorical")
    assert response.status_code == 400 and "needs δ > 0" in response.json()["error"]
    assert not BudgetLedgerEntry.objects.exists() and not Release.objects.exists()


def test_an_estimate_that_does_not_fit_the_budget_spends_nothing(owner, tmp_path):
    dataset = canary_dataset(owner, tmp_path)
    budget = dataset.budget
    budget.epsilon_spent = Decimal("0.995")
    budget.save()
    client = client_for(owner)
    response = estimate(owner, dataset, 0, "numeric", as_json=False, client=client)
    assert response.status_code == 302
    page = client.get(response.url).content.decode()
    assert "Nothing was spent" in page and "Not enough privacy budget" in page
    assert not BudgetLedgerEntry.objects.exists() and not Release.objects.exists()


def test_an_estimate_fills_the_form_labelled_dp_estimate_and_never_the_canary(owner, tmp_path):
    dataset = canary_dataset(owner, tmp_path, epsilon_total="10", delta_total="0.0001")
    assert estimate(owner, dataset, 0, "numeric", as_json=False).status_code == 302
    assert estimate(owner, dataset, 1, "categorical", as_json=False).status_code == 302
    text = schema_page(owner, dataset)
    assert_no_canary(text)
    found = services.latest_estimates(dataset)["income"]
    for bound in ("lower", "upper"):  # as numbers: ':g' writes 5e9 as 5e+09, the form not
        shown = re.search(rf'name="form-0-{bound}" value="([^"]*)"', text)
        assert shown and float(shown.group(1)) == found[bound], (bound, found[bound])
    assert text.count('<span class="dp-estimate-label">DP estimate</span> ') == 2
    assert "Alpha\nBeta</textarea>" in text


def test_the_estimate_release_page_shows_its_result_and_has_no_files(owner, tmp_path):
    dataset = canary_dataset(owner, tmp_path)
    estimate(owner, dataset, 0, "numeric")
    release = Release.objects.get()
    client = client_for(owner)
    page = client.get(reverse("release_detail", args=[release.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "DP estimate for the schema of column income" in text and "1% of the dataset" in text
    assert_no_canary(text + json.dumps(release.manifest))
    assert client.get(reverse("release_download_zip", args=[release.pk])).status_code == 404
    ledger = client.get(reverse("dataset_ledger", args=[dataset.pk])).content.decode()
    assert "DP estimate of a column" in ledger


@pytest.mark.parametrize(
    "delta_total, recorded",
    [("0.00000000000004", "0.000000000000001"), ("0.000000000000123", "0.000000000000002")],
)
def test_an_estimates_delta_is_rounded_up_and_the_mechanism_spends_at_most_the_ledger(
    owner, tmp_path, monkeypatch, delta_total, recorded
):
    """Issue 41 item 5a: 1% of δ_total = 4e-14 is 4e-16, below the ledger's 15 decimals; it was
    recorded as 0. Now δ is rounded up (ε down), and the mechanism runs at what the ledger holds
    or less."""
    seen = {}
    row = CATALOGUE[SCHEMA_ESTIMATE]  # the estimate runs as this catalogue row

    def spy(inputs):
        seen.update(epsilon=inputs.epsilon, delta=inputs.delta)
        return row.run(inputs)

    monkeypatch.setitem(CATALOGUE, SCHEMA_ESTIMATE, replace(row, run=spy))
    dataset = canary_dataset(owner, tmp_path, epsilon_total="1.2345678", delta_total=delta_total)
    assert estimate(owner, dataset, 1, "categorical").json()["ok"]
    entry = BudgetLedgerEntry.objects.get(dataset=dataset)
    share = Decimal(delta_total) * REQUESTED_SHARE
    assert entry.delta == Decimal(recorded) and entry.delta >= share > 0
    assert entry.epsilon == Decimal("0.012345")  # 1% of 1.2345678, rounded down
    assert Fraction(seen["delta"]) <= Fraction(entry.delta)  # the mechanism: at most the ledger
    assert Fraction(seen["epsilon"]) <= Fraction(entry.epsilon)
    dataset.refresh_from_db()
    assert dataset.delta_spent == entry.delta


def test_the_estimate_is_a_catalogue_row_offered_on_the_schema_page_only(owner, tmp_path):
    """Issue 42 item 6: one name and one row for the estimate in the catalogue, the ledger, the
    API and the command line; not a kind of release the release form or the API offers."""
    dataset = canary_dataset(owner, tmp_path)
    assert estimate(owner, dataset, 0, "numeric").json()["ok"]
    release = Release.objects.get(dataset=dataset)
    assert release.mechanism == SCHEMA_ESTIMATE == release.manifest["mechanism"]
    assert release.manifest["guarantee"]["definition"] == "pure epsilon-DP"
    assert BudgetLedgerEntry.objects.get(release=release).release.mechanism == SCHEMA_ESTIMATE
    title = CATALOGUE[SCHEMA_ESTIMATE].title
    page = client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert title.replace("'", "&#x27;") in page  # the catalogue's title names it
    assert SCHEMA_ESTIMATE not in {card.name for card in cards()}
    assert SCHEMA_ESTIMATE not in openapi.document()["components"]["schemas"]["Mechanism"]["enum"]
    assert subcommands()["dp-schema-estimate"] is CATALOGUE[SCHEMA_ESTIMATE]
    files = client_for(owner).get(reverse("release_download_zip", args=[release.pk]))
    assert files.status_code == 404  # its result is on its page; it has no package
