"""Custodians become an explicit grant (issue 41, item 13): the permission dpportal.custodian,
held through the group "Custodians". Every account that exists now keeps what it could do
before (it joins the group); accounts made later, such as those made from an invitation to
audit, get it only from an operator (the admin, `manage.py grant_custodian`, or
`createsuperuser`, whose superusers hold every permission)."""

from django.conf import settings
from django.db import migrations

GROUP = "Custodians"


def grant_existing_users(apps, schema_editor):
    content_type, _ = apps.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label="dpportal", model="dataset"
    )
    permission, _ = apps.get_model("auth", "Permission").objects.get_or_create(
        content_type=content_type,
        codename="custodian",
        defaults={"name": "Is a custodian: may upload or register datasets, create API tokens"},
    )
    group, _ = apps.get_model("auth", "Group").objects.get_or_create(name=GROUP)
    group.permissions.add(permission)
    membership = apps.get_model(settings.AUTH_USER_MODEL).groups.through
    membership.objects.bulk_create(
        [
            membership(user_id=pk, group_id=group.pk)
            for pk in apps.get_model(settings.AUTH_USER_MODEL).objects.values_list("pk", flat=True)
        ],
        ignore_conflicts=True,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("dpportal", "0011_shared_budget_declaration"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="dataset",
            options={
                "ordering": ["-created_at"],
                "permissions": [
                    (
                        "custodian",
                        "Is a custodian: may upload or register datasets, create API tokens",
                    )
                ],
            },
        ),
        migrations.RunPython(grant_existing_users, migrations.RunPython.noop),
    ]
