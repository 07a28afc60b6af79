"""Create the demo custodian and load the demo dataset (UCI Adult) with its public schema."""

import json
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from dpportal import services
from dpportal.access.rules import grant_custodian
from dpportal.models import Dataset

DEMO_DIR = Path(settings.BASE_DIR) / "demo"
ATTRIBUTION = (
    "UCI Adult / Census Income. UCI Machine Learning Repository, CC BY 4.0. "
    "Becker & Kohavi (1996), doi:10.24432/C5XW20"
)


class Command(BaseCommand):
    help = "Create the demo custodian (user 'demo') and the demo dataset, if they do not exist."

    def add_arguments(self, parser):
        parser.add_argument("--password", default="demo-portal", help="password for user 'demo'")

    def handle(self, *args, password, **options):
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username="demo")
        if created:
            user.set_password(password)
            user.save()
        grant_custodian(user)
        if not Dataset.objects.filter(owner=user, name="Adult (demo)").exists():
            dataset = services.dataset_create_from_path(
                owner=user,
                name="Adult (demo)",
                source_path=DEMO_DIR / "adult.csv.gz",
                epsilon_total=3,
                delta_total="0.000001",
                attribution=ATTRIBUTION,
                description="US census extract, 1994: demographics and income (public demo data).",
            )
            schema = json.loads((DEMO_DIR / "adult_schema.json").read_text())
            services.dataset_confirm_schema(dataset=dataset, user=user, schema=schema)
        self.stdout.write(f"Demo custodian: username 'demo', password '{password}'.")
