"""The portal refuses epsilon = inf (and NaN) with words before any budget is spent.

Only the Python API takes an infinite epsilon (no noise, for tests); see
tests/mechanisms/test_infinite_epsilon.py for the files such a release writes.
"""

import pytest
from django.urls import reverse

from dpportal.models import BudgetLedgerEntry, Release
from tests.dpportal.test_api import RELEASE, api, post_json, token_from_page

pytestmark = [pytest.mark.database, pytest.mark.django_db]


@pytest.mark.parametrize("epsilon", ["inf", "Infinity", "NaN", "1e999"])
def test_the_api_refuses_an_infinite_epsilon_and_spends_nothing(owner, small_dataset, epsilon):
    client = api(token_from_page(owner))
    url = reverse("api_dataset_releases", args=[small_dataset.pk])
    response = post_json(client, url, RELEASE | {"epsilon": epsilon}, HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 400, response.content
    assert response.json()["errors"]["epsilon"], response.json()
    assert not Release.objects.exists() and not BudgetLedgerEntry.objects.exists()
