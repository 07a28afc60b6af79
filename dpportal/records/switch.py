"""The owner's opt-in to a dataset's public record; each switch is recorded in the audit log."""

from django.db import transaction

from dpportal.models import AuditEvent
from dpportal.records.signing import SigningKeyError, signing_key
from dpportal.services.audit import audit_record
from dpportal.services.budget import locked_dataset
from dpportal.services.errors import ServiceError


def record_set_public(*, dataset, user, public: bool, remote_addr=None):
    """Publish (`public`) or withdraw `dataset`'s record. Only its owner may, and not once it is
    deleted; a second identical request changes nothing. Returns the dataset."""
    if public:
        try:
            signing_key()  # refuse now rather than publish an address that cannot answer
        except SigningKeyError as exc:
            raise ServiceError(f"The record cannot be signed: {exc}") from None
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        if locked.owner_id != user.pk:
            raise ServiceError("Only the dataset's owner can publish or withdraw its record.")
        if public and locked.is_deleted:
            raise ServiceError("This dataset was deleted: its record can no longer be published.")
        if locked.public_record == public:
            return locked
        locked.public_record = public
        locked.save(update_fields=["public_record"])
        action = AuditEvent.Action
        audit_record(
            action=action.RECORD_PUBLISHED if public else action.RECORD_WITHDRAWN,
            actor=user,
            dataset=locked,
            details={"public": public},
            remote_addr=remote_addr,
        )
    return locked
