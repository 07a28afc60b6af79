"""Verify the audit log's hash chain: `manage.py verify_audit_chain [--expect-head HASH]`.

Exits 0 when every event still matches its hash and links to the one before it; otherwise
names each broken event and exits non-zero. Deleting the newest events leaves an intact but
shorter chain, so keep the printed head hash somewhere safe and pass it back with --expect-head.
Each event's hash covers its secret salt (stored with it, never exported), so only this command,
run with database access, can recompute hashes; an auditor holding the audit CSV can check that
each exported event chains onto the hash before it, not recompute or test guesses against one.
"""

from django.core.management.base import BaseCommand, CommandError

from dpportal.models import AuditEvent
from dpportal.services import audit_verify_chain


class Command(BaseCommand):
    help = "Check that no audit event was changed or removed since it was written."

    def add_arguments(self, parser):
        parser.add_argument(
            "--expect-head",
            metavar="HASH",
            help="a head hash printed by an earlier run; fail if that event is missing",
        )

    def handle(self, *args, expect_head=None, **options):
        problems = audit_verify_chain()
        if expect_head and not AuditEvent.objects.filter(hash=expect_head).exists():
            problems.append(f"no event has the expected hash {expect_head}: events were removed")
        if problems:
            for problem in problems:
                self.stderr.write(problem)
            raise CommandError(f"Audit chain broken: {len(problems)} problem(s) found.")
        count = AuditEvent.objects.count()
        head = AuditEvent.objects.order_by("-pk").values_list("hash", flat=True).first()
        self.stdout.write(f"Audit chain intact: {count} events verified. Head hash: {head or '-'}")
