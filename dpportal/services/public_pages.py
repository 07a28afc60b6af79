"""A release's public page: the owner switches it on, and may withdraw it; both are recorded in
the audit log. The page shows only the public package (mechanism output and the dataset's
budget spent so far), never anything computed from the raw data."""

from django.db import transaction
from django.utils import timezone

from ..models import AuditEvent, Release
from .audit import audit_record
from .errors import ServiceError


def release_set_public(*, release, user, public: bool, remote_addr=None) -> Release:
    """Switch the release's public page on (`public`) or withdraw it. Only the dataset's owner
    may, only for a finished release; a second identical request changes nothing."""
    with transaction.atomic():
        release = Release.objects.select_for_update().select_related("dataset").get(pk=release.pk)
        if release.dataset.owner_id != user.pk:
            raise ServiceError("Only the dataset's owner can publish or withdraw a release.")
        if public and release.status != Release.Status.DONE:
            raise ServiceError("Only a finished release can get a public page.")
        if public == release.is_public:
            return release
        now = timezone.now()
        if public:
            release.public_since, release.public_withdrawn_at = now, None
        else:
            release.public_withdrawn_at = now
        release.save(update_fields=["public_since", "public_withdrawn_at"])
        audit_record(
            action=AuditEvent.Action.RELEASE_PUBLISHED
            if public
            else AuditEvent.Action.RELEASE_WITHDRAWN,
            actor=user,
            dataset=release.dataset,
            release=release,
            details={"public": public},
            remote_addr=remote_addr,
        )
    return release
