"""Datasets: upload (validation, Parquet copy, profile, budget by content), auditors, schema
confirmation and deletion.

Files go through `dpportal.ingest` into private storage (`dpportal.core.files`); nothing is left
behind when a file is refused.
"""

import functools
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

import mechanisms
from dpportal import ingest
from dpportal.core import files, object_store, storage
from dpportal.datasets import schema_checks
from dpportal.models import AuditEvent, Dataset, Release
from dpportal.services import audit, dp_estimates, publishing
from dpportal.services.analysts import analysts_revoke_all
from dpportal.services.budget import budget_for, budget_values, check_neighbouring, locked_dataset
from dpportal.services.errors import ClampingNotAccepted, ServiceError
from dpportal.services.public_pages import withdraw_public_pages

DATASET_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx")
ARCHIVE_SUFFIXES = (".gz", ".zip")  # a table compressed with gzip, or alone in a zip


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
    """Ingest a file on disk (CSV/TSV/XLSX, or one compressed with gzip or zip) as a dataset."""
    source_path = Path(source_path)
    filename = source_path.name
    scan = ingest.ByteScan()
    with open(source_path, "rb") as handle:
        _name, path = storage.store_stream(iter(lambda: handle.read(1 << 20), b""), ".upload", scan)
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
    referenced: set[str] = set()
    for names in Dataset.objects.values_list("storage_name", "parquet_name"):
        referenced.update(names)
    return object_store.remove_orphan_stored_files(referenced - {""}, older_than_hours * 3600)


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
    epsilon_total, delta_total = budget_values(epsilon_total, delta_total)
    check_neighbouring(neighbouring)
    suffix = Path(filename).suffix.lower()
    if suffix not in DATASET_SUFFIXES + ARCHIVE_SUFFIXES:
        raise ServiceError(
            f"Files of type {suffix or '(none)'!r} cannot be read; upload a CSV, "
            "TSV or Excel (.xlsx) file, or one of them compressed with gzip (.csv.gz) or zip."
        )
    parquet_name, parquet_path = files.new_storage_name(".parquet")
    kept_name = ""
    try:
        result = _ingest_file(original_path, scan, parquet_path, filename, header)
        fingerprint = ingest.content_fingerprint(parquet_path)
        object_store.keep(parquet_path)
        if settings.DPPORTAL_KEEP_ORIGINAL_UPLOADS:
            kept_name, kept_path = files.new_storage_name(suffix)
            Path(original_path).replace(kept_path)
            object_store.keep(kept_path)
        with transaction.atomic():
            budget, created = budget_for(
                owner, fingerprint, epsilon_total, delta_total, neighbouring
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
            audit.audit_record(
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
        object_store.remove_stored(parquet_name)
        object_store.remove_stored(kept_name)
        raise
    return dataset


def dataset_shared_with(dataset):
    """The earliest other dataset (deleted or not) drawing on the same budget, or None."""
    return (
        Dataset.objects.filter(budget_id=dataset.budget_id)
        .exclude(pk=dataset.pk)
        .order_by("created_at", "pk")
        .first()
    )


def _ingest_file(path, scan, parquet_path, filename, header):
    """Read the upload (or the table inside it, if it is compressed) into `parquet_path`."""
    text_name, unpacked = "", None
    try:
        unpacked = ingest.unpack_upload(path, filename, max_bytes=settings.MAX_UPLOAD_BYTES)
        if unpacked is not None:
            path, scan, filename = unpacked.path, unpacked.scan, unpacked.name
        suffix = Path(filename).suffix.lower()
        if suffix == ".xlsx":
            text_name, text_path = files.new_storage_name(".csv")
            ingest.xlsx_to_csv(path, text_path)
            result = ingest.ingest_text(
                text_path, ingest.scan_file(text_path), parquet_path, suffix=".csv", header=header
            )
            result.details["format"] = "Excel workbook (first sheet)"
        else:
            result = ingest.ingest_text(path, scan, parquet_path, suffix=suffix, header=header)
        if unpacked is not None:
            result.details["format"] += f", unpacked from {unpacked.kind}"
        return result
    except ingest.IngestError as exc:
        raise ServiceError(str(exc)) from None
    finally:
        if text_name:
            files.stored_path(text_name).unlink(missing_ok=True)
        if unpacked is not None:
            unpacked.path.unlink(missing_ok=True)


def dataset_set_auditor(*, dataset, user, username, add, remote_addr=None):
    """Give or take away read-only access to the dataset's releases, ledger and audit log."""
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        auditor = get_user_model().objects.filter(username=username).first()
        if auditor is None:
            raise ServiceError(f"There is no user named {username!r}; check the spelling.")
        if auditor.pk == locked.owner_id:
            raise ServiceError(f"{username!r} owns this dataset and already sees everything.")
        if add == locked.auditors.filter(pk=auditor.pk).exists():
            return locked
        (locked.auditors.add if add else locked.auditors.remove)(auditor)
        audit.audit_record(
            action=AuditEvent.Action.ACCESS_CHANGED,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
            details={"auditor": auditor.username, "change": "added" if add else "removed"},
        )
    return locked


def dataset_delete(*, dataset, user, remote_addr=None):
    """Remove the raw file, the Parquet copy (or a source's credentials) and the data profile,
    withdraw the public pages of its releases (they answer 410) and revoke its analysts (their
    allotments go back to the budget); releases, ledger, audit stay."""
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        if locked.is_deleted:
            return locked
        if locked.releases.filter(
            status__in=[Release.Status.QUEUED, Release.Status.RUNNING]
        ).exists():
            raise ServiceError(
                "Releases of this dataset are still queued or running; wait for "
                "them to finish or cancel them, then delete the dataset."
            )
        stored = [locked.storage_name, locked.parquet_name]
        locked.deleted_at = timezone.now()
        locked.storage_name = locked.parquet_name = ""
        locked.source_secret = ""  # a source's credentials go with it; its key keeps the budget
        locked.profile = None
        locked.save(
            update_fields=["deleted_at", "storage_name", "parquet_name", "source_secret", "profile"]
        )
        withdrawn = withdraw_public_pages(dataset=locked, user=user, remote_addr=remote_addr)
        analysts_revoke_all(locked, user=user, remote_addr=remote_addr)
        audit.audit_record(
            action=AuditEvent.Action.DELETION,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
            details={"sha256": locked.sha256, "public_pages_withdrawn": withdrawn},
        )
        for name in stored:
            transaction.on_commit(functools.partial(object_store.remove_stored, name))
        transaction.on_commit(lambda: publishing.release_remove_utility_reports(locked))
    return locked


def dataset_confirm_schema(*, dataset, user, schema, remote_addr=None, accept_clamping=True):
    """Validate and store the custodian's public metadata; releases become possible.

    The stored table is checked against the schema first (`schema_checks`): a schema is only
    confirmed if no value in the data would make a release of it fail, so once a release has
    started, data content can never make it fail. The values the schema's bounds would clamp
    (or send to "(other)") are counted in the same pass and kept in the owner-only profile
    (`profile["clamping"]`), shown at confirmation and on the schema page. A person column
    other than the one this dataset's DP estimates protected people by is refused
    (`dp_estimates.check_schema_person`). With `accept_clamping` false, a schema whose bounds
    or categories move more than the warning share of some column's values is not confirmed:
    `ClampingNotAccepted` carries those columns' lines (owner-only, like the profile), so the
    schema page can say the likely cause and ask again.

    A table that stays where it lives is checked by no one and may change at any time, so its
    schema is stored in its accepting form (`Schema.accepting`: "reject" read as "other" and
    "cell"), the one its releases are counted with; the schema page says so.
    """
    try:
        parsed = mechanisms.Schema.from_dict(schema)
    except mechanisms.MechanismError as exc:
        raise ServiceError(str(exc)) from exc
    if dataset.is_external:
        parsed = parsed.accepting()
    validated = parsed.to_dict()
    names = [column["name"] for column in validated["columns"]]
    if dataset.columns and names != list(dataset.columns):
        raise ServiceError(
            f"The schema must list the dataset's columns in order "
            f"({', '.join(dataset.columns)}); it lists {', '.join(names)}."
        )
    path = files.dataset_path(dataset)
    clamping = []
    if dataset.parquet_name and object_store.exists(path):
        with object_store.open_input(path) as stored:
            check = schema_checks.check_stored(stored, parsed)
        problems = schema_checks.problems(check)
        if problems:
            raise ServiceError(" ".join(problems), problems)
        clamping = schema_checks.clamping_lines(check)
        warned = [entry for entry in clamping if entry["warn"]]
        if warned and not accept_clamping:
            raise ClampingNotAccepted(warned)
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        if locked.is_deleted:
            raise ServiceError("This dataset has been deleted; its schema can no longer change.")
        dp_estimates.check_schema_person(locked, parsed.person)
        locked.schema = validated
        locked.schema_confirmed_at = timezone.now()
        locked.profile = {**(locked.profile or {}), "clamping": clamping}  # owner-only
        locked.save(update_fields=["schema", "schema_confirmed_at", "profile"])
        audit.audit_record(
            action=AuditEvent.Action.SCHEMA_CONFIRMED,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
        )
    return locked
