"""Workflows that change datasets, budgets and releases. The only code that spends budget.

Views and tasks stay thin: they check permission, validate input and call one function here.
"""

import logging
import math
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from .formatting import plain_number
from .models import AuditEvent, BudgetLedgerEntry, Dataset, PrivacyBudget, Release

logger = logging.getLogger(__name__)

GENESIS_HASH = "0" * 64


class ServiceError(Exception):
    """A refusal to show the user as is: says what is wrong and what to do instead."""

    def __init__(self, message, problems=None):
        super().__init__(message)
        self.problems = problems or [message]  # one line each, for forms that list them


# ---------------------------------------------------------------- audit log


def audit_record(*, action, actor=None, dataset=None, release=None, details=None, remote_addr=None):
    """Append one event to the hash-chained audit log (retries if another writer won the race).

    Each event gets a fresh secret salt (see AuditEvent), so its hash reveals nothing about the
    details or exact time that an auditor's view of it leaves out."""
    for _attempt in range(20):
        try:
            with transaction.atomic():
                last = AuditEvent.objects.order_by("-pk").first()
                event = AuditEvent(
                    action=action,
                    actor=actor if actor is not None and actor.is_authenticated else None,
                    actor_name=getattr(actor, "username", "") or "",
                    dataset=dataset,
                    release=release,
                    details=details or {},
                    remote_addr=remote_addr,
                    previous_hash=last.hash if last else GENESIS_HASH,
                    salt=secrets.token_hex(32),
                )
                event.hash = event.compute_hash()
                event.save()
                return event
        except IntegrityError:
            continue  # a concurrent event took the same previous hash; chain onto it instead
    raise ServiceError("The audit log is busy; please try again.")


def audit_verify_chain() -> list[str]:
    """Return a list of problems in the audit chain (empty when intact)."""
    problems = []
    previous = GENESIS_HASH
    for event in AuditEvent.objects.order_by("pk").iterator():
        if event.previous_hash != previous:
            problems.append(f"event {event.pk}: previous hash does not match event before it")
        if event.compute_hash() != event.hash:
            problems.append(f"event {event.pk}: contents changed after it was written")
        previous = event.hash
    return problems


# ---------------------------------------------------------------- releases: submission and budget
# Lifecycle: queued -> running -> done | failed | cancelled. The budget is debited once, when the
# release is admitted; it is refunded (release_refund, below) only if the release ends before its
# data was ever read. Every path that locks both rows locks the dataset first, then the release;
# the budget row (shared by every upload of the same content) is always locked last.
# The queued row is the outbox: the job is sent to the broker after commit, and the reaper
# resends it if the broker was down or lost its messages.


def release_create(
    *, dataset, user, mechanism, columns, params, epsilon, delta=Decimal("0"), remote_addr=None
):
    """Check and debit the budget, write the queued release and its ledger entry, enqueue the job.

    All in one transaction with the budget row locked, so concurrent requests can never
    overspend, even through two uploads of the same content; the job is sent to the broker only
    after the transaction commits.
    """
    epsilon, delta = Decimal(str(epsilon)), Decimal(str(delta))
    if epsilon <= 0:
        raise ServiceError(f"Privacy budget ε for a release ({epsilon}) must be greater than 0.")
    if delta < 0:
        raise ServiceError(f"δ ({delta}) must be 0 or more.")
    with transaction.atomic():
        locked = _locked_dataset(dataset.pk)
        _check_releasable(locked)
        locked.budget = _locked_budget(locked.budget_id)
        _check_budget(locked.budget, epsilon, delta)
        _pause_for_race_tests()
        release = Release.objects.create(
            dataset=locked,
            requested_by=user,
            mechanism=mechanism,
            columns=list(columns),
            params=params,
            epsilon=epsilon,
            delta=delta,
            neighbouring=locked.neighbouring,
        )
        _ledger_write(locked, release, BudgetLedgerEntry.Kind.DEBIT)
        audit_record(
            action=AuditEvent.Action.RELEASE_REQUESTED,
            actor=user,
            dataset=locked,
            release=release,
            details={"mechanism": mechanism, "epsilon": str(epsilon), "delta": str(delta)},
            remote_addr=remote_addr,
        )
        transaction.on_commit(partial(release_send, release.pk))
    return release


