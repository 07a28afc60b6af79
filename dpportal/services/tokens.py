"""Per-user API tokens: create (the secret is returned once), revoke, authenticate.

The database keeps only each token's SHA-256 (`credentials.secret_digest`). Creation,
revocation and every refused use of a revoked token are recorded in the audit log.
"""

import secrets

from django.db import transaction
from django.utils import timezone

from dpportal.access.credentials import ApiToken, secret_digest
from dpportal.models import AuditEvent
from dpportal.services import audit
from dpportal.services.errors import ServiceError

TOKEN_PREFIX = "dpp_"  # noqa: S105  (a public marker, not a secret)
MAX_ACTIVE_TOKENS = 20


def token_create(*, user, name, remote_addr=None) -> tuple[ApiToken, str]:
    """A new token for `user`: (its row, its secret). The secret is never stored or shown again."""
    name = (name or "").strip()[:100] or "API token"
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_ACTIVE_TOKENS:
        raise ServiceError(
            f"You already have {MAX_ACTIVE_TOKENS} active tokens; revoke one you no longer "
            "use before creating another."
        )
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user, name=name, prefix=secret[:12], digest=secret_digest(secret)
        )
        audit.audit_record(
            action=AuditEvent.Action.TOKEN_CREATED,
            actor=user,
            remote_addr=remote_addr,
            details={"token": token.prefix, "name": name},
        )
    return token, secret


def token_revoke(*, user, token_pk, remote_addr=None) -> ApiToken:
    """Revoke one of the user's own tokens (at once: the next request with it is refused)."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(pk=token_pk, user=user).first()
        if token is None:
            raise ServiceError("There is no such token among yours; reload the page.")
        if token.revoked_at is not None:
            return token
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.audit_record(
            action=AuditEvent.Action.TOKEN_REVOKED,
            actor=user,
            remote_addr=remote_addr,
            details={"token": token.prefix, "name": token.name},
        )
    return token


def token_authenticate(secret: str):
    """The active token's user, or None. A refusal is not recorded here: the caller records it
    with `token_refusal_record` (unless it refuses the client for too many refusals already)."""
    token = _token(secret)
    if token is None or token.revoked_at is not None or not token.user.is_active:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user


def token_refusal_record(secret: str, remote_addr=None) -> None:
    """Record the refused use of `secret` in the audit log: a revoked token's use under its
    owner's name (so they see someone still holds it), an unknown secret without one."""
    token = _token(secret)
    if token is None:
        audit.audit_record(
            action=AuditEvent.Action.TOKEN_REFUSED,
            remote_addr=remote_addr,
            details={"reason": "unknown"},
        )
        return
    audit.audit_record(
        action=AuditEvent.Action.TOKEN_REFUSED,
        actor=token.user,
        remote_addr=remote_addr,
        details={
            "token": token.prefix,
            "reason": "revoked" if token.revoked_at else "inactive",
        },
    )


def _token(secret: str):
    if not secret:
        return None
    return ApiToken.objects.select_related("user").filter(digest=secret_digest(secret)).first()
