# The publishing details of a dataset's releases (issue 43 item 8): title, publisher, contact
# and note, shown on the public page and in each package.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dpportal", "0014_analysts_and_requests"),
    ]

    operations = [
        migrations.AddField(
            model_name="dataset",
            name="publish_title",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="dataset",
            name="publisher",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="dataset",
            name="publish_contact",
            field=models.CharField(blank=True, max_length=254),
        ),
        migrations.AddField(
            model_name="dataset",
            name="publish_note",
            field=models.TextField(blank=True, max_length=2000),
        ),
    ]
