"""Make an account a custodian: `manage.py grant_custodian USERNAME [--revoke]`.

Custodians may upload or register datasets and create API tokens (dpportal.access.rules). Accounts
made from an invitation to audit are not custodians; this command (or the admin's "Custodians"
group) is the operator's explicit grant. --revoke takes the grant away again; the datasets the
account already owns stay its own.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from dpportal.access.rules import CUSTODIANS_GROUP, grant_custodian


class Command(BaseCommand):
    help = "Let an account upload or register datasets and create API tokens (or --revoke)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--revoke", action="store_true", help="take the grant away")

    def handle(self, *args, username, revoke=False, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"There is no account named {username!r}; check the spelling.")
        if revoke:
            user.groups.remove(*Group.objects.filter(name=CUSTODIANS_GROUP))
            self.stdout.write(f"{username} is no longer a custodian.")
        else:
            grant_custodian(user)
            self.stdout.write(f"{username} is a custodian.")
