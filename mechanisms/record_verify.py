"""Check a dataset's public record offline: `dp-release verify PATH [--key KEY]`.

PATH is the record's folder or its zip (mechanisms.public_record describes both). Checked:

- signature-invalid: record.sig is not the signature of record.json by the record's key (or by
  --key): record.json was edited after signing, or the signature is forged;
- key-mismatch: the record names a key other than --key (the portal's, from its key page);
- total-mismatch: ε or δ spent is not the sum of the releases listed (exact decimals);
- release-missing / release-extra: fewer (a release dropped) or more releases listed than the
  budget was charged for; release-duplicate: one release listed twice;
- over-budget: ε or δ spent is above the total;
- guarantee-above-charge: a release's guarantee claims a larger ε or δ than it was charged;
- file-hash-mismatch, file-missing, file-unlisted, release-unlisted: a public file that differs
  from its SHA-256 in the record, is missing, or is not in the record;
- record-unreadable: record.json or record.sig is missing or not a record of this format.

A folder without releases/ (record.json and record.sig alone) is checked without its files.
What the record proves, and what it does not, is in docs/public-record.md.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path, PurePosixPath
from typing import IO, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mechanisms.errors import MechanismError, parsed_json
from mechanisms.public_record import (
    FORMAT,
    RECORD,
    RELEASES,
    SIGNATURE,
    parse_public_key,
    public_key_hex,
    signature_is_valid,
)

MAX_RECORD_BYTES = 16 << 20


@dataclass(frozen=True)
class Problem:
    """One reason the record does not verify: a short code and a sentence naming what."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


