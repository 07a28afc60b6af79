"""Sweep for releases whose worker died, jobs the broker lost, and leftover scratch files."""

import time

from django.conf import settings
from django.core.management.base import BaseCommand

from dpportal import services


class Command(BaseCommand):
    help = (
        "Retry or fail releases whose worker stopped, resend jobs the broker never got or "
        "lost, and remove files of killed executions and uploads. One sweep, or with --loop "
        "one every DPPORTAL_REAPER_SECONDS until stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping until stopped")

    def handle(self, *args, loop, **options):
        while True:
            counts = services.release_reap()
            if any(counts.values()) or not loop:
                self.stdout.write(" ".join(f"{k}={v}" for k, v in counts.items()))
                self.stdout.flush()
            if not loop:
                return
            time.sleep(settings.DPPORTAL_REAPER_SECONDS)
