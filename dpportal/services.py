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
# Files go through dpportal.ingest (validation, Parquet copy, profile) into private storage;
# nothing is left behind when a file is refused.

MAX_EPSILON_TOTAL = Decimal("100")
DATASET_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx")


def dataset_create_from_path(
    *, owner, name, source_path, epsilon_total, delta_total=Decimal("0"), description="",
    attribution="", neighbouring="replace-one", header=None,
):
    """Ingest a file on disk (CSV/TSV/XLSX, optionally gzip-compressed) as a new dataset."""
    import gzip

    from . import ingest, storage

    source_path = Path(source_path)
    filename = source_path.name.removesuffix(".gz")
    opener = gzip.open if source_path.suffix == ".gz" else open
    scan = ingest.ByteScan()
    with opener(source_path, "rb") as handle:
        _name, path = storage.write_private(iter(lambda: handle.read(1 << 20), b""), ".upload",
                                            scan)
    try:
        return _dataset_create(
            owner=owner, name=name, description=description, attribution=attribution,
            original_path=path, scan=scan, filename=filename, epsilon_total=epsilon_total,
            delta_total=delta_total, neighbouring=neighbouring, header=header,
        )
    finally:
        path.unlink(missing_ok=True)


def dataset_create_from_upload(
    *, owner, upload, name, epsilon_total, delta_total=Decimal("0"), description="",
    neighbouring="replace-one", header=None, remote_addr=None,
):
    """Register an upload that streamed into private storage (`storage.PrivateUpload`)."""
    try:
        return _dataset_create(
            owner=owner, name=name, description=description, attribution="",
            original_path=upload.path, scan=upload.scan, filename=upload.name,
            epsilon_total=epsilon_total, delta_total=delta_total, neighbouring=neighbouring,
            header=header, remote_addr=remote_addr,
        )
    finally:
        upload.discard()


def _dataset_create(*, owner, name, description, attribution, original_path, scan, filename,
                    epsilon_total, delta_total, neighbouring, header, remote_addr=None):
    """Validate, write the Parquet copy, keep or drop the original, register and audit."""
    from . import storage

    epsilon_total, delta_total = _budget_values(epsilon_total, delta_total)
    _check_neighbouring(neighbouring)
    suffix = Path(filename).suffix.lower()
    if suffix not in DATASET_SUFFIXES:
        raise ServiceError(f"Files of type {suffix or '(none)'!r} cannot be read; upload a CSV, "
                           "TSV or Excel (.xlsx) file.")
    parquet_name, parquet_path = storage.new_private_file(".parquet")
    kept_name = ""
    try:
        result = _ingest_file(original_path, scan, parquet_path, suffix, header)
        if settings.DPPORTAL_KEEP_ORIGINAL_UPLOADS:
            kept_name, kept_path = storage.new_private_file(suffix)
            Path(original_path).replace(kept_path)
        with transaction.atomic():
            dataset = Dataset.objects.create(
                owner=owner, name=name, description=description, attribution=attribution,
                original_filename=filename[:255], storage_name=kept_name,
                parquet_name=parquet_name, sha256=scan.hexdigest, size_bytes=scan.size,
                row_count=result.row_count, columns=result.columns,
                profile={"read_as": result.details, "proposals": result.proposals},
                epsilon_total=epsilon_total, delta_total=delta_total, neighbouring=neighbouring,
            )
            audit_record(action=AuditEvent.Action.UPLOAD, actor=owner, dataset=dataset,
                         remote_addr=remote_addr,
                         details={"file": dataset.original_filename, "sha256": scan.hexdigest,
                                  "rows": result.row_count, "columns": len(result.columns),
                                  "epsilon_total": str(epsilon_total),
                                  "delta_total": str(delta_total)})
    except BaseException:
        storage.remove(parquet_name)
        storage.remove(kept_name)
        raise
    return dataset


def _ingest_file(path, scan, parquet_path, suffix, header):
    from . import ingest, storage

    text_name = ""
    try:
        if suffix == ".xlsx":
            text_name, text_path = storage.new_private_file(".csv")
            ingest.xlsx_to_csv(path, text_path)
            result = ingest.ingest_text(text_path, ingest.scan_file(text_path), parquet_path,
                                        suffix=".csv", header=header)
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
        raise ServiceError(f"The budget ({epsilon_total!r}, {delta_total!r}) must be numbers.")\
            from None
    if not (0 < epsilon <= MAX_EPSILON_TOTAL):
        raise ServiceError(f"Total ε ({epsilon}) must be greater than 0 and at most "
                           f"{MAX_EPSILON_TOTAL}.")
    if not (0 <= delta < 1):
        raise ServiceError(f"Total δ ({delta}) must be at least 0 and below 1.")
    return epsilon, delta


def _check_neighbouring(neighbouring):
    from .models import Neighbouring

    if neighbouring not in Neighbouring.values:
        raise ServiceError(f"Neighbouring relation ({neighbouring!r}) must be one of "
                           f"{', '.join(Neighbouring.values)}.")


