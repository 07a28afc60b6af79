"""Issue 41 item 5c: budgets are shared automatically only by identical content; the owner can
declare that two datasets hold the same people so they share one budget.

The join adds both budgets' spend (sequential composition over the same people), keeps the
smaller total, refuses a join that would overspend it, is recorded in both datasets' audit
logs, and leads later uploads of either content to the joined budget. Under concurrent releases
the joined budget's spend equals its ledger exactly (test_budget_same_people_race.py).
"""

from decimal import Decimal

import pytest
from django.db.models import Sum
from django.urls import reverse

from dpportal import services
from dpportal.models import AuditEvent, BudgetLedgerEntry, Dataset, PrivacyBudget
from tests.helpers import (
    SMALL_SCHEMA,
    client_for,
    make_dataset,
    make_release,
    make_user,
    upload,
)

pytestmark = pytest.mark.django_db

TABLE = b"age,sex,city\n34,F,Leeds\n51,M,York\n29,F,Leeds\n"
COPY = b"age,sex,city,wave\n34,F,Leeds,1\n51,M,York,1\n29,F,Leeds,1\n"  # one constant column


@pytest.fixture(autouse=True)
def private_storage(settings, tmp_path, monkeypatch):
    settings.DATASET_STORAGE_DIR = tmp_path / "storage"
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)


def dataset_from(owner, tmp_path, content, name, epsilon_total="1"):
    path = tmp_path / f"{name}.csv"
    path.write_bytes(content)
    wave = [{"name": "wave", "type": "ignored"}] if b"wave" in content else []
    schema = {"columns": [*SMALL_SCHEMA["columns"], *wave]}
    return make_dataset(owner, schema=schema, path=path, name=name, epsilon_total=epsilon_total)


def spend(owner, dataset, epsilon):
    return make_release(owner, dataset, epsilon=Decimal(epsilon))


def join(client, dataset, other, confirmed=True):
    data = {"other": str(other.pk)} | ({"same_people": "on"} if confirmed else {})
    return client.post(reverse("dataset_budget_join", args=[dataset.pk]), data, follow=True)


def ledger_sum(budget) -> Decimal:
    entries = BudgetLedgerEntry.objects.filter(dataset__budget=budget)
    debits = entries.filter(kind="debit").aggregate(s=Sum("epsilon"))["s"] or Decimal(0)
    refunds = entries.filter(kind="refund").aggregate(s=Sum("epsilon"))["s"] or Decimal(0)
    return debits - refunds


def test_the_pages_that_set_a_budget_say_when_it_is_shared(owner, tmp_path):
    client = client_for(owner)
    upload_page = client.get(reverse("dataset_upload")).content.decode()
    first = dataset_from(owner, tmp_path, TABLE, "Survey")
    dataset_page = client.get(reverse("dataset_detail", args=[first.pk])).content.decode()
    for page in (upload_page, dataset_page):
        assert "only with an upload of exactly" in page
        assert "one column added" in page and "renamed" in page and "one row removed" in page
    join_url = reverse("dataset_budget_join", args=[first.pk])
    assert join_url not in dataset_page and "Share one budget" not in dataset_page  # no other


