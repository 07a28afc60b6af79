"""Analysts and their requests (issue 46, item 1): the analyst's membership with its allotment,
the release request and each decider's decision, the dataset's second approver (two-person
rule), and ledger entries that reserve or return an allotment (no release: `release` may be
empty, `analyst` names the allotment). Numbered 0014: 0013 is another branch's."""

import django.db.models.deletion
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dpportal", "0013_dataset_public_record"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="dataset",
            name="second_approver",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="second_approver_of",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[('login', 'Logged in'), ('login_failed', 'Login failed'), ('logout', 'Logged out'), ('upload', 'Dataset uploaded'), ('schema_confirmed', 'Schema confirmed'), ('budget_changed', 'Budget changed'), ('budget_joined', 'Budget shared with another dataset (same people)'), ('access_changed', 'Access changed'), ('release_requested', 'Release requested'), ('release_started', 'Release started'), ('release_done', 'Release done'), ('release_failed', 'Release failed'), ('release_cancelled', 'Release cancelled'), ('release_retried', 'Release retried after a lost worker'), ('release_refunded', 'Release budget refunded'), ('download', 'Download'), ('deletion', 'Dataset deleted'), ('token_created', 'API token created'), ('token_revoked', 'API token revoked'), ('token_refused', 'API token refused'), ('invitation_sent', 'Invitation sent'), ('invitation_revoked', 'Invitation revoked'), ('release_published', 'Release public page switched on'), ('release_withdrawn', 'Release public page withdrawn'), ('record_published', "Dataset's public record switched on"), ('record_withdrawn', "Dataset's public record switched off"), ('analyst_invited', 'Analyst invited, allotment reserved'), ('analyst_revoked', 'Analyst revoked, allotment returned'), ('approver_changed', 'Second approver changed'), ('request_submitted', 'Release requested by an analyst'), ('request_approved', "Analyst's request approved"), ('request_declined', "Analyst's request declined"), ('request_withdrawn', "Analyst's request withdrawn")],
                max_length=30,
            ),
        ),
        migrations.AlterField(
            model_name="budgetledgerentry",
            name="kind",
            field=models.CharField(
                choices=[
                    ("debit", "Debit"),
                    ("refund", "Refund"),
                    ("reserve", "Reserved for an analyst"),
                    ("return", "Returned from an analyst's allotment"),
                ],
                default="debit",
                max_length=10,
            ),
        ),
        migrations.AlterField(
            model_name="budgetledgerentry",
            name="release",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="ledger",
                to="dpportal.release",
            ),
        ),
        migrations.CreateModel(
            name="Analyst",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("email", models.EmailField(max_length=254)),
                ("epsilon_allotted", models.DecimalField(decimal_places=6, max_digits=12)),
                (
                    "delta_allotted",
                    models.DecimalField(decimal_places=15, default=Decimal("0"), max_digits=20),
                ),
                ("epsilon_held", models.DecimalField(decimal_places=6, max_digits=12)),
                (
                    "delta_held",
                    models.DecimalField(decimal_places=15, default=Decimal("0"), max_digits=20),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("joined_at", models.DateTimeField(blank=True, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                (
                    "dataset",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="analysts",
                        to="dpportal.dataset",
                    ),
                ),
                (
                    "invitation",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="analyst",
                        to="dpportal.invitation",
                    ),
                ),
                (
                    "invited_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="analysts_invited",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="analyst_memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["created_at", "pk"],
            },
        ),
        migrations.AddField(
            model_name="budgetledgerentry",
            name="analyst",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="ledger",
                to="dpportal.analyst",
            ),
        ),
        migrations.CreateModel(
            name="ReleaseRequest",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("mechanism", models.CharField(max_length=40)),
                ("columns", models.JSONField(default=list)),
                ("params", models.JSONField(blank=True, default=dict)),
                ("epsilon", models.DecimalField(decimal_places=6, max_digits=12)),
                (
                    "delta",
                    models.DecimalField(decimal_places=15, default=Decimal("0"), max_digits=20),
                ),
                ("engine", models.CharField(blank=True, max_length=20)),
                ("purpose", models.TextField(blank=True, max_length=2000)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("waiting", "Waiting for a decision"),
                            ("approved", "Approved"),
                            ("declined", "Declined"),
                            ("withdrawn", "Withdrawn"),
                        ],
                        default="waiting",
                        max_length=20,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("decided_at", models.DateTimeField(blank=True, null=True)),
                ("submission_token", models.CharField(blank=True, default="", max_length=43)),
                (
                    "analyst",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="requests",
                        to="dpportal.analyst",
                    ),
                ),
                (
                    "dataset",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="release_requests",
                        to="dpportal.dataset",
                    ),
                ),
                (
                    "release",
                    models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="analyst_request",
                        to="dpportal.release",
                    ),
                ),
                (
                    "requested_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="release_requests",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "second_approver",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="requests_to_approve",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-pk"],
            },
        ),
        migrations.CreateModel(
            name="RequestDecision",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("approved", models.BooleanField()),
                ("note", models.TextField(blank=True, max_length=2000)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "request",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="decisions",
                        to="dpportal.releaserequest",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="request_decisions",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["created_at", "pk"],
            },
        ),
        migrations.AddConstraint(
            model_name="analyst",
            constraint=models.UniqueConstraint(
                condition=models.Q(("revoked_at__isnull", True), ("user__isnull", False)),
                fields=("dataset", "user"),
                name="one_active_membership_per_analyst",
            ),
        ),
        migrations.AddConstraint(
            model_name="releaserequest",
            constraint=models.UniqueConstraint(
                condition=models.Q(("submission_token", ""), _negated=True),
                fields=("analyst", "submission_token"),
                name="one_request_per_submission_token",
            ),
        ),
        migrations.AddConstraint(
            model_name="requestdecision",
            constraint=models.UniqueConstraint(
                fields=("request", "user"), name="one_decision_per_decider"
            ),
        ),
    ]
