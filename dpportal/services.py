"""Workflows that change datasets, budgets and releases. The only code that spends budget.

Views and tasks stay thin: they check permission, validate input and call one function here.
"""

import logging
import shutil
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import AuditEvent, BudgetLedgerEntry, Dataset, Release

logger = logging.getLogger(__name__)

GENESIS_HASH = "0" * 64


class ServiceError(Exception):
    """A refusal to show the user as is: says what is wrong and what to do instead."""


# ---------------------------------------------------------------- audit log


def audit_record(*, action, actor=None, dataset=None, release=None, details=None, remote_addr=None):
    """Append one event to the hash-chained audit log (retries if another writer won the race)."""
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


# ---------------------------------------------------------------- releases


def release_create(
    *, dataset, user, mechanism, columns, params, epsilon, delta=Decimal("0"), remote_addr=None
):
    """Check and debit the budget, write the queued release and its ledger entry, enqueue the job.

    All in one transaction with the dataset row locked, so concurrent requests can never
    overspend; the job is enqueued only after the transaction commits.
    """
    from .tasks import run_release

    epsilon, delta = Decimal(str(epsilon)), Decimal(str(delta))
    if epsilon <= 0:
        raise ServiceError(f"Privacy budget ε for a release ({epsilon}) must be greater than 0.")
    if delta < 0:
        raise ServiceError(f"δ ({delta}) must be 0 or more.")
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        _check_releasable(locked)
        _check_budget(locked, epsilon, delta)
        locked.epsilon_spent += epsilon
        locked.delta_spent += delta
        locked.save(update_fields=["epsilon_spent", "delta_spent"])
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
        BudgetLedgerEntry.objects.create(
            dataset=locked,
            release=release,
            epsilon=epsilon,
            delta=delta,
            epsilon_spent_after=locked.epsilon_spent,
            delta_spent_after=locked.delta_spent,
        )
        audit_record(
            action=AuditEvent.Action.RELEASE_REQUESTED,
            actor=user,
            dataset=locked,
            release=release,
            details={"mechanism": mechanism, "epsilon": str(epsilon), "delta": str(delta)},
            remote_addr=remote_addr,
        )
        run_release.delay_on_commit(release.pk)
    return release


def _check_releasable(dataset):
    if dataset.is_deleted:
        raise ServiceError("This dataset has been deleted; no new releases can be made from it.")
    if not dataset.schema_confirmed:
        raise ServiceError("Confirm the dataset's schema (its public metadata) before releasing.")


def _check_budget(dataset, epsilon, delta):
    if epsilon > dataset.epsilon_remaining:
        raise ServiceError(
            f"Not enough privacy budget: this release needs ε = {epsilon.normalize()}, "
            f"but only ε = {dataset.epsilon_remaining.normalize()} is left of "
            f"{dataset.epsilon_total.normalize()}."
        )
    if delta > dataset.delta_remaining:
        raise ServiceError(
            f"Not enough δ budget: this release needs δ = {delta:g}, "
            f"but only δ = {dataset.delta_remaining:g} is left."
        )


def release_output_dir(release) -> Path:
    return Path(settings.DATA_DIR) / "releases" / str(release.pk)


def release_run(*, release_id, progress_every_seconds=1.0):
    """Run a queued release once: load the data, call the mechanism, store the public package.

    Idempotent: a release that is terminal or already has output is never recomputed, so a
    redelivered task never publishes a second noisy output.
    """
    release = _release_claim(release_id)
    if release is None:
        return
    from . import release_engine

    try:
        output = release_engine.compute(release, progress=_progress_writer(release.pk))
        _release_store(release, output)
    except release_engine.ReleaseInputError as exc:
        _release_fail(release, str(exc))
    except Exception:
        logger.exception("Release %s failed", release.pk)
        _release_fail(release, "An internal error stopped this release. The team has the details.")


def _release_claim(release_id):
    with transaction.atomic():
        release = Release.objects.select_for_update().filter(pk=release_id).first()
        if release is None or release.is_terminal or release.output_dir:
            return None
        release.status = Release.Status.RUNNING
        release.started_at = release.started_at or timezone.now()
        release.heartbeat_at = timezone.now()
        release.save(update_fields=["status", "started_at", "heartbeat_at"])
        audit_record(action=AuditEvent.Action.RELEASE_STARTED, dataset=release.dataset,
                     release=release)
    return release


