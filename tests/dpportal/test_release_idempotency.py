"""Red team issue 13, item 4: a double click on "Spend this budget" must spend once.

The new-release form carries a one-time token (signed with the user and the dataset); the
release stores it, unique per dataset, under the dataset lock. A second POST of the same form,
sequential or concurrent, creates nothing and is sent to the first release. A missing or forged
token is refused and spends nothing. Broken twins: without the token the double POST makes two
releases; a token checked outside the lock lets two concurrent POSTs through.
"""

import re
import threading
import time

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.urls import reverse

from dpportal import services
from dpportal.models import BudgetLedgerEntry, Release
from tests.helpers import client_for, histogram_post, make_dataset, make_user

pytestmark = pytest.mark.database

DUPLICATE = "This request was already submitted; here is its release."
PAUSE = 0.2  # seconds inside the locked admission, so the second POST arrives meanwhile


def form_token(client, dataset) -> str:
    page = client.get(reverse("release_new", args=[dataset.pk])).content.decode()
    found = re.search(r'name="submission" value="([^"]+)"', page)
    return found.group(1) if found else ""


def post(client, dataset, token, **overrides):
    data = {**histogram_post(**overrides), "submission": token}
    return client.post(reverse("release_new", args=[dataset.pk]), data)


def spent(dataset) -> tuple[int, int]:
    """(releases, debits) of the dataset."""
    debits = BudgetLedgerEntry.objects.filter(dataset=dataset, kind="debit").count()
    return Release.objects.filter(dataset=dataset).count(), debits


def test_a_second_post_of_the_same_form_shows_the_first_release(owner, dataset):
    client = client_for(owner)
    token = form_token(client, dataset)
    first = post(client, dataset, token)
    second = post(client, dataset, token)
    release = Release.objects.get()
    assert spent(dataset) == (1, 1)
    assert first["Location"] == second["Location"] == reverse("release_detail", args=[release.pk])
    assert DUPLICATE in [str(m) for m in get_messages(second.wsgi_request)]
    dataset.refresh_from_db()
    assert dataset.budget.epsilon_spent == release.epsilon


def test_every_rendering_carries_a_fresh_token(owner, dataset):
    client = client_for(owner)
    assert form_token(client, dataset) != form_token(client, dataset)
    post(client, dataset, form_token(client, dataset))
    post(client, dataset, form_token(client, dataset), epsilon="0.25")
    assert spent(dataset) == (2, 2)  # two forms, two releases: the token stops repeats only


def test_a_missing_or_forged_token_is_refused_and_spends_nothing(owner, stranger, dataset):
    from dpportal.releases.forms import submission_token

    other = make_dataset(owner, name="Other")
    client = client_for(owner)
    real = form_token(client, dataset)
    for token in (
        "",
        real[:-2] + ("AA" if not real.endswith("AA") else "BB"),  # tampered signature
        submission_token(stranger, dataset),  # issued to someone else
        submission_token(owner, other),  # issued for another dataset
    ):
        response = post(client, dataset, token)
        assert response.status_code == 200
        assert "This form was not issued to you for this dataset" in response.content.decode()
    assert spent(dataset) == (0, 0)


def test_broken_twin_without_the_token_makes_two_releases(owner, dataset, monkeypatch):
    create = services.releases.release_create
    monkeypatch.setattr(
        services, "release_create", lambda **kw: create(**{**kw, "submission_token": ""})
    )
    client = client_for(owner)
    token = form_token(client, dataset)
    post(client, dataset, token)
    post(client, dataset, token)
    assert spent(dataset) == (2, 2)


def race(dataset, token, users) -> list[int]:
    """Two POSTs of one form at the same moment, each from its own thread and connection."""
    barrier, statuses = threading.Barrier(len(users)), []

    def submit(user):
        try:
            client = client_for(user)
            barrier.wait()
            statuses.append(post(client, dataset, token).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return statuses


@pytest.fixture
def slow_admission(monkeypatch):
    """Pause inside the locked admission (after the budget check), logging each pause."""
    check, pauses = services.releases.check_budget, []

    def check_then_pause(budget, epsilon, delta):
        check(budget, epsilon, delta)
        pauses.append(1)
        time.sleep(PAUSE)

    monkeypatch.setattr(services.releases, "check_budget", check_then_pause)
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)  # no broker traffic
    return pauses


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_posts_of_the_same_form_make_one_release(slow_admission):
    owner = make_user("racer")
    dataset = make_dataset(owner)
    token = form_token(client_for(owner), dataset)
    statuses = race(dataset, token, [owner, owner])
    print(f"\nDouble POST race: statuses {statuses}, releases/debits {spent(dataset)}")
    assert statuses == [302, 302]
    assert spent(dataset) == (1, 1)
    assert len(slow_admission) == 1  # only one request got past the token check


@pytest.mark.django_db(transaction=True)
def test_broken_twin_checking_the_token_outside_the_lock_makes_two(slow_admission, monkeypatch):
    create = services.releases.release_create

    def check_then_create(**kw):
        token = kw.pop("submission_token")
        if Release.objects.filter(dataset=kw["dataset"], submission_token=token).exists():
            raise services.DuplicateSubmission(Release.objects.get(submission_token=token))
        time.sleep(PAUSE)
        return create(**kw)  # the token is not stored: nothing else stops the twin

    monkeypatch.setattr(services, "release_create", check_then_create)
    owner = make_user("racer")
    dataset = make_dataset(owner)
    token = form_token(client_for(owner), dataset)
    statuses = race(dataset, token, [owner, owner])
    assert statuses == [302, 302]
    assert spent(dataset) == (2, 2)
