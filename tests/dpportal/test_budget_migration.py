"""The migration to shared budgets gives every existing dataset a budget row of its own, with its
totals, spending and neighbouring relation; migrating back restores them on the datasets."""

from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.database

BEFORE = ("dpportal", "0004_audit_event_salt")
AFTER = ("dpportal", "0005_privacy_budget_by_fingerprint")


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_each_existing_dataset_gets_its_own_budget_row():
    apps = migrate(BEFORE)
    user = apps.get_model("auth", "User").objects.create(username="alice")
    Dataset = apps.get_model("dpportal", "Dataset")
    same = {"owner": user, "sha256": "a" * 64, "epsilon_total": Decimal("2")}
    first = Dataset.objects.create(name="one", epsilon_spent=Decimal("0.5"), **same)
    second = Dataset.objects.create(
        name="two", neighbouring="add-remove", delta_total=Decimal("0.000001"), **same
    )
    try:
        apps = migrate(AFTER)
        Dataset = apps.get_model("dpportal", "Dataset")
        one, two = Dataset.objects.get(pk=first.pk), Dataset.objects.get(pk=second.pk)
        assert one.budget_id != two.budget_id
        assert (one.budget.epsilon_total, one.budget.epsilon_spent) == (2, Decimal("0.5"))
        assert one.budget.scope == f"owner:{user.pk}" == two.budget.scope
        assert one.budget.fingerprint == f"dataset-{first.pk}"
        assert (two.budget.neighbouring, two.budget.delta_total) == (
            "add-remove",
            Decimal("0.000001"),
        )
        apps = migrate(BEFORE)
        back = apps.get_model("dpportal", "Dataset").objects.get(pk=first.pk)
        assert (back.epsilon_total, back.epsilon_spent) == (2, Decimal("0.5"))
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
