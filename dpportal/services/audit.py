"""The hash-chained audit log: append an event, verify the chain."""

import secrets

from django.db import IntegrityError, transaction

from dpportal.models import AuditEvent
from dpportal.services.errors import ServiceError

GENESIS_HASH = "0" * 64


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
