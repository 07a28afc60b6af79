"""Celery tasks: thin wrappers that look a release up by id and call one service."""

from celery import shared_task

from . import services


@shared_task(name="dpportal.run_release")
def run_release(release_id: int) -> None:
    """Run one release; safe to deliver twice (the lease and the stored output guard it)."""
    services.release_run(release_id=release_id)