@dataclass
class Outcome:
    """What `verify` found: the problems (none: it verifies), notes and a summary."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summary: str = ""

    @property
    def codes(self) -> set[str]:
        return {p.code for p in self.problems}

    def add(self, code: str, message: str) -> None:
        self.problems.append(Problem(code, message))


class _Unreadable(Exception):
    """record.json is not a record of this format; the message names the field."""


class Folder:
    """The record's files by relative path (folder or zip): names, and opening one."""

    def __init__(self, names: set[str], opener: Callable[[str], IO[bytes]]) -> None:
        self.names, self._open = names, opener

    def read(self, name: str, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        if name not in self.names:
            return None
        with self._open(name) as handle:
            content = handle.read(limit + 1)
        if len(content) > limit:
            raise MechanismError(f"{name} is larger than {limit >> 20} MB: not a public record")
        return content

    def sha256(self, name: str) -> str:
        digest = hashlib.sha256()
        with self._open(name) as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()


@contextmanager
def open_folder(path: str) -> Iterator[Folder]:
    """The record at `path`: a folder, or a zip (its one top folder, if any, taken off)."""
    where = Path(path)
    if where.is_dir():
        names = {p.relative_to(where).as_posix() for p in where.rglob("*") if p.is_file()}
        yield Folder(names, lambda name: (where / name).open("rb"))
        return
    if not where.is_file():
        raise MechanismError(f"record ({path!r}) does not exist: give the record's folder or zip")
    try:
        archive = zipfile.ZipFile(where)
    except (zipfile.BadZipFile, OSError) as exc:
        raise MechanismError(f"record ({path!r}) is neither a folder nor a zip: {exc}") from None
    with archive:
        members = {i.filename: i for i in archive.infolist() if not i.is_dir()}
        prefix = _top_folder(list(members))
        inside = {name[len(prefix) :]: info for name, info in members.items()}
        yield Folder(set(inside), lambda name: archive.open(inside[name]))


def _top_folder(names: list[str]) -> str:
    """The one top folder ("name/") holding every file, unless record.json is at the top."""
    tops = {PurePosixPath(n).parts[0] for n in names if len(PurePosixPath(n).parts) > 1}
    if RECORD in names or len(tops) != 1 or not all("/" in n for n in names):
        return ""
    return f"{tops.pop()}/"


def verify(path: str, expected_key: Ed25519PublicKey | None = None) -> Outcome:
    """Check the record at `path` (see the module docstring); MechanismError if unreadable."""
    with open_folder(path) as folder:
        return _verified(folder, expected_key)


def _verified(folder: Folder, expected_key: Ed25519PublicKey | None) -> Outcome:
    outcome = Outcome()
    document, signature = folder.read(RECORD), folder.read(SIGNATURE)
    if document is None or signature is None:
        missing = RECORD if document is None else SIGNATURE
        outcome.add("record-unreadable", f"{missing} is missing: this is not a whole record")
        return outcome
    try:
        record = _parsed(document)
        key = parse_public_key(_text(record, "signing_key"))
    except (_Unreadable, MechanismError) as exc:
        outcome.add("record-unreadable", f"{RECORD}: {exc}")
        return outcome
    _check_signature(document, signature, key, expected_key, outcome)
    try:
        _check_totals(record, outcome)
        _check_files(record, folder, outcome)
    except _Unreadable as exc:
        outcome.add("record-unreadable", f"{RECORD}: {exc}")
        return outcome
    outcome.summary = _summary(record, expected_key is not None)
    return outcome


def _parsed(document: bytes) -> dict[str, Any]:
    try:
        record = parsed_json(document)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Unreadable(f"not JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise _Unreadable(f"not a record of format {FORMAT!r}")
    return record


def _check_signature(
    document: bytes,
    signature: bytes,
    key: Ed25519PublicKey,
    expected: Ed25519PublicKey | None,
    outcome: Outcome,
) -> None:
    named, checked = public_key_hex(key), public_key_hex(expected or key)
    if named != checked:
        outcome.add(
            "key-mismatch",
            f"the record names the signing key {named}, not the portal's key {checked}: "
            "someone other than the portal made or signed it",
        )
    if not signature_is_valid(document, signature, expected or key):
        outcome.add(
            "signature-invalid",
            f"{SIGNATURE} is not the signature of {RECORD} by the key {checked}: "
            f"{RECORD} was changed after it was signed, or the signature is forged",
        )


def _check_totals(record: dict[str, Any], outcome: Outcome) -> None:
    budget, others = _mapping(record, "budget"), _mapping(record, "other_charged_releases")
    releases = _releases(record)
    for what in ("epsilon", "delta"):
        spent, total = _amount(budget, f"{what}_spent"), _amount(budget, f"{what}_total")
        parts = [_amount(r, what) for r in releases] + [_amount(others, what)]
        if sum(parts, Decimal(0)) != spent:
            outcome.add(
                "total-mismatch",
                f"{what} spent is {spent}, but the releases listed add up to "
                f"{sum(parts, Decimal(0))}",
            )
        if spent > total:
            outcome.add("over-budget", f"{what} spent ({spent}) is above the total ({total})")
    _check_count(releases, _count(budget, "releases_charged"), _count(others, "releases"), outcome)
    for release in releases:
        _check_guarantee(release, outcome)


def _check_count(
    releases: list[dict[str, Any]], charged: int, others: int, outcome: Outcome
) -> None:
    ids = [_count(r, "id") for r in releases]
    for duplicate in sorted({i for i in ids if ids.count(i) > 1}):
        outcome.add("release-duplicate", f"release {duplicate} is listed more than once")
    listed = len(releases) + others
    if listed < charged:
        outcome.add(
            "release-missing",
            f"the budget was charged for {charged} releases but {listed} are listed "
            f"({len(releases)} public, {others} others): a release was removed from the record",
        )
    elif listed > charged:
        outcome.add(
            "release-extra",
            f"{listed} releases are listed but the budget was charged for {charged}",
        )


def _check_guarantee(release: dict[str, Any], outcome: Outcome) -> None:
    guarantee = _mapping(release, "guarantee")
    for what in ("epsilon", "delta"):
        claimed = guarantee.get(what) or 0
        try:
            above = Decimal(str(claimed)) > _amount(release, what)
        except InvalidOperation:
            raise _Unreadable(
                f"release {release.get('id')}: guarantee {what} {claimed!r}"
            ) from None
        if above:
            outcome.add(
                "guarantee-above-charge",
                f"release {release.get('id')} claims {what} = {claimed} but was charged "
                f"{_amount(release, what)}",
            )


def _check_files(record: dict[str, Any], folder: Folder, outcome: Outcome) -> None:
    shipped = sorted(n for n in folder.names if n.startswith(f"{RELEASES}/"))
    releases = {_count(r, "id"): _files(r) for r in _releases(record)}
    if not shipped:
        if any(releases.values()):
            outcome.notes.append(
                f"no {RELEASES}/ folder: the public files were not checked (the zip holds them)"
            )
        return
    checked = 0
    for release_id, files in releases.items():
        for name, digest in files.items():
            path = f"{RELEASES}/{release_id}/{name}"
            if path not in folder.names:
                outcome.add("file-missing", f"{path} is listed in the record but missing")
            elif folder.sha256(path) != digest:
                outcome.add("file-hash-mismatch", f"{path} differs from its SHA-256 in the record")
            else:
                checked += 1
    for path in shipped:
        _check_shipped(path, releases, outcome)
    outcome.notes.append(f"{checked} public files match their SHA-256")


def _check_shipped(path: str, releases: dict[int, dict[str, str]], outcome: Outcome) -> None:
    parts = PurePosixPath(path).parts
    release = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
    if release not in releases:
        outcome.add("release-unlisted", f"{path} belongs to no release listed in the record")
    elif parts[2] not in releases[release]:
        outcome.add("file-unlisted", f"{path} is not listed in the record")


def _summary(record: dict[str, Any], key_given: bool) -> str:
    budget, dataset = record["budget"], _mapping(record, "dataset")
    key = record["signing_key"]
    whose = (
        "the key given with --key"
        if key_given
        else "the key the record names: compare it with the key on the portal's key page, "
        "or pass that key with --key"
    )
    return (
        f"dataset {dataset.get('name')!r} (id {dataset.get('id')}), record made on "
        f"{record.get('made_on')}: epsilon spent {budget['epsilon_spent']} of "
        f"{budget['epsilon_total']}, delta spent {budget['delta_spent']} of "
        f"{budget['delta_total']}, by {budget['releases_charged']} charged releases "
        f"({len(record['public_releases'])} public). Signed by {key}, {whose}. Audit "
        f"chain commitment: {record.get('audit_chain_head')}."
    )


# ---------------------------------------------------------------- reading record.json's fields


def _mapping(record: dict[str, Any], name: str) -> dict[str, Any]:
    value = record.get(name)
    if not isinstance(value, dict):
        raise _Unreadable(f"{name!r} is missing or not an object")
    return value


def _text(record: dict[str, Any], name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str):
        raise _Unreadable(f"{name!r} is missing or not text")
    return value


def _amount(record: dict[str, Any], name: str) -> Decimal:
    """An exact, finite, non-negative decimal written as text."""
    text = _text(record, name)
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise _Unreadable(f"{name!r} ({text!r}) is not a decimal number") from None
    if not value.is_finite() or value < 0:
        raise _Unreadable(f"{name!r} ({text!r}) must be a finite number >= 0")
    return value


def _count(record: dict[str, Any], name: str) -> int:
    value = record.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _Unreadable(f"{name!r} ({value!r}) must be a whole number >= 0")
    return value


def _releases(record: dict[str, Any]) -> list[dict[str, Any]]:
    releases = record.get("public_releases")
    if not isinstance(releases, list) or not all(isinstance(r, dict) for r in releases):
        raise _Unreadable("'public_releases' is missing or not a list of objects")
    return releases


def _files(release: dict[str, Any]) -> dict[str, str]:
    files = _mapping(release, "files")
    for name, digest in files.items():
        plain = name and PurePosixPath(name).name == name and name not in (".", "..")
        if not plain or not isinstance(digest, str) or len(digest) != 64:
            raise _Unreadable(f"release {release.get('id')}: file {name!r} or its SHA-256")
    return files


def report_lines(path: str, outcome: Outcome) -> Iterator[str]:
    """What the command prints: VERIFIED or FAILED, then the problems or notes."""
    if outcome.problems:
        yield f"FAILED: the record at {path} does not verify ({len(outcome.problems)} problems):"
        yield from (f"  {problem}" for problem in outcome.problems)
        return
    yield f"VERIFIED: {outcome.summary}"
    yield from (f"  note: {note}" for note in outcome.notes)
