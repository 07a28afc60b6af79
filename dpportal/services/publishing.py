"""After a release is published: the custodian-only utility report, then the public zip and
chart data (made now so pages open fast; the zip only if DPPORTAL_PREBUILD_PACKAGES); and
removing the reports with the raw data.

The report is derived from the raw data, so it must never outlive the dataset's deletion. The
two are ordered by the dataset row lock: the report is written under a temporary name, then,
with the dataset locked, put in place only if the dataset is not deleted (else discarded);
deletion takes the same lock, marks the dataset deleted and removes the reports after commit.
Whichever comes second sees what the first did, so no report survives a deletion.
"""

import logging
import traceback
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError

import mechanisms
from dpportal.celery import app as celery_app
from dpportal.core import files, object_store
from dpportal.models import Release
from dpportal.releases import kinds, packaging, utility
from dpportal.services.budget import locked_dataset

logger = logging.getLogger(__name__)

MAKE_REPORT_TASK = "dpportal.make_utility_report"  # dpportal.tasks.make_utility_report
REPORT_AGAIN_AFTER = timedelta(minutes=2)  # a report still missing this long after: try again
REPORT_TRIES = 3  # the release's own try and two more; then the page says it could not be made


def release_store_utility_report(release_pk):
    """Compare a finished release with the raw data and store it custodian-only, apart from the
    public package; then prepare the package's zip (if DPPORTAL_PREBUILD_PACKAGES) and chart data
    so pages open fast. A failure here only leaves them to be made later (the report stays
    missing, the public files are made on first view): the release stands."""
    release = Release.objects.select_related("dataset").get(pk=release_pk)
    steps: list[tuple[str, Callable[[Release], object]]] = [
        ("utility report", store_utility_report)
    ]
    if settings.DPPORTAL_PREBUILD_PACKAGES:
        steps.append(("package zip", packaging.package_zip_path))
    steps.append(("charts", _prepare_charts))
    for what, step in steps:
        try:
            step(release)
        except Exception as exc:  # the message may quote data: log its type and stack only
            logger.error(
                "Release %s: %s failed (%s):\n%s",
                release.pk,
                what,
                type(exc).__name__,
                "".join(traceback.format_tb(exc.__traceback__)),
            )


def _prepare_charts(release: Release) -> None:
    """Compute the public charts now and keep them (`kinds.public_charts`)."""
    schema = release.dataset.schema
    if schema is None:
        raise ValueError("the release's dataset has no schema")
    kinds.public_charts(release, mechanisms.Schema.from_dict(schema))


def store_utility_report(release) -> bool:
    """Compute the report and put it in place only while the dataset is locked and not deleted
    (see the module docstring). Returns whether it was stored. None for a table that stays
    where it lives: comparing with it would need its raw rows, which never leave it."""
    if release.dataset.is_deleted or release.dataset.is_external:
        return False
    writer = files.PrivateWriter(files.utility_report_path(release))
    try:
        writer.file.write(utility.compute(release))
        with transaction.atomic():
            if locked_dataset(release.dataset_id).is_deleted:
                writer.discard()
                return False
            object_store.keep(writer.commit())  # in place (or uploaded) under the lock
            return True
    except BaseException:
        writer.discard()
        raise


def release_remove_utility_reports(dataset):
    """Delete the custodian-only comparisons with the raw data of every release of a dataset
    (they are derived from the raw data, which is being deleted). Called after the deletion
    commits: a report being stored meanwhile finds the dataset deleted and discards itself."""
    for release in dataset.releases.all():
        object_store.remove(files.utility_report_path(release))


def utility_report_again(release) -> str:
    """For the owner's page of a done release whose custodian-only report is missing: "" while
    its first try may still be running (`REPORT_AGAIN_AFTER` after the release finished);
    "again" once it is queued again (at most once per `REPORT_AGAIN_AFTER`, `REPORT_TRIES` in
    all), after a try that failed or a worker that died; "failed" after the last try. Deleted
    datasets and tables that stay where they live have no report (`store_utility_report`)."""
    if release.finished_at is None or timezone.now() - release.finished_at < REPORT_AGAIN_AFTER:
        return ""
    tries, queued = f"utility-report-tries:{release.pk}", f"utility-report-again:{release.pk}"
    cache.add(tries, 1, timeout=None)  # the release's own try
    if cache.get(queued):
        return "again"  # queued less than REPORT_AGAIN_AFTER ago
    if cache.get(tries, 1) >= REPORT_TRIES:
        return "failed"
    if not cache.add(queued, 1, REPORT_AGAIN_AFTER.total_seconds()):
        return "again"  # another page view queued it a moment ago
    try:
        celery_app.send_task(MAKE_REPORT_TASK, args=[release.pk])
    except (OperationalError, OSError) as exc:
        logger.warning(
            "Broker unreachable (%s): report %s not queued", type(exc).__name__, release.pk
        )
    else:
        cache.incr(tries)
    return "again"
