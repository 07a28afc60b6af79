"""Invitations: an owner invites someone, by e-mail address, to audit one dataset, or to request
releases of it as an analyst (`services.analysts`, which reserves the analyst's allotment with
the invitation and uses the machinery here: `invitation_create`, `invitation_mail`).

The link carries a 256-bit secret; only its SHA-256 is stored. It expires after
INVITATION_DAYS, works once, and can be revoked before it is used. Accepting grants auditor
access exactly as adding an auditor by name does (the same ACCESS_CHANGED event, which the
budget rules read: `budget._ever_had_auditors`), and nothing more: the account is not made a
custodian (dpportal.access.rules). Sending and revoking are audited too.

The link is bound to the invited address: a signed-in account accepts only if its e-mail
address (set by the operator or by the invitation that made the account; users cannot change
it) is the invited one, compared after NFKC normalisation and case folding; a new account made
from the link gets the invited address (holding the link proves it reads that mailbox).
"""

import secrets
import unicodedata
from datetime import timedelta

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from dpportal.access.credentials import Invitation, secret_digest
from dpportal.models import Analyst, AuditEvent
from dpportal.services import audit
from dpportal.services.budget import locked_dataset
from dpportal.services.errors import ServiceError

INVITATION_DAYS = 7
MAX_PENDING_PER_DATASET = 50
OTHER_ADDRESS = (
    "This invitation was sent to another e-mail address than the one of the account you are "
    "signed in with, so nothing was granted. Sign out and open the link again to make an "
    "account for the invited address, or ask the dataset's owner to invite your account's "
    "address."
)


class OtherAddress(ServiceError):
    """The signed-in account's address is not the invited one."""


def same_address(first: str, second: str) -> bool:
    """Whether two e-mail addresses are the same, after NFKC normalisation and case folding
    (so a fullwidth or differently cased spelling matches, a look-alike letter does not)."""

    def canonical(address: str) -> str:
        return unicodedata.normalize("NFKC", address or "").strip().casefold()

    return bool(canonical(first)) and canonical(first) == canonical(second)


def invitation_send(*, dataset, user, email, link_for, remote_addr=None) -> Invitation:
    """Store an invitation to audit and e-mail its link; `link_for(secret)` makes the absolute
    URL. If sending fails, the invitation is revoked again and the owner is told."""
    with transaction.atomic():
        invitation, secret = invitation_create(
            dataset=dataset, user=user, email=email, remote_addr=remote_addr
        )
    invitation_mail(
        invitation,
        subject=f"You are invited to audit “{dataset.name}” on DP Portal",
        message=_message(dataset, user, link_for(secret)),
        undo=lambda: invitation_revoke(dataset=dataset, user=user, invitation_pk=invitation.pk),
    )
    return invitation


def invitation_create(*, dataset, user, email, remote_addr=None, analyst=False):
    """Store an invitation (in the caller's transaction) and audit it: (invitation, secret).
    At most one pending invitation per address and role, MAX_PENDING_PER_DATASET per role."""
    if dataset.is_deleted:
        raise ServiceError("This dataset has been deleted; nobody new can be given access to it.")
    pending = pending_invitations(dataset, analysts=analyst)
    if pending.filter(email__iexact=email).exists():
        raise ServiceError(
            f"{email} already has a pending invitation to this dataset; revoke it first to "
            "send a new one."
        )
    if pending.count() >= MAX_PENDING_PER_DATASET:
        raise ServiceError("Too many pending invitations; revoke some before sending more.")
    secret = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        dataset=dataset,
        invited_by=user,
        email=email,
        digest=secret_digest(secret),
        expires_at=timezone.now() + timedelta(days=INVITATION_DAYS),
    )
    details = {"invitation": invitation.pk, "email": email} | (
        {"role": "analyst"} if analyst else {}
    )
    audit.audit_record(
        action=AuditEvent.Action.INVITATION_SENT,
        actor=user,
        dataset=dataset,
        remote_addr=remote_addr,
        details=details,
    )
    return invitation, secret


def invitation_mail(invitation, *, subject, message, undo) -> None:
    """E-mail a committed invitation's link; if that fails, `undo()` withdraws it and the owner
    is told, so no unusable invitation stays pending."""
    try:
        send_mail(
            subject=subject, message=message, from_email=None, recipient_list=[invitation.email]
        )
    except OSError as exc:
        undo()
        raise ServiceError(
            f"The invitation e-mail could not be sent ({exc.__class__.__name__}); nothing is "
            "pending. Check the portal's e-mail settings (DPPORTAL_EMAIL_*) and try again."
        ) from None


def _message(dataset, user, link) -> str:
    return (
        f"{user.get_username()} invites you to audit the dataset “{dataset.name}” on DP Portal:\n"
        "you will see its differentially private releases, its budget ledger and its audit "
        "log, never the raw data.\n\n"
        f"Open this link within {INVITATION_DAYS} days to accept (it works once):\n{link}\n\n"
        "If you did not expect this, ignore this message.\n"
    )