def test_a_copy_with_a_constant_column_gets_its_own_budget_until_declared(owner, tmp_path):
    first = dataset_from(owner, tmp_path, TABLE, "Survey", epsilon_total="2")
    copy = dataset_from(owner, tmp_path, COPY, "Survey with wave", epsilon_total="1.5")
    assert first.budget_id != copy.budget_id  # the fingerprint cannot see it
    spend(owner, first, "0.4")
    spend(owner, copy, "0.5")
    client = client_for(owner)
    page = client.get(reverse("dataset_detail", args=[first.pk])).content.decode()
    assert "Share one budget</button>" in page and "Survey with wave</option>" in page
    answer = join(client, first, copy).content.decode()
    assert "now share one privacy budget" in answer
    first.refresh_from_db()
    copy.refresh_from_db()
    assert first.budget_id == copy.budget_id
    budget = first.budget
    assert (budget.epsilon_total, budget.epsilon_spent) == (Decimal("1.5"), Decimal("0.9"))
    assert budget.epsilon_spent == ledger_sum(budget)  # the ledger stays exact
    retired = PrivacyBudget.objects.get(joined_into=budget)
    assert not retired.datasets.exists()
    events = AuditEvent.objects.filter(action="budget_joined").order_by("pk")
    assert [e.dataset_id for e in events] == [first.pk, copy.pk]
    assert events[0].details["after"]["epsilon_spent"] == "0.900000"
    log = client.get(reverse("audit_log")).content.decode()
    assert log.count("<td>Budget shared with another dataset (same people)</td>") == 2
    with pytest.raises(services.ServiceError, match="Not enough privacy budget"):
        services.release_create(
            dataset=copy,
            user=owner,
            mechanism="perturbed_histogram",
            columns=["age"],
            params={},
            epsilon=Decimal("0.7"),
        )


def test_a_join_that_would_overspend_the_smaller_total_is_refused(owner, tmp_path):
    first = dataset_from(owner, tmp_path, TABLE, "Survey")
    copy = dataset_from(owner, tmp_path, COPY, "Survey with wave")
    spend(owner, first, "0.6")
    spend(owner, copy, "0.5")
    answer = join(client_for(owner), first, copy).content.decode()
    assert "already spent ε = 1.1" in answer and "Nothing was changed" in answer
    first.refresh_from_db()
    copy.refresh_from_db()
    assert first.budget_id != copy.budget_id and first.epsilon_spent == Decimal("0.6")
    assert not AuditEvent.objects.filter(action="budget_joined").exists()


def test_a_join_needs_the_confirmation_and_both_datasets_of_the_owner(owner, tmp_path):
    first = dataset_from(owner, tmp_path, TABLE, "Survey")
    copy = dataset_from(owner, tmp_path, COPY, "Survey with wave")
    stranger = make_user("mallory")
    theirs = dataset_from(stranger, tmp_path, COPY, "Theirs")
    client = client_for(owner)
    unconfirmed = join(client, first, copy, confirmed=False).content.decode()
    assert "Nothing was changed" in unconfirmed
    assert "Select a valid choice" in join(client, first, theirs).content.decode()
    assert (
        client_for(stranger)
        .post(
            reverse("dataset_budget_join", args=[first.pk]),
            {"other": theirs.pk, "same_people": "on"},
        )
        .status_code
        == 404
    )
    assert len({d.budget_id for d in Dataset.objects.all()}) == 3


def test_different_relations_are_refused(owner, tmp_path):
    first = dataset_from(owner, tmp_path, TABLE, "Survey")
    copy = dataset_from(owner, tmp_path, COPY, "Survey with wave")
    services.dataset_change_budget(
        dataset=copy, user=owner, epsilon_total="1", delta_total="0", neighbouring="add-remove"
    )
    with pytest.raises(services.ServiceError, match="same neighbouring relation"):
        services.budgets_join(dataset=first, other=copy, user=owner)


def test_a_new_upload_of_either_content_draws_on_the_joined_budget(owner, tmp_path):
    first = dataset_from(owner, tmp_path, TABLE, "Survey")
    copy = dataset_from(owner, tmp_path, COPY, "Survey with wave")
    spend(owner, copy, "0.3")
    services.budgets_join(dataset=copy, other=first, user=owner)
    client = client_for(owner)
    for content, name in ((COPY, "again.csv"), (TABLE, "again2.csv")):
        answer = upload(client, content=content, filename=name)
        assert answer.status_code == 302
        newest = Dataset.objects.latest("pk")
        assert newest.budget_id == Dataset.objects.get(pk=first.pk).budget_id
        assert newest.epsilon_spent == Decimal("0.3")
