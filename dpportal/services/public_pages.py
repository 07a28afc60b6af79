"""A release's public page: the owner switches it on, and may withdraw it; both are recorded in
the audit log. The page shows only the public package (mechanism output and the dataset's
budget spent so far), never anything computed from the raw data. Deleting a dataset withdraws
the public pages of its releases (`withdraw_public_pages`, called by `dataset_delete`); the
pages then answer 410 like any withdrawn page, and none can be switched on again."""

from django.db import transaction
from django.utils import timezone

from dpportal.models import AuditEvent, Release
from dpportal.services.audit import audit_record
from dpportal.services.errors import ServiceError


def release_set_public(*, release, user, public: bool, remote_addr=None) -> Release:
    """Switch the release's public page on (`public`) or withdraw it. Only the dataset's owner
    may, only for a finished release; a second identical request changes nothing."""
    with transaction.atomic():
        release = Release.objects.select_for_update().select_related("dataset").get(pk=release.pk)
        if release.dataset.owner_id != user.pk:
            raise ServiceError("Only the dataset's owner can publish or withdraw a release.")
        if public and release.status != Release.Status.DONE:
            raise ServiceError("Only a finished release can get a public page.")
        if public and release.dataset.is_deleted:
            raise ServiceError(
                "This release's dataset was deleted, which withdrew its public pages for good."
            )
        if public == release.is_public:
            return release
        now = timezone.now()
        if public:
            release.public_since, release.public_withdrawn_at = now, None
            release.save(update_fields=["public_since", "public_withdrawn_at"])
            audit_record(
                action=AuditEvent.Action.RELEASE_PUBLISHED,
                actor=user,
                dataset=release.dataset,
                release=release,
                details={"public": True},
                remote_addr=remote_addr,
            )
        else:
            _withdraw(release, user, now, remote_addr)
    return release


def public_pages(dataset):
    """The releases of `dataset` whose public page is on now."""
    return Release.objects.filter(
        dataset=dataset, public_since__isnull=False, public_withdrawn_at__isnull=True
    )


def withdraw_public_pages(*, dataset, user, remote_addr=None) -> int:
    """Withdraw every public page of `dataset` (its deletion), each audit-logged; the count.
    Call it inside the transaction that holds the dataset's lock."""
    now = timezone.now()
    pages = list(public_pages(dataset).select_for_update().select_related("dataset"))
    for release in pages:
        _withdraw(release, user, now, remote_addr, because="dataset deleted")
    return len(pages)


def _withdraw(release, user, now, remote_addr, because=None) -> None:
    release.public_withdrawn_at = now
    release.save(update_fields=["public_withdrawn_at"])
    details = {"public": False} | ({"withdrawn_because": because} if because else {})
    audit_record(
        action=AuditEvent.Action.RELEASE_WITHDRAWN,
        actor=user,
        dataset=release.dataset,
        release=release,
        details=details,
        remote_addr=remote_addr,
    )
