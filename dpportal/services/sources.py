"""Registering a table that stays where it lives (`dpportal.sources.tables`) as a dataset.

Budget: the budget follows the source. A registration's budget row is keyed by its source key
(the data's identity, `dpportal.sources.tables`: Parquet footers; server, database and table
oids) in the fingerprint column the uploads use, within the same scope (`budget.budget_scope`). So
registering the same table again, by another URL, path, link or server name, another database
user, or after the first dataset was deleted, draws on the same `PrivacyBudget` and its one
ledger; a second registration is not refused, because it may serve a different name,
description or engine, and refusing could not cover deleted datasets anyway.
"""

import hashlib

from django.db import transaction

import mechanisms
from dpportal.models import AuditEvent, Dataset, PrivacyBudget
from dpportal.releases import engine as release_engine
from dpportal.services import audit
from dpportal.services.budget import budget_for, budget_scope, budget_values, check_neighbouring
from dpportal.services.errors import ServiceError
from dpportal.sources import tables as sources


def source_fingerprint(key: str) -> str:
    """The budget identity of a source: never equal to an upload's content fingerprint."""
    return hashlib.sha256(b"source\0" + key.encode()).hexdigest()


def rekey_legacy_budget(owner, found) -> None:
    """Keep the budget of a source registered before keys named the data itself.

    Until issue 41 a source's key was its location (`found.legacy_key`: host, port and
    database; a real path; a bucket path and endpoint). If the owner's scope has no budget
    under the new key but one under the old, that budget is given the new key (one UPDATE,
    which locks the row), so this and every later registration of the same data spends from
    it. No migration can do this: finding the new key means reading the source."""
    if not found.legacy_key:
        return
    scope, new = budget_scope(owner), source_fingerprint(found.key)
    if PrivacyBudget.objects.filter(scope=scope, fingerprint=new).exists():
        return
    legacy = source_fingerprint(found.legacy_key)
    PrivacyBudget.objects.filter(scope=scope, fingerprint=legacy).update(fingerprint=new)


def dataset_register_source(
    *,
    owner,
    name,
    location,
    epsilon_total,
    table="",
    storage_options=None,
    engine="",
    delta_total=0,
    description="",
    neighbouring="replace-one",
    remote_addr=None,
):
    """Check the source can be read, learn its columns and their types, and register it.

    Nothing is copied: only the column names, their types, the row count and the encrypted
    location are stored. Raises ServiceError (shown as is) when the source cannot be read.
    """
    epsilon_total, delta_total = budget_values(epsilon_total, delta_total)
    check_neighbouring(neighbouring)
    try:
        found = sources.inspect(owner, location, table, storage_options)
        sealed = sources.seal(found.source)
    except sources.SourceError as exc:
        raise ServiceError(f"{exc} Nothing was registered.") from None
    choices = sources.engine_choices(found.kind)
    engine = engine or next(iter(choices), "")
    if engine not in choices:
        raise ServiceError(
            f"The {engine or 'usual'!r} engine cannot count this source here; choose among "
            f"{', '.join(choices) or 'none (no engine for it is installed)'}."
        )
    with transaction.atomic():
        rekey_legacy_budget(owner, found)
        budget, created = budget_for(
            owner, source_fingerprint(found.key), epsilon_total, delta_total, neighbouring
        )
        dataset = Dataset.objects.create(
            owner=owner,
            name=name,
            description=description,
            row_count=found.row_count,
            columns=found.columns,
            profile={"read_as": None, "proposals": found.proposals, "types": found.types},
            source_key=found.key,
            source_label=found.label[:1000],
            source_secret=sealed,
            source_table=found.source.table or "",
            engine=engine,
            budget=budget,
        )
        audit.audit_record(
            action=AuditEvent.Action.UPLOAD,
            actor=owner,
            dataset=dataset,
            remote_addr=remote_addr,
            details={
                "file": found.label,  # owner-only (an upload's file name), never the password
                "stays_where_it_lives": True,
                "rows": found.row_count,
                "columns": len(found.columns),
                "epsilon_total": str(epsilon_total),
                "delta_total": str(delta_total),
                "budget": budget.pk,
                "shared_budget": not created,
            },
        )
    return dataset


def release_engine_for(dataset, mechanism, engine="", *, columns, params, epsilon) -> str:
    """The engine a release of `dataset` counts with ("" for an upload), once it is known to fit.

    Refused before any budget is spent: an engine that cannot read the source, a mechanism that
    needs rows rather than counts, a schema confirmed with a "reject" rule before sources'
    schemas were stored accepting, settings the engine cannot compute (such as a grid finer
    than a SQL engine compares: `release_engine.engine_refusal`). A person column is bounded
    inside the engine.
    """
    if not dataset.is_external:
        if engine:
            raise ServiceError("An uploaded dataset is counted by the portal; choose no engine.")
        return ""
    choices = sources.engine_choices(sources.source_kind(dataset))
    engine = engine or dataset.engine
    if engine not in choices:
        raise ServiceError(
            f"The {engine!r} engine cannot count this source; choose {', '.join(choices)}."
        )
    if not mechanisms.runs_where_data_lives(mechanism):
        served = [s.title for s in mechanisms.catalogue.CATALOGUE.values() if s.counts_only]
        raise ServiceError(
            "This table stays where it lives and is only ever counted there: choose a release "
            f"made from counts ({', '.join(served)})."
        )
    schema = mechanisms.Schema.from_dict(dataset.schema) if dataset.schema else None
    if schema is not None and schema.accepting().to_dict() != schema.to_dict():
        raise ServiceError(  # confirmed before such schemas were stored in accepting form
            'This table\'s schema was confirmed with a "reject" rule, which a table that stays '
            "where it lives cannot keep: it may change after any check, and a release must never "
            "fail on its data. Confirm the schema again (values outside the list then go to "
            '"(other)", missing values to "(missing)"); nothing was spent.'
        )
    refusal = release_engine.engine_refusal(
        dataset,
        mechanism=mechanism,
        columns=columns,
        params=params,
        epsilon=epsilon,
        engine=engine,
    )
    if refusal:
        raise ServiceError(refusal)
    return engine