def pending_invitations(dataset, *, analysts=False):
    """The dataset's usable invitations to audit (or, with `analysts`, to request releases)."""
    return Invitation.objects.filter(
        dataset=dataset,
        accepted_at__isnull=True,
        revoked_at__isnull=True,
        expires_at__gt=timezone.now(),
        analyst__isnull=not analysts,
    )


def analyst_of(invitation):
    """The analyst membership an invitation is for, or None (an invitation to audit)."""
    return Analyst.objects.filter(invitation=invitation).first()


def invitation_for_secret(secret: str) -> Invitation:
    """The usable invitation with this secret, or a ServiceError saying why not."""
    invitation = (
        Invitation.objects.select_related("dataset", "invited_by")
        .filter(digest=secret_digest(secret or ""))
        .first()
    )
    return _check_usable(invitation)


def _check_usable(invitation: Invitation | None) -> Invitation:
    if invitation is None:
        raise ServiceError("This invitation link is not valid; check that it was copied whole.")
    if invitation.accepted_at is not None:
        raise ServiceError("This invitation was already used; an invitation works once.")
    if invitation.revoked_at is not None or invitation.dataset.is_deleted:
        raise ServiceError("This invitation was withdrawn; ask the dataset's owner for a new one.")
    if invitation.expires_at <= timezone.now():
        raise ServiceError(
            f"This invitation expired (they last {INVITATION_DAYS} days); ask the dataset's "
            "owner for a new one."
        )
    return invitation


def invitation_accept(*, secret, user, remote_addr=None) -> Invitation:
    """Use the invitation once: `user`, whose address must be the invited one, becomes an
    auditor of its dataset (and nothing more)."""
    with transaction.atomic():
        found = invitation_for_secret(secret)
        dataset = locked_dataset(found.dataset_id)
        invitation = Invitation.objects.select_for_update().get(pk=found.pk)
        invitation.dataset = dataset
        _check_usable(invitation)  # again, under the lock: a concurrent accept used it first
        if user.pk == dataset.owner_id:
            raise ServiceError("You own this dataset and already see everything in it.")
        if not same_address(user.email, invitation.email):
            raise OtherAddress(OTHER_ADDRESS)
        invitation.accepted_at = timezone.now()
        invitation.accepted_by = user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        if analyst := analyst_of(invitation):
            _join_as_analyst(dataset, analyst, user, invitation, remote_addr)
        elif not dataset.auditors.filter(pk=user.pk).exists():
            dataset.auditors.add(user)
            audit.audit_record(
                action=AuditEvent.Action.ACCESS_CHANGED,
                actor=user,
                dataset=dataset,
                remote_addr=remote_addr,
                details={
                    "auditor": user.get_username(),
                    "change": "added",
                    "invitation": invitation.pk,
                },
            )
    return invitation


def _join_as_analyst(dataset, analyst, user, invitation, remote_addr) -> None:
    """The invited account becomes the (active) analyst; the same ACCESS_CHANGED event as for
    an auditor, since an analyst may see what auditors see under replace-one (the row count)."""
    analyst = Analyst.objects.select_for_update(no_key=True).get(pk=analyst.pk)
    if analyst.revoked_at is not None:
        raise ServiceError("This invitation was withdrawn; ask the dataset's owner for a new one.")
    if Analyst.objects.filter(dataset=dataset, user=user, revoked_at__isnull=True).exists():
        raise ServiceError(
            "Your account is already an analyst of this dataset; ask its owner to revoke that "
            "access first if this invitation should replace it."
        )
    analyst.user, analyst.joined_at = user, timezone.now()
    analyst.save(update_fields=["user", "joined_at"])
    audit.audit_record(
        action=AuditEvent.Action.ACCESS_CHANGED,
        actor=user,
        dataset=dataset,
        remote_addr=remote_addr,
        details={"analyst": user.get_username(), "change": "added", "invitation": invitation.pk},
    )


def invitation_revoke(*, dataset, user, invitation_pk, remote_addr=None) -> Invitation:
    """Withdraw a pending invitation to audit the owner's dataset (its link stops working).
    An analyst's invitation is withdrawn with its allotment (`services.analysts`)."""
    with transaction.atomic():
        invitation = (
            Invitation.objects.select_for_update(of=("self",))
            .filter(pk=invitation_pk, dataset=dataset, analyst__isnull=True)
            .first()
        )
        if invitation is None:
            raise ServiceError("There is no such invitation for this dataset; reload the page.")
        if invitation.accepted_at is not None:
            raise ServiceError(
                f"{invitation.email} already accepted; remove their account from the auditors "
                "instead."
            )
        invitation_withdraw(invitation, user=user, remote_addr=remote_addr)
    return invitation


def invitation_withdraw(locked_invitation, *, user, remote_addr=None) -> None:
    """Mark a pending invitation (row locked) revoked, once, and audit it."""
    if locked_invitation.revoked_at is not None or locked_invitation.accepted_at is not None:
        return
    locked_invitation.revoked_at = timezone.now()
    locked_invitation.save(update_fields=["revoked_at"])
    audit.audit_record(
        action=AuditEvent.Action.INVITATION_REVOKED,
        actor=user,
        dataset=locked_invitation.dataset,
        remote_addr=remote_addr,
        details={"invitation": locked_invitation.pk, "email": locked_invitation.email},
    )
