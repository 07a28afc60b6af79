"""Celery tasks: thin wrappers that look a release up by id and call one service."""

from celery import shared_task
from django.db import InterfaceError, OperationalError

from dpportal import services
from dpportal.services import publishing


@shared_task(
    name="dpportal.run_release",
    # The database cannot be reached (an outage, a dropped connection): try again later, with
    # a growing pause, rather than leave the release queued with its job gone. Celery's Django
    # fix-up closes broken connections around each task, so the retry opens a fresh one.
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=5,
    retry_backoff_max=300,
    max_retries=None,
)
def run_release(release_id: int) -> None:
    """Run one release; safe to deliver twice (the lease and the stored output guard it)."""
    services.release_run(release_id=release_id)


@shared_task(name="dpportal.make_utility_report")
def make_utility_report(release_id: int) -> None:
    """Make a done release's custodian-only report (and its zip and charts) again: its first
    try failed or its worker died (`publishing.utility_report_again`)."""
    publishing.release_store_utility_report(release_id)
