"""The portal's Ed25519 signing key, which signs every dataset's public record.

DPPORTAL_SIGNING_KEY holds a PEM private key (unencrypted PKCS#8, as `openssl genpkey -algorithm
ed25519` writes it) or the path of a file holding one. Without it, development derives a key
from SECRET_KEY (so rotating SECRET_KEY changes the key); `manage.py check --deploy` warns when
production runs on that fallback (dpportal.W020) and refuses a key it cannot read (dpportal.E020).
The public half is shown on the key page (/public/record-key/).
"""

import hashlib
from functools import lru_cache
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from mechanisms.public_record import public_key_hex, public_key_pem

HOW_TO_MAKE_ONE = (
    "Make one with `openssl genpkey -algorithm ed25519 -out signing-key.pem` (keep the file "
    "private and backed up) and set DPPORTAL_SIGNING_KEY to its path."
)


class SigningKeyError(Exception):
    """DPPORTAL_SIGNING_KEY cannot be used; the message says why and how to fix it."""


def signing_key() -> Ed25519PrivateKey:
    """The key that signs records: DPPORTAL_SIGNING_KEY's, or the development fallback."""
    return _loaded(settings.DPPORTAL_SIGNING_KEY, settings.SECRET_KEY)


def public_key_text() -> tuple[str, str]:
    """The public key as 64 hex digits and as a PEM block."""
    public = signing_key().public_key()
    return public_key_hex(public), public_key_pem(public)


@lru_cache(maxsize=4)
def _loaded(configured: str, secret_key: str) -> Ed25519PrivateKey:
    if not configured:  # development: derived from the secret key (see the module docstring)
        derived = hashlib.sha256(b"dpportal-record-signing\0" + secret_key.encode()).digest()
        return Ed25519PrivateKey.from_private_bytes(derived)
    pem = configured.encode() if configured.lstrip().startswith("-----BEGIN") else _read(configured)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(
            f"DPPORTAL_SIGNING_KEY is not an unencrypted PEM private key ({exc}). {HOW_TO_MAKE_ONE}"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(
            f"DPPORTAL_SIGNING_KEY is a {type(key).__name__}, not an Ed25519 key. {HOW_TO_MAKE_ONE}"
        )
    return key


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SigningKeyError(
            f"DPPORTAL_SIGNING_KEY names {path!r}, which cannot be read ({exc.strerror}). "
            f"{HOW_TO_MAKE_ONE}"
        ) from None


@register(Tags.security, deploy=True)
def check_signing_key(app_configs=None, **kwargs):
    """dpportal.E020: the configured key cannot be used; dpportal.W020: production signs
    records with the development key derived from SECRET_KEY."""
    try:
        signing_key()
    except SigningKeyError as exc:
        return [Error(str(exc), id="dpportal.E020")]
    if settings.DPPORTAL_SIGNING_KEY or settings.DEBUG:
        return []
    return [
        Warning(
            "Public records are signed with a key derived from DJANGO_SECRET_KEY: anyone who "
            "learns the secret key can sign records, and rotating it changes the portal's key.",
            hint=HOW_TO_MAKE_ONE,
            id="dpportal.W020",
        )
    ]