def _locked_dataset(dataset_pk):
    # NO KEY: rows that merely reference the dataset (audit events, ledger entries) can still be
    # inserted meanwhile; a plain FOR UPDATE blocks their foreign-key checks and, with the audit
    # chain's unique previous hash, deadlocks concurrent writers on PostgreSQL.
    return Dataset.objects.select_for_update(no_key=True).get(pk=dataset_pk)


def _locked_budget(budget_pk):
    """The shared budget row, locked (NO KEY, as above): always the last lock a path takes."""
    return PrivacyBudget.objects.select_for_update(no_key=True).get(pk=budget_pk)


def _pause_for_race_tests():
    """Widen the check-then-debit window; only the concurrency tests set this setting."""
    pause = getattr(settings, "DPPORTAL_TEST_PAUSE_BEFORE_DEBIT", 0)
    if pause:
        time.sleep(pause)


def _check_releasable(dataset):
    if dataset.is_deleted:
        raise ServiceError("This dataset has been deleted; no new releases can be made from it.")
    if not dataset.schema_confirmed:
        raise ServiceError("Confirm the dataset's schema (its public metadata) before releasing.")


def _check_budget(budget, epsilon, delta):
    """Refuse a release that does not fit in what is left of `budget` (read under its lock)."""
    if epsilon > budget.epsilon_remaining:
        raise ServiceError(
            f"Not enough privacy budget: this release needs ε = {plain_number(epsilon)}, "
            f"but only ε = {plain_number(budget.epsilon_remaining)} is left of "
            f"{plain_number(budget.epsilon_total)}."
        )
    if delta > budget.delta_remaining:
        raise ServiceError(
            f"Not enough δ budget: this release needs δ = {delta:g}, "
            f"but only δ = {budget.delta_remaining:g} is left."
        )


def _ledger_write(locked_dataset, release, kind):
    """Debit or refund the release's ε and δ on the dataset's shared budget, locked here, with
    the ledger entry (which records what the budget has spent after it)."""
    budget = _locked_budget(locked_dataset.budget_id)
    sign = 1 if kind == BudgetLedgerEntry.Kind.DEBIT else -1
    budget.epsilon_spent += sign * release.epsilon
    budget.delta_spent += sign * release.delta
    budget.save(update_fields=["epsilon_spent", "delta_spent"])
    locked_dataset.budget = budget
    BudgetLedgerEntry.objects.create(
        dataset=locked_dataset,
        release=release,
        kind=kind,
        epsilon=release.epsilon,
        delta=release.delta,
        epsilon_spent_after=budget.epsilon_spent,
        delta_spent_after=budget.delta_spent,
    )


def _finish(locked_release, status, error_message=""):
    locked_release.status = status
    locked_release.error_message = error_message
    locked_release.finished_at = timezone.now()
    locked_release.lease_token = ""
    locked_release.save(update_fields=["status", "error_message", "finished_at", "lease_token"])


# ---------------------------------------------------------------- releases: job delivery


def release_queue(release) -> str:
    """Long jobs (MWEM, large supports) go to their own queue so small ones never wait behind."""
    if release.mechanism == "mwem" or _support_size(release) > settings.DPPORTAL_LONG_JOB_CELLS:
        return settings.DPPORTAL_CELERY_LONG_QUEUE
    return settings.CELERY_TASK_DEFAULT_QUEUE


def _support_size(release) -> int:
    """Cells the mechanism works over: the range-count grid, or the columns' domain."""
    import mechanisms

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
    from kombu.exceptions import OperationalError

    from .tasks import run_release

    release = Release.objects.filter(pk=release_id, status=Release.Status.QUEUED).first()
    if release is None:
        return False
    try:
        run_release.apply_async(args=[release.pk], queue=release_queue(release))
    except (OperationalError, OSError) as exc:
        logger.warning(
            "Job broker unreachable (%s): release %s waits to be sent by the reaper",
            type(exc).__name__,
            release.pk,
        )
        return False
    Release.objects.filter(pk=release.pk).update(enqueued_at=timezone.now())
    return True


# ---------------------------------------------------------------- releases: execution
# A worker may only finish a release while it holds the lease: a random token written when it
# claims the job and kept fresh by a heartbeat thread. A redelivered message finds a live lease
# and does nothing, so one release never runs twice at once and never publishes two outputs.


TIME_LIMIT_MESSAGE = (
    "This release took longer than the time limit and was stopped. "
    "Try fewer columns, bins or rounds."
)


