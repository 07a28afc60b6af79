"""Issue 43 item 2 in the portal: the custodian chooses what one "estimate for me" spends, and
every choice says, before anything is spent, what it can do (bounds: how many values they cut off
at most on average; categories: the fewest rows a category needs to be found); δ is explained
where it is set, and what δ = 0 switches off.

Before: every estimate spent 1% of the budget (ε = 0.01 on a budget of 1), its button said only
what it cost, and "δ = 0 (leave 0 if unsure)" switched category discovery off with no word.
"""

from decimal import Decimal

import numpy as np
import pandas as pd
import pytest
from django.urls import reverse

from dpportal import services
from dpportal.models import BudgetLedgerEntry, Release
from mechanisms import public_bounds
from tests.helpers import client_for, make_user

pytestmark = pytest.mark.django_db

ROWS = 3000


@pytest.fixture
def owner():
    return make_user("alice")


def table_dataset(owner, tmp_path, *, delta_total="0.00001", neighbouring="replace-one", seed=5):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "income": rng.lognormal(10, 1, ROWS).round(2),
            "group": rng.choice(["Alpha", "Beta", "Gamma"], ROWS, p=[0.6, 0.39, 0.01]),
        }
    )
    path = tmp_path / f"table-{seed}.csv"
    frame.to_csv(path, index=False)
    return services.dataset_create_from_path(
        owner=owner,
        name="Table",
        source_path=path,
        epsilon_total="1",
        delta_total=delta_total,
        neighbouring=neighbouring,
    )


def estimate(client, dataset, index, kind, **spend):
    data = {"estimate": f"{index}:{kind}"} | spend
    return client.post(
        reverse("dataset_dp_estimate", args=[dataset.pk]), data, HTTP_ACCEPT="application/json"
    )


