"""Running a release on a worker: claim its lease, keep it alive, read the data, run the
mechanism, store the public output.

A worker may only finish a release while it holds the lease: a random token written when it
claims the job and kept fresh by a heartbeat thread. A redelivered message finds a live lease
and does nothing, so one release never runs twice at once and never publishes two outputs.
"""

import logging
import os
import secrets
import shutil
import socket
import tempfile
import threading
import traceback
from contextlib import contextmanager
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from dpportal.core import files, object_store
from dpportal.models import AuditEvent, Release
from dpportal.releases import engine as release_engine
from dpportal.services import audit, publishing
from dpportal.services.budget import locked_dataset_and_release
from dpportal.services.releases import fail_and_refund, finish

logger = logging.getLogger(__name__)

TIME_LIMIT_MESSAGE = (
    "This release took longer than the time limit and was stopped. "
    "Try fewer columns, bins or rounds."
)


class LeaseLost(Exception):
    """This execution no longer holds the release's lease; it must stop without writing."""


def release_run(*, release_id):
    """Run a queued release once: load the data, call the mechanism, store the public package.

    Safe to deliver twice: a finished release is never recomputed, and a running one is left to
    the execution holding its lease.
    """
    claim = _release_claim(release_id)
    if claim is None:
        return
    release, token = claim
    with _heartbeat(release.pk, token), _work_dir(release, token) as work_dir:
        try:
            if refusal := release_engine.refusal_before_reading(release):
                _release_fail(release, token, refusal)  # nothing read, no noise: refunded
                return
            _mark_data_read(release, token)
            output = release_engine.compute(release, progress=_progress_writer(release.pk, token))
            _release_store(release, token, output, work_dir)
            publishing.release_store_utility_report(release.pk)
        except LeaseLost as exc:
            logger.info("%s", exc)
        except SoftTimeLimitExceeded:
            _release_fail(release, token, TIME_LIMIT_MESSAGE)
        except release_engine.ReleaseInputError as exc:
            _release_fail(release, token, str(exc))
        except Exception as exc:
            # Type and stack only: exception messages can quote raw values from the data.
            logger.error(
                "Release %s failed with %s:\n%s",
                release.pk,
                type(exc).__name__,
                "".join(traceback.format_tb(exc.__traceback__)),
            )
            _release_fail(
                release, token, "An internal error stopped this release. The team has the details."
            )


def _release_claim(release_id):
    """Take the lease of a queued release, or of a running one whose holder has gone."""
    now = timezone.now()
    with transaction.atomic():
        release = Release.objects.select_for_update(no_key=True).filter(pk=release_id).first()
        if release is None or release.is_terminal or release.output_dir:
            return None
        if release.status == Release.Status.RUNNING and lease_alive(release, now):
            return None
        token = secrets.token_hex(16)
        release.status = Release.Status.RUNNING
        release.attempts += 1
        release.started_at = release.started_at or now
        release.attempt_started_at = release.heartbeat_at = now
        release.lease_token, release.lease_owner = token, _this_process()
        release.save(
            update_fields=[
                "status",
                "attempts",
                "started_at",
                "attempt_started_at",
                "heartbeat_at",
                "lease_token",
                "lease_owner",
            ]
        )
        audit.audit_record(
            action=AuditEvent.Action.RELEASE_STARTED,
            dataset=release.dataset,
            release=release,
            details={"attempt": release.attempts},
        )
    return release, token


def _this_process() -> str:
    return f"{_this_machine()}:{os.getpid()}"


def _this_machine() -> str:
    """Host name plus PID namespace: two containers sharing a host name never mix up PIDs."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}/{namespace}"


def lease_alive(release, now) -> bool:
    """True while the holder's heartbeat is fresh and (if on this machine) its process lives."""
    lease = timedelta(seconds=settings.DPPORTAL_LEASE_SECONDS)
    if release.heartbeat_at is None or now - release.heartbeat_at > lease:
        return False
    host, _, pid = release.lease_owner.rpartition(":")
    if host != _this_machine() or not pid.isdigit():
        return True  # another machine: only its heartbeat can tell
    if int(pid) == os.getpid():
        return False  # this process runs one job at a time, so that execution has ended
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mark_data_read(release, token):
    """Record, before the data is opened, that a refund is no longer possible."""
    updated = Release.objects.filter(pk=release.pk, lease_token=token).update(data_was_read=True)
    if not updated:
        raise LeaseLost(f"release {release.pk} was taken over or cancelled before it started")


@contextmanager
def _heartbeat(release_pk, token):
    """Keep the lease fresh from a background thread, even while the mechanism is silent."""
    every = settings.DPPORTAL_HEARTBEAT_SECONDS
    stop = threading.Event()

    def beat():
        try:
            while not stop.wait(every):
                try:
                    if not Release.objects.filter(pk=release_pk, lease_token=token).update(
                        heartbeat_at=timezone.now()
                    ):
                        return  # lease lost: the store step will refuse this execution
                except DatabaseError as exc:
                    logger.warning(
                        "Heartbeat of release %s failed (%s)", release_pk, type(exc).__name__
                    )
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"heartbeat-{release_pk}", daemon=True)
    if every:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if every:
            thread.join(timeout=every + 30)


@contextmanager
def _work_dir(release, token):
    """A private scratch folder for this execution, also used as the process's temp folder.

    Removed on the way out; the reaper removes those of executions that were killed.
    """
    path = files.work_dir(release, token)
    path.mkdir(parents=True, mode=0o700)
    previous = tempfile.tempdir
    tempfile.tempdir = str(path)  # prefork workers run one job per process at a time
    try:
        yield path
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(path, ignore_errors=True)


def _progress_writer(release_pk, token):
    def report(done: int, total: int, stage: str = ""):
        Release.objects.filter(pk=release_pk, lease_token=token).update(
            progress_done=done,
            progress_total=total,
            progress_stage=stage[:100],
            heartbeat_at=timezone.now(),
        )

    return report


def _release_store(release, token, output, work_dir):
    """Write the public files to the scratch folder, then publish them with one rename, only if
    this execution still holds the lease and no output exists yet."""
    package = work_dir / "package"
    package.mkdir(mode=0o700)
    for name, content in output.files.items():
        files.write_private(package / name, content)
    final_dir = files.package_dir(release, token)
    object_store.stage_folder(package, final_dir)
    with transaction.atomic():
        locked = Release.objects.select_for_update(no_key=True).get(pk=release.pk)
        if locked.lease_token != token or locked.output_dir or locked.is_terminal:
            raise LeaseLost(f"release {release.pk}: output discarded, lease no longer held")
        object_store.place_folder(package, final_dir)
        locked.output_dir = files.relative_to_data(final_dir)
        locked.manifest = output.manifest
        locked.trace = output.trace
        finish(locked, Release.Status.DONE)
        locked.save(update_fields=["output_dir", "manifest", "trace"])
        audit.audit_record(
            action=AuditEvent.Action.RELEASE_DONE, dataset=locked.dataset, release=locked
        )


def _release_fail(release, token, reason):
    """End the release as failed if this execution still holds it; refund if data unread."""
    with transaction.atomic():
        dataset, locked = locked_dataset_and_release(release.dataset_id, release.pk)
        if locked.is_terminal or (token and locked.lease_token != token):
            return
        fail_and_refund(dataset, locked, reason)
