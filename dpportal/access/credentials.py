"""Credentials other than passwords: per-user API tokens and e-mailed auditor invitations.

Both are bearer secrets shown once (a token on the page that creates it, an invitation in the
e-mail that carries it) and stored only as their SHA-256: a copy of the database does not let
anyone use them. The secrets are 256-bit random strings, so a fast hash is enough (there is
nothing to guess).
"""

import hashlib

from django.conf import settings
from django.db import models


def secret_digest(secret: str) -> str:
    """The stored form of a token or invitation secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiToken(models.Model):
    """A user's API token. Revoked tokens stay (the audit log names them by prefix)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)  # the first characters, to recognise it by
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        return f"API token {self.prefix}… ({self.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Invitation(models.Model):
    """An owner's invitation for someone to audit one dataset: single use, expires."""

    dataset = models.ForeignKey(
        "dpportal.Dataset", on_delete=models.PROTECT, related_name="invitations"
    )
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="invitations_sent"
    )
    email = models.EmailField()
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="invitations_accepted",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        return f"Invitation of {self.email} to dataset {self.dataset_id}"