def release_output_dir(release) -> Path:
    return Path(settings.DATA_DIR) / "releases" / str(release.pk)


def release_run(*, release_id):
    """Run a queued release once: load the data, call the mechanism, store the public package.

    Safe to deliver twice: a finished release is never recomputed, and a running one is left to
    the execution holding its lease.
    """
    from celery.exceptions import SoftTimeLimitExceeded

    from . import release_engine

    claim = _release_claim(release_id)
    if claim is None:
        return
    release, token = claim
    with _heartbeat(release.pk, token), _work_dir(release, token) as work_dir:
        try:
            _mark_data_read(release, token)
            output = release_engine.compute(release, progress=_progress_writer(release.pk, token))
            _release_store(release, token, output, work_dir)
            release_store_utility_report(release.pk)
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
        if release.status == Release.Status.RUNNING and _lease_alive(release, now):
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
        audit_record(
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


def _lease_alive(release, now) -> bool:
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


class LeaseLost(Exception):
    """This execution no longer holds the release's lease; it must stop without writing."""


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
    path = Path(settings.DATA_DIR) / "work" / f"{release.pk}-{token}"
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
        (package / name).write_bytes(content)
    final_dir = release_output_dir(release).with_name(f"{release.pk}-{token[:12]}")
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    with transaction.atomic():
        locked = Release.objects.select_for_update(no_key=True).get(pk=release.pk)
        if locked.lease_token != token or locked.output_dir or locked.is_terminal:
            raise LeaseLost(f"release {release.pk}: output discarded, lease no longer held")
        package.rename(final_dir)
        locked.output_dir = str(final_dir.relative_to(settings.DATA_DIR))
        locked.manifest = output.manifest
        locked.trace = output.trace
        _finish(locked, Release.Status.DONE)
        locked.save(update_fields=["output_dir", "manifest", "trace"])
        audit_record(action=AuditEvent.Action.RELEASE_DONE, dataset=locked.dataset, release=locked)


def _release_fail(release, token, reason):
    """End the release as failed if this execution still holds it; refund if data unread."""
    with transaction.atomic():
        dataset, locked = _locked_dataset_and_release(release.dataset_id, release.pk)
        if locked.is_terminal or (token and locked.lease_token != token):
            return
        _fail_and_refund(dataset, locked, reason)


def _locked_dataset_and_release(dataset_pk, release_pk):
    """Lock in the one order every budget path uses (dataset, then release): no deadlocks."""
    dataset = _locked_dataset(dataset_pk)
    return dataset, Release.objects.select_for_update(no_key=True).get(pk=release_pk)


def _fail_and_refund(dataset, locked, reason):
    _finish(locked, Release.Status.FAILED, reason)
    audit_record(
        action=AuditEvent.Action.RELEASE_FAILED,
        dataset=dataset,
        release=locked,
        details={"reason": reason},
    )
    release_refund(dataset=dataset, release=locked)


# ---------------------------------------------------------------- releases: the reaper


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
        counts["sent"] += release_send(pk)
    counts["files_removed"] = _remove_orphan_files(now)
    counts["uploads_removed"] = dataset_remove_orphan_files()
    return counts


def _reap_running(release_pk, dataset_pk, now):
    with transaction.atomic():
        dataset, locked = _locked_dataset_and_release(dataset_pk, release_pk)
        if locked.status != Release.Status.RUNNING or _lease_alive(locked, now):
            return None
        runtime = (now - (locked.attempt_started_at or locked.started_at or now)).total_seconds()
        if runtime > settings.CELERY_TASK_TIME_LIMIT:
            _fail_and_refund(dataset, locked, TIME_LIMIT_MESSAGE)
            return "failed"
        if locked.attempts >= settings.DPPORTAL_RELEASE_MAX_ATTEMPTS:
            _fail_and_refund(
                dataset,
                locked,
                "The worker running this release stopped "
                f"{locked.attempts} times, so it was given up.",
            )
            return "failed"
        locked.status, locked.lease_token, locked.enqueued_at = Release.Status.QUEUED, "", None
        locked.save(update_fields=["status", "lease_token", "enqueued_at"])
        audit_record(
            action=AuditEvent.Action.RELEASE_RETRIED,
            dataset=locked.dataset,
            release=locked,
            details={"after_attempt": locked.attempts},
        )
    return "retried"


SEND_GRACE = timedelta(seconds=10)  # leave a fresh submission to its own after-commit send
BROKER_EPOCH_KEY = "dpportal:broker-epoch"


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
    import redis

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
    data_dir = Path(settings.DATA_DIR)
    cutoff = (now - timedelta(seconds=settings.DPPORTAL_LEASE_SECONDS)).timestamp()
    live_tokens = set(
        Release.objects.filter(status=Release.Status.RUNNING).values_list("lease_token", flat=True)
    )
    published = set(Release.objects.exclude(output_dir="").values_list("output_dir", flat=True))
    removed = 0
    for path in _children(data_dir / "work"):
        if path.name.partition("-")[2] not in live_tokens and path.stat().st_mtime < cutoff:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    for path in _children(data_dir / "releases"):
        if (
            str(path.relative_to(data_dir)) not in published
            and "-" in path.name
            and path.stat().st_mtime < cutoff
        ):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _children(folder: Path):
    return list(folder.iterdir()) if folder.is_dir() else []


# ---------------------------------------------------------------- release pages: cancel and refund
# Refund rule: a release cancelled (or failed) before its data was read gets its budget back
# with a REFUND ledger entry; once the data was read, the budget stays spent.


def release_cancel(*, release, user, remote_addr=None):
    """Cancel a queued release; refund its budget only if its data was never read (a release
    queued again after its worker died may already have been read: its budget stays spent)."""
    with transaction.atomic():
        dataset, locked = _locked_dataset_and_release(release.dataset_id, release.pk)
        if locked.status != Release.Status.QUEUED:
            raise ServiceError(
                f"Only a queued release can be cancelled; this one is "
                f"{locked.get_status_display().lower()}."
            )
        _finish(locked, Release.Status.CANCELLED)
        audit_record(
            action=AuditEvent.Action.RELEASE_CANCELLED,
            actor=user,
            dataset=dataset,
            release=locked,
            remote_addr=remote_addr,
        )
        release_refund(dataset=dataset, release=locked, actor=user, remote_addr=remote_addr)
    return locked


def release_refund(*, dataset, release, actor=None, remote_addr=None):
    """Give a release's budget back to its dataset, once, if its data was never read.

    Call inside a transaction holding the locks on `dataset` and `release` (in that order).
    Returns True if a refund was made.
    """
    if release.data_was_read or release.output_dir:
        return False
    if release.ledger.filter(kind=BudgetLedgerEntry.Kind.REFUND).exists():
        return False
    _ledger_write(dataset, release, BudgetLedgerEntry.Kind.REFUND)
    audit_record(
        action=AuditEvent.Action.RELEASE_REFUNDED,
        actor=actor,
        dataset=dataset,
        release=release,
        remote_addr=remote_addr,
        details={"epsilon": str(release.epsilon), "delta": str(release.delta)},
    )
    return True


def release_store_utility_report(release_pk):
    """Compare a finished release with the raw data and store it custodian-only, apart from the
    public package; then prepare the package's zip and chart data so pages open fast. A failure
    here only leaves them to be made later: the release stands."""
    from . import utility

    utility.after_publish(Release.objects.select_related("dataset").get(pk=release_pk))


def release_remove_utility_reports(dataset):
    """Delete the custodian-only comparisons with the raw data of every release of a dataset
    (they are derived from the raw data, which is being deleted)."""
    from . import utility

    for release in dataset.releases.all():
        utility.report_path(release).unlink(missing_ok=True)


# ---------------------------------------------------------------- datasets
# Files go through dpportal.ingest (validation, Parquet copy, profile) into private storage;
# nothing is left behind when a file is refused.

MAX_EPSILON_TOTAL = Decimal("100")
DATASET_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx")


def dataset_create_from_path(
    *,
    owner,
    name,
    source_path,
    epsilon_total,
    delta_total=Decimal("0"),
    description="",
    attribution="",
    neighbouring="replace-one",
    header=None,
):
    """Ingest a file on disk (CSV/TSV/XLSX, optionally gzip-compressed) as a new dataset."""
    import gzip

    from . import ingest, storage

    source_path = Path(source_path)
    filename = source_path.name.removesuffix(".gz")
    opener = gzip.open if source_path.suffix == ".gz" else open
    scan = ingest.ByteScan()
    with opener(source_path, "rb") as handle:
        _name, path = storage.write_private(
            iter(lambda: handle.read(1 << 20), b""), ".upload", scan
        )
    try:
        return _dataset_create(
            owner=owner,
            name=name,
            description=description,
            attribution=attribution,
            original_path=path,
            scan=scan,
            filename=filename,
            epsilon_total=epsilon_total,
            delta_total=delta_total,
            neighbouring=neighbouring,
            header=header,
        )
    finally:
        path.unlink(missing_ok=True)


def dataset_create_from_upload(
    *,
    owner,
    upload,
    name,
    epsilon_total,
    delta_total=Decimal("0"),
    description="",
    neighbouring="replace-one",
    header=None,
    remote_addr=None,
):
    """Register an upload that streamed into private storage (`storage.PrivateUpload`)."""
    dataset_remove_orphan_files()
    try:
        return _dataset_create(
            owner=owner,
            name=name,
            description=description,
            attribution="",
            original_path=upload.path,
            scan=upload.scan,
            filename=upload.name,
            epsilon_total=epsilon_total,
            delta_total=delta_total,
            neighbouring=neighbouring,
            header=header,
            remote_addr=remote_addr,
        )
    finally:
        upload.discard()


def dataset_remove_orphan_files(older_than_hours=6) -> int:
    """Remove stored files no dataset refers to: parts of uploads cut off by a killed process."""
    from . import storage

    referenced = set()
    for names in Dataset.objects.values_list("storage_name", "parquet_name"):
        referenced.update(names)
    return storage.remove_orphans(referenced - {""}, older_than_hours * 3600)


def _dataset_create(
    *,
    owner,
    name,
    description,
    attribution,
    original_path,
    scan,
    filename,
    epsilon_total,
    delta_total,
    neighbouring,
    header,
    remote_addr=None,
):
    """Validate, write the Parquet copy, keep or drop the original, register and audit.

    The dataset draws on the budget of any earlier upload of the same content in its scope
    (deleted ones included), whose total and neighbouring relation stay as they are; only a new
    content gets a budget with the totals asked for here.
    """
    from . import ingest, storage

    epsilon_total, delta_total = _budget_values(epsilon_total, delta_total)
    _check_neighbouring(neighbouring)
    suffix = Path(filename).suffix.lower()
    if suffix not in DATASET_SUFFIXES:
        raise ServiceError(
            f"Files of type {suffix or '(none)'!r} cannot be read; upload a CSV, "
            "TSV or Excel (.xlsx) file."
        )
    parquet_name, parquet_path = storage.new_private_file(".parquet")
    kept_name = ""
    try:
        result = _ingest_file(original_path, scan, parquet_path, suffix, header)
        fingerprint = ingest.content_fingerprint(parquet_path)
        if settings.DPPORTAL_KEEP_ORIGINAL_UPLOADS:
            kept_name, kept_path = storage.new_private_file(suffix)
            Path(original_path).replace(kept_path)
        with transaction.atomic():
            budget, created = PrivacyBudget.objects.get_or_create(
                scope=budget_scope(owner),
                fingerprint=fingerprint,
                defaults={
                    "epsilon_total": epsilon_total,
                    "delta_total": delta_total,
                    "neighbouring": neighbouring,
                },
            )
            dataset = Dataset.objects.create(
                owner=owner,
                name=name,
                description=description,
                attribution=attribution,
                original_filename=filename[:255],
                storage_name=kept_name,
                parquet_name=parquet_name,
                sha256=scan.hexdigest,
                size_bytes=scan.size,
                row_count=result.row_count,
                columns=result.columns,
                profile={"read_as": result.details, "proposals": result.proposals},
                budget=budget,
            )
            audit_record(
                action=AuditEvent.Action.UPLOAD,
                actor=owner,
                dataset=dataset,
                remote_addr=remote_addr,
                details={
                    "file": dataset.original_filename,
                    "sha256": scan.hexdigest,
                    "rows": result.row_count,
                    "columns": len(result.columns),
                    "epsilon_total": str(epsilon_total),
                    "delta_total": str(delta_total),
                    "budget": budget.pk,
                    "shared_budget": not created,
                },
            )
    except BaseException:
        storage.remove(parquet_name)
        storage.remove(kept_name)
        raise
    return dataset


def budget_scope(owner) -> str:
    """Who shares budgets: one owner's uploads (default), or the whole portal (one organisation,
    DPPORTAL_SHARE_FINGERPRINTS_ACROSS_OWNERS). Across scopes nothing is ever compared."""
    return "portal" if settings.DPPORTAL_SHARE_FINGERPRINTS_ACROSS_OWNERS else f"owner:{owner.pk}"


def dataset_shared_with(dataset):
    """The earliest other dataset (deleted or not) drawing on the same budget, or None."""
    return (
        Dataset.objects.filter(budget_id=dataset.budget_id)
        .exclude(pk=dataset.pk)
        .order_by("created_at", "pk")
        .first()
    )


def _ingest_file(path, scan, parquet_path, suffix, header):
    from . import ingest, storage

    text_name = ""
    try:
        if suffix == ".xlsx":
            text_name, text_path = storage.new_private_file(".csv")
            ingest.xlsx_to_csv(path, text_path)
            result = ingest.ingest_text(
                text_path, ingest.scan_file(text_path), parquet_path, suffix=".csv", header=header
            )
            result.details["format"] = "Excel workbook (first sheet)"
            return result
        return ingest.ingest_text(path, scan, parquet_path, suffix=suffix, header=header)
    except ingest.IngestError as exc:
        raise ServiceError(str(exc)) from None
    finally:
        storage.remove(text_name)


def _budget_values(epsilon_total, delta_total):
    try:
        epsilon, delta = Decimal(str(epsilon_total)), Decimal(str(delta_total))
    except ArithmeticError:
        raise ServiceError(
            f"The budget ({epsilon_total!r}, {delta_total!r}) must be numbers."
        ) from None
    if not (0 < epsilon <= MAX_EPSILON_TOTAL):
        raise ServiceError(
            f"Total ε ({epsilon}) must be greater than 0 and at most {MAX_EPSILON_TOTAL}."
        )
    if not (0 <= delta < 1):
        raise ServiceError(f"Total δ ({delta}) must be at least 0 and below 1.")
    return epsilon, delta


def _check_neighbouring(neighbouring):
    from .models import Neighbouring

    if neighbouring not in Neighbouring.values:
        raise ServiceError(
            f"Neighbouring relation ({neighbouring!r}) must be one of "
            f"{', '.join(Neighbouring.values)}."
        )


def dataset_change_budget(
    *, dataset, user, epsilon_total, delta_total, neighbouring=None, remote_addr=None
):
    """Change the total budget: anything before the first release, only lower afterwards.

    The budget is shared by every upload of the same content, so the change applies to all of
    them, and "the first release" means the first release of any of them.
    """
    epsilon_total, delta_total = _budget_values(epsilon_total, delta_total)
    with transaction.atomic():
        locked = _locked_dataset(dataset.pk)
        budget = locked.budget = _locked_budget(locked.budget_id)
        neighbouring = neighbouring or budget.neighbouring
        _check_neighbouring(neighbouring)
        before = {
            "epsilon_total": str(budget.epsilon_total),
            "delta_total": str(budget.delta_total),
            "neighbouring": budget.neighbouring,
        }
        _check_budget_change(locked, epsilon_total, delta_total, neighbouring)
        budget.epsilon_total, budget.delta_total = epsilon_total, delta_total
        budget.neighbouring = neighbouring
        after = {
            "epsilon_total": str(epsilon_total),
            "delta_total": str(delta_total),
            "neighbouring": neighbouring,
        }
        if after == before:
            return locked
        budget.save(update_fields=["epsilon_total", "delta_total", "neighbouring"])
        audit_record(
            action=AuditEvent.Action.BUDGET_CHANGED,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
            details={"before": before, "after": after},
        )
    return locked


def _check_budget_change(locked, epsilon_total, delta_total, neighbouring):
    if locked.is_deleted:
        raise ServiceError("This dataset has been deleted; its budget can no longer change.")
    if neighbouring == "add-remove" != locked.neighbouring and _ever_had_auditors(locked):
        raise ServiceError(
            "Under replace-one the number of rows is public, and auditors have already been able "
            "to see it, so the relation can no longer become add-remove: upload the data as a new "
            "dataset if its row count must stay private."
        )
    if not Release.objects.filter(dataset__budget_id=locked.budget_id).exists():
        return
    if epsilon_total > locked.epsilon_total or delta_total > locked.delta_total:
        raise ServiceError(
            f"Once a release exists the budget can be lowered but never raised: the total is "
            f"ε = {plain_number(locked.epsilon_total)}, δ = {plain_number(locked.delta_total)}."
        )
    if epsilon_total < locked.epsilon_spent or delta_total < locked.delta_spent:
        raise ServiceError(
            f"The total cannot go below what releases have already spent: "
            f"ε = {plain_number(locked.epsilon_spent)}, δ = {plain_number(locked.delta_spent)}."
        )
    if neighbouring != locked.neighbouring:
        raise ServiceError("The neighbouring relation cannot change once a release exists.")


def _ever_had_auditors(dataset) -> bool:
    """Whether anyone but the owner has had access to a dataset sharing this budget."""
    sharing = Dataset.objects.filter(budget_id=dataset.budget_id)
    granted = AuditEvent.objects.filter(
        action=AuditEvent.Action.ACCESS_CHANGED, dataset__in=sharing
    )
    return granted.exists() or sharing.filter(auditors__isnull=False).exists()


def dataset_set_auditor(*, dataset, user, username, add, remote_addr=None):
    """Give or take away read-only access to the dataset's releases, ledger and audit log."""
    from django.contrib.auth import get_user_model

    with transaction.atomic():
        locked = _locked_dataset(dataset.pk)
        auditor = get_user_model().objects.filter(username=username).first()
        if auditor is None:
            raise ServiceError(f"There is no user named {username!r}; check the spelling.")
        if auditor.pk == locked.owner_id:
            raise ServiceError(f"{username!r} owns this dataset and already sees everything.")
        if add == locked.auditors.filter(pk=auditor.pk).exists():
            return locked
        (locked.auditors.add if add else locked.auditors.remove)(auditor)
        audit_record(
            action=AuditEvent.Action.ACCESS_CHANGED,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
            details={"auditor": auditor.username, "change": "added" if add else "removed"},
        )
    return locked


def dataset_delete(*, dataset, user, remote_addr=None):
    """Remove the raw file, the Parquet copy and the data profile; releases, ledger, audit stay."""
    from . import storage

    with transaction.atomic():
        locked = _locked_dataset(dataset.pk)
        if locked.is_deleted:
            return locked
        if locked.releases.filter(
            status__in=[Release.Status.QUEUED, Release.Status.RUNNING]
        ).exists():
            raise ServiceError(
                "Releases of this dataset are still queued or running; wait for "
                "them to finish or cancel them, then delete the dataset."
            )
        files = [locked.storage_name, locked.parquet_name]
        locked.deleted_at = timezone.now()
        locked.storage_name = locked.parquet_name = ""
        locked.profile = None
        locked.save(update_fields=["deleted_at", "storage_name", "parquet_name", "profile"])
        audit_record(
            action=AuditEvent.Action.DELETION,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
            details={"sha256": locked.sha256},
        )
        for name in files:
            transaction.on_commit(lambda name=name: storage.remove(name))
        transaction.on_commit(lambda: release_remove_utility_reports(locked))
    return locked


def dataset_confirm_schema(*, dataset, user, schema, remote_addr=None):
    """Validate and store the custodian's public metadata; releases become possible.

    The stored table is checked against the schema first (`schema_checks`): a schema is only
    confirmed if no value in the data would make a release of it fail, so once a release has
    started, data content can never make it fail.
    """
    import mechanisms

    from . import release_engine, schema_checks

    try:
        parsed = mechanisms.Schema.from_dict(schema)
    except mechanisms.MechanismError as exc:
        raise ServiceError(str(exc)) from exc
    validated = parsed.to_dict()
    names = [column["name"] for column in validated["columns"]]
    if dataset.columns and names != list(dataset.columns):
        raise ServiceError(
            f"The schema must list the dataset's columns in order "
            f"({', '.join(dataset.columns)}); it lists {', '.join(names)}."
        )
    path = release_engine.dataset_path(dataset)
    if dataset.parquet_name and path.exists():
        problems = schema_checks.data_problems(path, parsed)
        if problems:
            raise ServiceError(" ".join(problems), problems)
    with transaction.atomic():
        locked = _locked_dataset(dataset.pk)
        if locked.is_deleted:
            raise ServiceError("This dataset has been deleted; its schema can no longer change.")
        locked.schema = validated
        locked.schema_confirmed_at = timezone.now()
        locked.save(update_fields=["schema", "schema_confirmed_at"])
        audit_record(
            action=AuditEvent.Action.SCHEMA_CONFIRMED,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
        )
    return locked
