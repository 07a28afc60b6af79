"""Schemas confirmed before confirmation checked the data lose their confirmation, keep their
schema, and can be confirmed again (which now checks the data)."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.database

BEFORE = ("dpportal", "0005_privacy_budget_by_fingerprint")
AFTER = ("dpportal", "0006_recheck_confirmed_schemas")


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_confirmations_made_without_the_data_check_are_withdrawn():
    apps = migrate(BEFORE)
    user = apps.get_model("auth", "User").objects.create(username="alice")
    budget = apps.get_model("dpportal", "PrivacyBudget").objects.create(
        scope=f"owner:{user.pk}", fingerprint="f", epsilon_total=1
    )
    Dataset = apps.get_model("dpportal", "Dataset")
    schema = {"columns": [{"name": "x", "type": "ignored"}]}
    confirmed = Dataset.objects.create(
        name="one",
        owner=user,
        sha256="a" * 64,
        budget=budget,
        schema=schema,
        schema_confirmed_at=timezone.now(),
    )
    try:
        apps = migrate(AFTER)
        after = apps.get_model("dpportal", "Dataset").objects.get(pk=confirmed.pk)
        assert after.schema_confirmed_at is None and after.schema == schema
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
