"""Releases remember the new-release form's one-time token, unique per dataset, so a second POST
of the same form (a double click) finds the first release instead of spending the budget again.
Existing releases get an empty token, which the constraint ignores."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dpportal", "0006_recheck_confirmed_schemas"),
    ]

    operations = [
        migrations.AddField(
            model_name="release",
            name="submission_token",
            field=models.CharField(blank=True, default="", max_length=43),
        ),
        migrations.AddConstraint(
            model_name="release",
            constraint=models.UniqueConstraint(
                condition=models.Q(("submission_token", ""), _negated=True),
                fields=("dataset", "submission_token"),
                name="one_release_per_submission_token",
            ),
        ),
    ]
