"""A dataset's public, verifiable record: its format, its folder layout, and signing it.

The portal publishes, for a dataset whose owner opted in, a folder (served as one zip):

    record.json               the record (below), the exact bytes that were signed
    record.sig                the Ed25519 signature of record.json, in hex
    README.txt                what the record is and how to check it (not signed)
    releases/<id>/<name>      each public release's package files, as its public page serves them

record.json holds only what the public pages already show: the dataset's public name and id;
its privacy budget (relation, totals, ε and δ spent, how many releases were charged); every
release whose public page is on, with its guarantee (the manifest's block), the ε and δ the
budget was charged for it, the day it was released and the SHA-256 of each file of its public
package; one line adding up every other charged release (unpublished ones, DP estimates, releases
of other datasets drawing on the same budget): their count and summed ε and δ; a hash from the
portal's audit chain; the public key that signed it; the day it was made. Times go no finer than
a day, as on the public pages; nothing is computed from the raw data.

Accounting: ε and δ compose by addition (basic sequential composition), as the portal's ledger
charges them. "Spent" is what the budget (shared by every dataset holding the same people) has
been charged, refunds taken off: the public releases' ε plus the other line's ε, exactly, in
decimals; the same for δ. `mechanisms.record_verify` checks all of it offline.
"""

from __future__ import annotations

import binascii
import json
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mechanisms.errors import MechanismError

FORMAT = "dp-portal-public-record/1"
RECORD = "record.json"
SIGNATURE = "record.sig"
README = "README.txt"
RELEASES = "releases"
KEY_HEX_LENGTH = 64  # an Ed25519 public key: 32 bytes


def record_bytes(record: dict[str, Any]) -> bytes:
    """The record as signed: JSON with sorted keys, two-space indents, ASCII, one final newline.

    Numbers the accounting adds up are decimal text (exact); the guarantee blocks keep the
    manifest's own numbers.
    """
    text = json.dumps(record, indent=2, sort_keys=True, ensure_ascii=True, allow_nan=False)
    return (text + "\n").encode("ascii")


def sign(document: bytes, key: Ed25519PrivateKey) -> bytes:
    """record.sig for `document`: the Ed25519 signature, as hex text with a newline."""
    return key.sign(document).hex().encode("ascii") + b"\n"


def signature_is_valid(document: bytes, signature: bytes, key: Ed25519PublicKey) -> bool:
    """Whether `signature` (record.sig's bytes) is `key`'s signature of `document`."""
    try:
        raw = bytes.fromhex(signature.decode("ascii").strip())
        key.verify(raw, document)
    except (InvalidSignature, UnicodeDecodeError, ValueError):
        return False
    return True


def public_key_hex(key: Ed25519PublicKey) -> str:
    """The key as the record and the portal's key page write it: 64 hex digits."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def public_key_pem(key: Ed25519PublicKey) -> str:
    """The key as a PEM block (SubjectPublicKeyInfo), for tools other than this one."""
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem.decode("ascii")


def parse_public_key(text: str) -> Ed25519PublicKey:
    """An Ed25519 public key from 64 hex digits or a PEM block; else a MechanismError."""
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_public_key(text.encode("ascii"))
            if isinstance(key, Ed25519PublicKey):
                return key
        elif len(text) == KEY_HEX_LENGTH:
            return Ed25519PublicKey.from_public_bytes(binascii.unhexlify(text))
    except (ValueError, UnicodeEncodeError, binascii.Error):
        pass
    raise MechanismError(
        f"public key ({text[:80]!r}) is not an Ed25519 public key: give its 64 hex digits or "
        "its PEM block, as the portal's key page shows them"
    )


def key_argument(value: str) -> Ed25519PublicKey:
    """--key: 64 hex digits, or a file holding them or a PEM block."""
    path = Path(value)
    if len(value) != KEY_HEX_LENGTH and path.is_file():
        try:
            return parse_public_key(path.read_text(encoding="ascii", errors="replace"))
        except OSError as exc:
            raise MechanismError(f"key file ({value!r}) cannot be read: {exc.strerror}") from None
    return parse_public_key(value)


def record_files(
    document: bytes, signature: bytes, readme: str, packages: dict[int, dict[str, bytes]]
) -> dict[str, bytes]:
    """The record folder's files by relative path.

    record.json, record.sig, README.txt and each public release's package files (`packages`:
    release id -> file name -> bytes).
    """
    files = {RECORD: document, SIGNATURE: signature, README: readme.encode()}
    for release_id, package in sorted(packages.items()):
        for name, content in sorted(package.items()):
            files[f"{RELEASES}/{release_id}/{name}"] = content
    return files


def readme_text(key_hex: str, key_page: str) -> str:
    """README.txt of the record folder: what it holds and how to check it (not signed)."""
    return f"""A dataset's public record, published by DP Portal at its owner's request.

record.json   the dataset's privacy budget, every public release with its guarantee and the
              SHA-256 of its public files, and one line for every other charged release
record.sig    the portal's Ed25519 signature of record.json (hex)
releases/     each public release's files, as its public page serves them

Check it offline, with the portal's key from its key page ({key_page}):

    dp-release verify record.zip --key {key_hex}

(`pip install .` in a checkout of DP Portal gives dp-release, or run `python -m mechanisms
verify` there). It
checks the signature, that every file matches its SHA-256 and that the spent epsilon and delta
are the sums of the releases listed. The signature proves the portal's key signed these
numbers; it cannot prove the portal ran nothing it did not record.
"""
