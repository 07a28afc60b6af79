"""Schemas confirmed before confirmation checked the stored data must be confirmed again.

Confirmation now refuses a schema under which some value of the data would make a release fail
(`dpportal.datasets.schema_checks`). A schema confirmed earlier was never checked, so its confirmation is
withdrawn (the schema itself is kept, so confirming again is one click); no release can start
until the data has been checked. Migrating back leaves the schemas unconfirmed.
"""

from django.db import migrations


def withdraw_unchecked_confirmations(apps, schema_editor):
    Dataset = apps.get_model("dpportal", "Dataset")
    Dataset.objects.filter(schema_confirmed_at__isnull=False).update(schema_confirmed_at=None)


class Migration(migrations.Migration):
    dependencies = [("dpportal", "0005_privacy_budget_by_fingerprint")]

    operations = [
        migrations.RunPython(withdraw_unchecked_confirmations, migrations.RunPython.noop),
    ]
