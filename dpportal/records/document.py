"""What a dataset's public record says, read from the database, and its signed files.

The record (format: mechanisms.public_record) is made afresh for each request from the state
of the database and signed with the portal's key (Ed25519 signatures are deterministic: the same
state on the same day gives the same bytes). It holds only what public pages already show:

- the dataset's public name and id; its budget's relation, totals, ε and δ spent and the number
  of releases charged (all on every public release page);
- each release of this dataset whose public page is on: the ε and δ charged, its manifest's
  guarantee block, the day it was released and the SHA-256 of each file its public page serves;
- one line summing every other charged release of the budget: this dataset's unpublished
  releases and DP estimates, and the releases of other datasets sharing its budget (an upload
  of the same content, or one its owner declared holds the same people). Count and sums only:
  the public pages' budget line already gives them;
- the hash of the newest audit event about this dataset that changed what the record says
  (COMMITTED: a charge, refund, publication, budget change, the opt-in): a commitment to the
  audit chain up to it, checked with `manage.py verify_audit_chain --expect-head HASH`. The
  hash covers a secret salt, so it reveals nothing of the event; and it moves only when the
  record's figures move, so watching it does not time other events (downloads, failures);
- the day the record was made, the public key, the format.

Never: row counts, file names or hashes of the raw data, failure reasons, exact times.
The budget's figures and the charged releases are read in one transaction holding the dataset's
and the budget's locks (in the order every budget path takes them), so they agree.
"""

import hashlib

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from dpportal.core.formatting import plain_number
from dpportal.models import AuditEvent, BudgetLedgerEntry, Release
from dpportal.records.signing import public_key_text, signing_key
from dpportal.releases import packaging
from dpportal.services.budget import locked_budget, locked_dataset
from mechanisms import public_manifest
from mechanisms.public_record import (
    FORMAT,
    readme_text,
    record_bytes,
    record_files,
    sign,
)

Action = AuditEvent.Action
COMMITTED = (
    Action.RELEASE_REQUESTED,
    Action.RELEASE_REFUNDED,
    Action.RELEASE_PUBLISHED,
    Action.RELEASE_WITHDRAWN,
    Action.BUDGET_CHANGED,
    Action.BUDGET_JOINED,
    Action.RECORD_PUBLISHED,
    Action.RECORD_WITHDRAWN,
    Action.DELETION,
)


def record_json(dataset) -> tuple[bytes, bytes]:
    """record.json and record.sig of `dataset`'s record as it stands."""
    document = record_bytes(_document(dataset)[0])
    return document, sign(document, signing_key())


def record_folder(dataset) -> dict[str, bytes]:
    """Every file of the record folder (mechanisms.public_record.record_files), by path."""
    record, packages = _document(dataset)
    document = record_bytes(record)
    readme = readme_text(public_key_text()[0], reverse("public_record_key"))
    return record_files(document, sign(document, signing_key()), readme, packages)


def _document(dataset) -> tuple[dict, dict[int, dict[str, bytes]]]:
    """The record and the public releases' package files (id -> name -> bytes)."""
    budget, charged, public, head = _state(dataset)
    packages = {r.pk: _package(r) for r in public}
    others = [r for r in charged if r.pk not in packages]
    record = {
        "format": FORMAT,
        "dataset": {"id": dataset.pk, "name": dataset.name},
        "made_on": timezone.now().date().isoformat(),
        "budget": {
            "neighbouring": budget.neighbouring,
            "epsilon_total": plain_number(budget.epsilon_total),
            "delta_total": plain_number(budget.delta_total),
            "epsilon_spent": plain_number(budget.epsilon_spent),
            "delta_spent": plain_number(budget.delta_spent),
            "releases_charged": len(charged),
        },
        "public_releases": [_public_entry(r, packages[r.pk]) for r in public],
        "other_charged_releases": {
            "releases": len(others),
            "epsilon": plain_number(sum((r.epsilon for r in others), start=0)),
            "delta": plain_number(sum((r.delta for r in others), start=0)),
        },
        "audit_chain_head": head,
        "signing_key": public_key_text()[0],
    }
    return record, packages


def _state(dataset):
    """The budget, its charged releases, this dataset's public releases and the newest audit
    hash about it, read together under the dataset's and the budget's locks."""
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        budget = locked_budget(locked.budget_id)
        charged = list(
            Release.objects.filter(
                dataset__budget_id=budget.pk, ledger__kind=BudgetLedgerEntry.Kind.DEBIT
            )
            .exclude(ledger__kind=BudgetLedgerEntry.Kind.REFUND)
            .only("pk", "epsilon", "delta")
        )
        public = list(
            Release.objects.filter(
                dataset=locked,
                status=Release.Status.DONE,
                public_since__isnull=False,
                public_withdrawn_at__isnull=True,
            ).order_by("pk")
        )
        events = AuditEvent.objects.filter(dataset=locked, action__in=COMMITTED)
        head = events.order_by("-pk").first()
    return budget, charged, public, head.hash if head else ""


def _public_entry(release, package: dict[str, bytes]) -> dict:
    """A public release as the record lists it (see the module docstring)."""
    finished = release.finished_at or release.created_at
    return {
        "id": release.pk,
        "mechanism": release.mechanism,
        "epsilon": plain_number(release.epsilon),
        "delta": plain_number(release.delta),
        "guarantee": public_manifest(release.manifest or {}).get("guarantee", {}),
        "released_on": finished.date().isoformat(),  # the day, as its public page says
        "files": {name: hashlib.sha256(content).hexdigest() for name, content in package.items()},
    }


def _package(release) -> dict[str, bytes]:
    """The release's package files, as its public page serves them."""
    files = {
        name: packaging.package_file(release, name) for name in packaging.package_names(release)
    }
    return {name: content for name, content in files.items() if content is not None}
