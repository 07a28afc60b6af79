"""Issue 20, 7d: cancelling a release says what really happened to its data and its budget.

A release whose worker died after reading the data is queued again by the reaper; cancelling it
then must not claim that "its data was never read, budget given back".
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dpportal import services
from dpportal.models import BudgetLedgerEntry, Release
from tests.helpers import make_dataset, make_user

pytestmark = pytest.mark.database


@pytest.fixture
def owner_release(settings, monkeypatch, db):
    settings.DPPORTAL_HEARTBEAT_SECONDS = 0
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    owner = make_user()
    dataset = make_dataset(owner)
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age"],
        params={},
        epsilon="0.5",
    )
    client = Client()
    client.force_login(owner)
    return client, release


def cancel(client, release):
    response = client.post(reverse("release_cancel", args=[release.pk]), follow=True)
    said = " ".join(str(m) for m in get_messages(response.wsgi_request))
    page = client.get(reverse("release_detail", args=[release.pk])).content.decode()
    release.refresh_from_db()
    return said + " " + response.content.decode(), page


def test_cancelling_a_never_read_release_says_its_budget_came_back(owner_release):
    client, release = owner_release
    queued_page = client.get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "(its budget is given back)" in queued_page
    said, page = cancel(client, release)
    assert "Its data was never read, so its privacy budget (ε = 0.5) was given back" in said
    assert "cancelled before its data was read" in page and "was given back" in page
    assert release.dataset.epsilon_spent == 0
    assert release.ledger.filter(kind=BudgetLedgerEntry.Kind.REFUND).exists()


def test_cancelling_a_release_retried_after_its_data_was_read_says_the_budget_stays_spent(
    owner_release,
):
    client, release = owner_release
    _release, token = services.execution._release_claim(release.pk)
    services.execution._mark_data_read(
        release, token
    )  # then the worker dies; the reaper queues it again
    services.release_reap(now=timezone.now() + timedelta(minutes=5))
    release.refresh_from_db()
    assert release.status == Release.Status.QUEUED and release.data_was_read
    queued_page = client.get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "its data was already read: its budget stays spent" in queued_page
    assert "(its budget is given back)" not in queued_page

    said, page = cancel(client, release)
    assert release.status == Release.Status.CANCELLED
    assert "already read its data" in said and "(ε = 0.5) stays spent" in said
    assert "never read" not in said and "given back" not in said
    assert "after an earlier attempt had read its data" in page and "stays spent" in page
    assert "before its data was read" not in page and "was given back" not in page
    assert release.dataset.epsilon_spent == Decimal("0.5")
    assert not release.ledger.filter(kind=BudgetLedgerEntry.Kind.REFUND).exists()