def _progress_writer(release_pk):
    def report(done: int, total: int, stage: str = ""):
        Release.objects.filter(pk=release_pk).update(
            progress_done=done, progress_total=total, progress_stage=stage[:100],
            heartbeat_at=timezone.now(),
        )

    return report


def _release_store(release, output):
    """Write the public files to a temporary folder, then publish it with one rename."""
    final_dir = release_output_dir(release)
    temp_dir = final_dir.with_name(f".{final_dir.name}.tmp")
    shutil.rmtree(temp_dir, ignore_errors=True)
    temp_dir.mkdir(parents=True, mode=0o700)
    for name, content in output.files.items():
        (temp_dir / name).write_bytes(content)
    with transaction.atomic():
        locked = Release.objects.select_for_update().get(pk=release.pk)
        if locked.output_dir or locked.is_terminal:
            shutil.rmtree(temp_dir, ignore_errors=True)
            return
        temp_dir.rename(final_dir)
        locked.output_dir = str(final_dir.relative_to(settings.DATA_DIR))
        locked.manifest = output.manifest
        locked.trace = output.trace
        locked.status = Release.Status.DONE
        locked.finished_at = timezone.now()
        locked.data_was_read = True
        locked.save()
        audit_record(action=AuditEvent.Action.RELEASE_DONE, dataset=locked.dataset,
                     release=locked)


def _release_fail(release, reason):
    with transaction.atomic():
        locked = Release.objects.select_for_update().get(pk=release.pk)
        if locked.is_terminal:
            return
        locked.status = Release.Status.FAILED
        locked.error_message = reason
        locked.finished_at = timezone.now()
        locked.save(update_fields=["status", "error_message", "finished_at"])
        audit_record(action=AuditEvent.Action.RELEASE_FAILED, dataset=locked.dataset,
                     release=locked, details={"reason": reason})


# ---------------------------------------------------------------- datasets


def dataset_create_from_path(
    *, owner, name, source_path, epsilon_total, delta_total=Decimal("0"), description="",
    attribution="",
):
    """Store a CSV (optionally gzip-compressed) privately and register it as a dataset."""
    import gzip

    import pandas as pd

    from . import storage

    source_path = Path(source_path)
    opener = gzip.open if source_path.suffix == ".gz" else open
    with opener(source_path, "rb") as handle:
        storage_name, sha256, size = storage.write_private(iter(lambda: handle.read(1 << 20), b""))
    header = pd.read_csv(storage.storage_dir() / storage_name, nrows=0).columns
    with open(storage.storage_dir() / storage_name, "rb") as handle:
        row_count = sum(1 for _ in handle) - 1
    with transaction.atomic():
        dataset = Dataset.objects.create(
            owner=owner, name=name, description=description, attribution=attribution,
            original_filename=source_path.name.removesuffix(".gz"), storage_name=storage_name,
            sha256=sha256, size_bytes=size, row_count=row_count, columns=list(header),
            epsilon_total=Decimal(str(epsilon_total)), delta_total=Decimal(str(delta_total)),
        )
        audit_record(action=AuditEvent.Action.UPLOAD, actor=owner, dataset=dataset,
                     details={"file": dataset.original_filename, "sha256": sha256})
    return dataset


def dataset_confirm_schema(*, dataset, user, schema, remote_addr=None):
    """Validate and store the custodian's public metadata; releases become possible."""
    import mechanisms

    try:
        validated = mechanisms.Schema.from_dict(schema).to_dict()
    except mechanisms.MechanismError as exc:
        raise ServiceError(str(exc)) from exc
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        locked.schema = validated
        locked.schema_confirmed_at = timezone.now()
        locked.save(update_fields=["schema", "schema_confirmed_at"])
        audit_record(action=AuditEvent.Action.SCHEMA_CONFIRMED, actor=user, dataset=locked,
                     remote_addr=remote_addr)
    return locked