def schema_page(owner, dataset) -> str:
    response = client_for(owner).get(reverse("dataset_schema", args=[dataset.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_custodian_chooses_the_spend_and_the_ledger_records_it_exactly(owner, tmp_path):
    dataset = table_dataset(owner, tmp_path)
    client = client_for(owner)
    bounds = estimate(client, dataset, 0, "numeric", spend_numeric="20").json()
    assert bounds["ok"] and "spent ε = 0.2" in bounds["text"], bounds
    found = estimate(client, dataset, 1, "categorical", spend_categorical="50").json()
    assert found["ok"] and "spent ε = 0.5" in found["text"], found
    ledger = BudgetLedgerEntry.objects.filter(dataset=dataset).order_by("pk")
    assert [(e.epsilon, e.delta) for e in ledger] == [
        (Decimal("0.2"), Decimal(0)),
        (Decimal("0.5"), Decimal("0.000005")),
    ]
    first = Release.objects.filter(dataset=dataset).order_by("pk").first()
    assert first.params["percent_of_total"] == "20"
    page = client.get(reverse("release_detail", args=[first.pk])).content.decode()
    assert "20% of the dataset" in page


@pytest.mark.parametrize("spend", ["7", "abc", "NaN", "sNaN", "100", "-1", "1e400"])
def test_a_spend_that_is_not_offered_is_refused_and_nothing_is_spent(owner, tmp_path, spend):
    dataset = table_dataset(owner, tmp_path)
    answer = estimate(client_for(owner), dataset, 0, "numeric", spend_numeric=spend)
    assert answer.status_code == 400
    assert "Choose how much to spend from the list (1%, 2%, 5%" in answer.json()["error"]
    assert not BudgetLedgerEntry.objects.exists() and not Release.objects.exists()


def test_before_spending_each_choice_states_what_it_can_do_in_shares_of_the_public_rows(
    owner, tmp_path
):
    """Replace-one without a person column: the row count is public, so shares are shown."""
    dataset = table_dataset(owner, tmp_path)
    text = schema_page(owner, dataset)
    for percent in ("1", "2", "5", "10", "20", "50"):
        assert f'name="spend_numeric" value="{percent}"' in text
        assert f'name="spend_categorical" value="{percent}"' in text
    clamp = public_bounds.bounds_plan(0.5, "replace-one").expected_clamp_rows()
    assert (
        f"50% of the budget (ε = 0.5): on average at most about 1 in "
        f"{ROWS / round(clamp + 0.5):,.0f} values, {round(clamp + 0.5):,} rows, set to the "
        "nearest bound" in text
    )
    assert "1% of the budget (ε = 0.01): too little for 3,000 rows" in text
    found = public_bounds.categories_found_rows(0.5, 5e-6, "replace-one")
    assert (
        f"50% of the budget (ε = 0.5, δ = 0.000005): finds every category held by at least "
        f"{found} rows ({found / ROWS:.1%} of the 3,000 rows), with 95% chance each" in text
    )
    assert 'value="1" checked' in text  # the default spend (DPPORTAL_ESTIMATE_PERCENT)


def test_without_a_public_row_count_the_statements_are_in_rows(owner, tmp_path):
    """Add-remove: the number of rows is private, so no share of it appears on the page."""
    dataset = table_dataset(owner, tmp_path, neighbouring="add-remove")
    text = schema_page(owner, dataset)
    assert "rows, set to the nearest bound" in text and "finds every category held by" in text
    assert "1 in " not in text and "3,000" not in text and "too little for" not in text


def test_what_the_estimate_cut_off_is_said_with_its_result(owner, tmp_path):
    dataset = table_dataset(owner, tmp_path)
    client = client_for(owner)
    bounds = estimate(client, dataset, 0, "numeric", spend_numeric="50").json()
    assert "on average at most about" in bounds["text"] and "nearest bound" in bounds["text"]
    found = estimate(client, dataset, 1, "categorical", spend_categorical="50").json()
    assert "finds every category held by at least" in found["text"]


def test_with_delta_zero_the_page_says_what_is_off_and_how_to_set_delta(owner, tmp_path):
    dataset = table_dataset(owner, tmp_path, delta_total="0")
    text = schema_page(owner, dataset)
    assert "with δ = 0 it is switched off" in text
    assert "set the total δ (for example 0.000001) under “Change the budget”" in text
    assert reverse("dataset_detail", args=[dataset.pk]) in text
    assert 'name="spend_categorical"' not in text
    answer = estimate(client_for(owner), dataset, 1, "categorical")
    assert answer.status_code == 400 and "under “Change the budget”" in answer.json()["error"]
    services.dataset_change_budget(
        dataset=dataset, user=owner, epsilon_total="1", delta_total="0.000001"
    )  # possible: no release or estimate yet
    assert 'name="spend_categorical"' in schema_page(owner, dataset)


def test_delta_is_explained_where_it_is_set(owner, tmp_path):
    upload = client_for(owner).get(reverse("dataset_upload")).content.decode()
    assert "δ = 0 keeps every release purely ε-private but switches off" in upload
    assert "finding categories for you on the schema page" in upload
    dataset = table_dataset(owner, tmp_path)
    detail = client_for(owner).get(reverse("dataset_detail", args=[dataset.pk])).content.decode()
    assert "δ = 0 switches off finding categories for you" in detail
    assert "after the first release or estimate δ can no longer be raised" in detail


def test_delta_cannot_be_raised_after_an_estimate_and_the_refusal_says_why(owner, tmp_path):
    """The total is the promise about all releases together: raising it, δ included, would weaken
    it for what is already released. The ledger is unchanged by the refusal."""
    dataset = table_dataset(owner, tmp_path, delta_total="0.000001")
    assert estimate(client_for(owner), dataset, 0, "numeric").json()["ok"]
    with pytest.raises(services.ServiceError, match="raising it, δ included, would weaken"):
        services.dataset_change_budget(
            dataset=dataset, user=owner, epsilon_total="1", delta_total="0.00001"
        )
    dataset.refresh_from_db()
    assert dataset.delta_total == Decimal("0.000001")
    assert BudgetLedgerEntry.objects.filter(dataset=dataset).count() == 1
