"""The reaper: one sweep retries or fails releases whose worker died, sends jobs the broker
never got (or lost), and removes files left by killed executions and uploads."""

import logging
import shutil
from datetime import timedelta
from pathlib import Path

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dpportal.core import files, object_store
from dpportal.models import AuditEvent, Release
from dpportal.services import audit, delivery
from dpportal.services.budget import locked_dataset_and_release
from dpportal.services.datasets import dataset_remove_orphan_files
from dpportal.services.execution import TIME_LIMIT_MESSAGE, lease_alive
from dpportal.services.releases import fail_and_refund

logger = logging.getLogger(__name__)

SEND_GRACE = timedelta(seconds=10)  # leave a fresh submission to its own after-commit send
BROKER_EPOCH_KEY = "dpportal:broker-epoch"


def release_reap(*, now=None) -> dict:
    """One sweep: retry or fail releases whose worker died, send unsent or lost jobs, and remove
    files left by killed executions and uploads. Safe to run from several processes at once."""
    now = now or timezone.now()
    counts = {"retried": 0, "failed": 0, "sent": 0, "files_removed": 0, "uploads_removed": 0}
    retried = []
    running = Release.objects.filter(status=Release.Status.RUNNING)
    for pk, dataset_pk in running.values_list("pk", "dataset_id"):
        outcome = _reap_running(pk, dataset_pk, now)
        if outcome:
            counts[outcome] += 1
        if outcome == "retried":
            retried.append(pk)
    for pk in sorted(set(retried) | set(_releases_to_send(now))):
        counts["sent"] += delivery.release_send(pk)
    counts["files_removed"] = _remove_orphan_files(now)
    counts["uploads_removed"] = dataset_remove_orphan_files()
    return counts


def _reap_running(release_pk, dataset_pk, now):
    with transaction.atomic():
        dataset, locked = locked_dataset_and_release(dataset_pk, release_pk)
        if locked.status != Release.Status.RUNNING or lease_alive(locked, now):
            return None
        runtime = (now - (locked.attempt_started_at or locked.started_at or now)).total_seconds()
        if runtime > settings.CELERY_TASK_TIME_LIMIT:
            fail_and_refund(dataset, locked, TIME_LIMIT_MESSAGE)
            return "failed"
        if locked.attempts >= settings.DPPORTAL_RELEASE_MAX_ATTEMPTS:
            fail_and_refund(
                dataset,
                locked,
                "The worker running this release stopped "
                f"{locked.attempts} times, so it was given up.",
            )
            return "failed"
        locked.status, locked.lease_token, locked.enqueued_at = Release.Status.QUEUED, "", None
        locked.save(update_fields=["status", "lease_token", "enqueued_at"])
        audit.audit_record(
            action=AuditEvent.Action.RELEASE_RETRIED,
            dataset=locked.dataset,
            release=locked,
            details={"after_attempt": locked.attempts},
        )
    return "retried"


def _releases_to_send(now):
    queued = Release.objects.filter(status=Release.Status.QUEUED)
    unsent = queued.filter(enqueued_at__isnull=True, created_at__lt=now - SEND_GRACE)
    if _broker_lost_its_messages():
        return list(queued.values_list("pk", flat=True))
    return list(unsent.values_list("pk", flat=True))


def _broker_lost_its_messages() -> bool:
    """A Redis broker without persistence forgets every queued job when it restarts. A marker
    key set here disappears with them, so its absence means: send every queued job again
    (a duplicate is harmless, the lease makes it a no-op)."""
    if not settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        return False
    try:
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5)
        return bool(client.set(BROKER_EPOCH_KEY, timezone.now().isoformat(), nx=True))
    except redis.RedisError as exc:
        logger.warning("Reaper cannot reach the job broker (%s)", type(exc).__name__)
        return False


def _remove_orphan_files(now) -> int:
    """Remove scratch folders and unpublished packages of executions that no longer run."""
    cutoff = (now - timedelta(seconds=settings.DPPORTAL_LEASE_SECONDS)).timestamp()
    live_tokens = set(
        Release.objects.filter(status=Release.Status.RUNNING).values_list("lease_token", flat=True)
    )
    published = set(Release.objects.exclude(output_dir="").values_list("output_dir", flat=True))
    removed = 0
    for path in _children(files.work_root()):
        if path.name.partition("-")[2] not in live_tokens and path.stat().st_mtime < cutoff:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    for path in _children(files.releases_root()):
        if (
            files.relative_to_data(path) not in published
            and "-" in path.name
            and path.stat().st_mtime < cutoff
        ):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed + object_store.remove_unpublished_folders(published, cutoff)


def _children(folder: Path):
    return list(folder.iterdir()) if folder.is_dir() else []
