"""Sweep for releases whose worker died, jobs the broker lost, and leftover scratch files."""

import logging
import time

import kombu.exceptions
import redis
from django import db
from django.conf import settings
from django.core.management.base import BaseCommand

from dpportal import services
from dpportal.core import heartbeats

logger = logging.getLogger(__name__)

# What a sweep raises while the database or the broker cannot be reached.
OUTAGES = (db.Error, redis.RedisError, kombu.exceptions.KombuError, OSError)
MAX_BACKOFF_SECONDS = 60


class Command(BaseCommand):
    help = (
        "Retry or fail releases whose worker stopped, resend jobs the broker never got or "
        "lost, and remove files of killed executions and uploads. One sweep, or with --loop "
        "one every DPPORTAL_REAPER_SECONDS until stopped, surviving database and broker "
        "outages (it retries with a growing pause, up to a minute)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping until stopped")

    def handle(self, *args, loop, **options):
        if not loop:
            self._report(services.release_reap())
            return
        failures = 0
        while True:
            failures = 0 if self._sweep() else failures + 1
            pause = min(MAX_BACKOFF_SECONDS, settings.DPPORTAL_REAPER_SECONDS * 2**failures)
            heartbeats.beat("reaper", every=pause)
            time.sleep(pause)

    def _sweep(self) -> bool:
        """One sweep of the loop; False (logged, connections closed) if an outage stopped it."""
        try:
            counts = services.release_reap()
        except OUTAGES as exc:
            logger.warning("Reaper sweep failed (%s: %s)", type(exc).__name__, str(exc)[:200])
            db.connections.close_all()  # the next sweep opens a fresh connection
            return False
        if any(counts.values()):
            self._report(counts)
        db.close_old_connections()
        return True

    def _report(self, counts):
        self.stdout.write(" ".join(f"{k}={v}" for k, v in counts.items()))
        self.stdout.flush()