def dataset_change_budget(*, dataset, user, epsilon_total, delta_total, neighbouring=None,
                          remote_addr=None):
    """Change the total budget: anything before the first release, only lower afterwards."""
    epsilon_total, delta_total = _budget_values(epsilon_total, delta_total)
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        neighbouring = neighbouring or locked.neighbouring
        _check_neighbouring(neighbouring)
        before = {"epsilon_total": str(locked.epsilon_total),
                  "delta_total": str(locked.delta_total), "neighbouring": locked.neighbouring}
        _check_budget_change(locked, epsilon_total, delta_total, neighbouring)
        locked.epsilon_total, locked.delta_total = epsilon_total, delta_total
        locked.neighbouring = neighbouring
        after = {"epsilon_total": str(epsilon_total), "delta_total": str(delta_total),
                 "neighbouring": neighbouring}
        if after == before:
            return locked
        locked.save(update_fields=["epsilon_total", "delta_total", "neighbouring"])
        audit_record(action=AuditEvent.Action.BUDGET_CHANGED, actor=user, dataset=locked,
                     remote_addr=remote_addr, details={"before": before, "after": after})
    return locked


def _check_budget_change(locked, epsilon_total, delta_total, neighbouring):
    if locked.is_deleted:
        raise ServiceError("This dataset has been deleted; its budget can no longer change.")
    if not locked.releases.exists():
        return
    if epsilon_total > locked.epsilon_total or delta_total > locked.delta_total:
        raise ServiceError(
            f"Once a release exists the budget can be lowered but never raised: the total is "
            f"ε = {locked.epsilon_total.normalize()}, δ = {locked.delta_total.normalize()}.")
    if epsilon_total < locked.epsilon_spent or delta_total < locked.delta_spent:
        raise ServiceError(
            f"The total cannot go below what releases have already spent: "
            f"ε = {locked.epsilon_spent.normalize()}, δ = {locked.delta_spent.normalize()}.")
    if neighbouring != locked.neighbouring:
        raise ServiceError("The neighbouring relation cannot change once a release exists.")


def dataset_set_auditor(*, dataset, user, username, add, remote_addr=None):
    """Give or take away read-only access to the dataset's releases, ledger and audit log."""
    from django.contrib.auth import get_user_model

    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        auditor = get_user_model().objects.filter(username=username).first()
        if auditor is None:
            raise ServiceError(f"There is no user named {username!r}; check the spelling.")
        if auditor.pk == locked.owner_id:
            raise ServiceError(f"{username!r} owns this dataset and already sees everything.")
        if add == locked.auditors.filter(pk=auditor.pk).exists():
            return locked
        (locked.auditors.add if add else locked.auditors.remove)(auditor)
        audit_record(action=AuditEvent.Action.ACCESS_CHANGED, actor=user, dataset=locked,
                     remote_addr=remote_addr,
                     details={"auditor": auditor.username, "change": "added" if add else "removed"})
    return locked


def dataset_delete(*, dataset, user, remote_addr=None):
    """Remove the raw file, the Parquet copy and the data profile; releases, ledger, audit stay."""
    from . import storage

    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        if locked.is_deleted:
            return locked
        if locked.releases.filter(status__in=[Release.Status.QUEUED,
                                              Release.Status.RUNNING]).exists():
            raise ServiceError("Releases of this dataset are still queued or running; wait for "
                               "them to finish or cancel them, then delete the dataset.")
        files = [locked.storage_name, locked.parquet_name]
        locked.deleted_at = timezone.now()
        locked.storage_name = locked.parquet_name = ""
        locked.profile = None
        locked.save(update_fields=["deleted_at", "storage_name", "parquet_name", "profile"])
        audit_record(action=AuditEvent.Action.DELETION, actor=user, dataset=locked,
                     remote_addr=remote_addr, details={"sha256": locked.sha256})
        for name in files:
            transaction.on_commit(lambda name=name: storage.remove(name))
    return locked


def dataset_confirm_schema(*, dataset, user, schema, remote_addr=None):
    """Validate and store the custodian's public metadata; releases become possible."""
    import mechanisms

    try:
        validated = mechanisms.Schema.from_dict(schema).to_dict()
    except mechanisms.MechanismError as exc:
        raise ServiceError(str(exc)) from exc
    names = [column["name"] for column in validated["columns"]]
    if dataset.columns and names != list(dataset.columns):
        raise ServiceError(f"The schema must list the dataset's columns in order "
                           f"({', '.join(dataset.columns)}); it lists {', '.join(names)}.")
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        if locked.is_deleted:
            raise ServiceError("This dataset has been deleted; its schema can no longer change.")
        locked.schema = validated
        locked.schema_confirmed_at = timezone.now()
        locked.save(update_fields=["schema", "schema_confirmed_at"])
        audit_record(action=AuditEvent.Action.SCHEMA_CONFIRMED, actor=user, dataset=locked,
                     remote_addr=remote_addr)
    return locked
