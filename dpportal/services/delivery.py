"""Handing a queued release to the job broker, on the queue its expected size calls for.

The job is sent by its Celery name, so this package never imports the task module (which
imports the services to run the job).
"""

import logging
import math

from django.conf import settings
from django.utils import timezone
from kombu.exceptions import OperationalError

import mechanisms
from dpportal.celery import app as celery_app
from dpportal.models import Release

logger = logging.getLogger(__name__)

RUN_RELEASE_TASK = "dpportal.run_release"  # dpportal.tasks.run_release


def release_queue(release) -> str:
    """Long jobs (iterative mechanisms such as MWEM, large supports) go to their own queue, so
    small ones never wait behind them."""
    long_running = mechanisms.catalogue.spec(release.mechanism).long_running
    if long_running or _support_size(release) > settings.DPPORTAL_LONG_JOB_CELLS:
        return settings.DPPORTAL_CELERY_LONG_QUEUE
    return settings.CELERY_TASK_DEFAULT_QUEUE


def _support_size(release) -> int:
    """Cells the mechanism works over: the range-count grid, or the columns' domain."""
    grid = (release.params or {}).get("grid")
    if isinstance(grid, list) and all(isinstance(g, int) for g in grid):
        return math.prod(grid)
    try:
        schema = mechanisms.Schema.from_dict(release.dataset.schema)
        return math.prod(schema.domain_shape(release.columns))
    except (mechanisms.MechanismError, KeyError, TypeError):
        return 0  # the job fails fast with a clear message; any queue will do


def release_send(release_id) -> bool:
    """Hand a queued release to the broker. If the broker is unreachable the release stays
    queued (unsent) and the reaper sends it later; the submission itself never fails on it."""
    release = Release.objects.filter(pk=release_id, status=Release.Status.QUEUED).first()
    if release is None:
        return False
    try:
        celery_app.send_task(RUN_RELEASE_TASK, args=[release.pk], queue=release_queue(release))
    except (OperationalError, OSError) as exc:
        logger.warning(
            "Job broker unreachable (%s): release %s waits to be sent by the reaper",
            type(exc).__name__,
            release.pk,
        )
        return False
    Release.objects.filter(pk=release.pk).update(enqueued_at=timezone.now())
    return True
