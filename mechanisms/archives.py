"""Compressed tables: gzip files and zips of one table, unpacked as a stream within limits.

A gzip file (.csv.gz, .tsv.gz) or a zip holding exactly one table is unpacked chunk by chunk, so
that a small archive can never fill memory or disk.

Used by the command line (`read_table`) and by the portal's upload (`dpportal.ingest.archive`).
Limits, checked while the bytes are unpacked (and for zips first on the archive's directory):

- at most `max_bytes` unpacked bytes;
- at most MAX_RATIO times the compressed size, once past RATIO_FLOOR (a "zip bomb" unpacks
  thousands of times larger);
- a zip holds exactly one table (folders and macOS "__MACOSX/" metadata are skipped), with a
  plain relative name, not encrypted, and not itself an archive (no nesting).

Other compressors (bzip2, xz, zstd, 7-Zip) are refused by their magic bytes with one message.
Every refusal is an `ArchiveError` whose message says what is wrong and how to fix it.
"""

from __future__ import annotations

import gzip
import io
import zipfile
import zlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mechanisms.errors import MechanismError

CHUNK_BYTES = 1 << 20
MAX_RATIO = 200
RATIO_FLOOR = 1 << 20  # tables smaller than this may compress as well as they like
GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"
TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx")
TEXT_SUFFIXES = (".csv", ".tsv", ".txt")
OTHER_COMPRESSORS = (
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip"),
)
MACOS_METADATA = "__MACOSX/"


class ArchiveError(MechanismError):
    """A compressed file that cannot be used; the message says why and how to fix it."""


@dataclass(frozen=True)
class Archive:
    """A compressed table: its kind ("gzip" or "zip"), and the name of the table inside."""

    path: Path
    kind: str
    inner_name: str
    member: zipfile.ZipInfo | None = None

    @property
    def inner_suffix(self) -> str:
        return PurePosixPath(self.inner_name).suffix.lower()


def other_compressor(head: bytes) -> str | None:
    """The name of a compressor this package does not unpack, from a file's first bytes."""
    return next((kind for magic, kind in OTHER_COMPRESSORS if head.startswith(magic)), None)


def refuse_other_compressor(head: bytes) -> None:
    """Raise ArchiveError if `head` starts like a file of a compressor not unpacked here."""
    kind = other_compressor(head)
    if kind:
        raise ArchiveError(
            f"The file is compressed with {kind}, which cannot be unpacked here; uncompress it "
            "and use the CSV, or compress it with gzip (.csv.gz) or zip instead."
        )


def open_archive(path: Path, name: str) -> Archive | None:
    """The archive `path` is, or None for a plain file.

    Gzip is recognised by its bytes, a zip by `name` ending in .zip. A zip's directory is
    checked here, before anything is unpacked.
    """
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith(GZIP_MAGIC):
        inner = name[: -len(".gz")] if name.lower().endswith(".gz") else name
        if PurePosixPath(inner).suffix.lower() not in TEXT_SUFFIXES:
            inner += ".csv"  # "data.gz": a gzip of text, read as CSV (the delimiter is detected)
        return Archive(path, "gzip", inner)
    if name.lower().endswith(".gz"):
        raise ArchiveError(
            f"The file is named {name!r} but is not gzip-compressed; rename it or compress it "
            "again with gzip."
        )
    if not name.lower().endswith(".zip"):
        return None
    if not head.startswith(b"PK"):  # a local file header, or an empty archive's directory
        raise ArchiveError(
            f"The file is named {name!r} but is not a zip archive; zip it again and upload it."
        )
    member = _the_member(path)
    return Archive(path, "zip", PurePosixPath(member.filename).name, member)


def _the_member(path: Path) -> zipfile.ZipInfo:
    """The zip's one table, after the checks on its directory."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = [
                m
                for m in archive.infolist()
                if not m.is_dir() and not m.filename.startswith(MACOS_METADATA)
            ]
    except (zipfile.BadZipFile, OSError, ValueError):
        raise ArchiveError(
            "The zip archive is damaged and cannot be opened; zip the table again."
        ) from None
    if len(members) != 1:
        listed = ", ".join(repr(m.filename) for m in members[:5]) or "no files"
        raise ArchiveError(
            f"The zip archive holds {len(members)} files ({listed}); it must hold exactly one "
            "table (CSV, TSV or .xlsx). Zip that one file on its own."
        )
    member = members[0]
    _check_member_name(member.filename)
    if member.flag_bits & 0x1:
        raise ArchiveError(
            f"The file {member.filename!r} in the zip is encrypted (password-protected); "
            "zip it again without a password."
        )
    suffix = PurePosixPath(member.filename).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise ArchiveError(
            f"The zip holds {member.filename!r}, which is not a table; it must hold one CSV, "
            "TSV or Excel (.xlsx) file, not another archive or another kind of file."
        )
    return member


def _check_member_name(name: str) -> None:
    parts = PurePosixPath(name).parts
    if name.startswith(("/", "\\")) or "\\" in name or ".." in parts or ":" in name:
        raise ArchiveError(
            f"The zip holds a file named {name!r}, a path outside the archive (a 'path "
            "traversal' trick); zip the table again from its own folder."
        )


def unpacked_chunks(archive: Archive, *, max_bytes: int) -> Iterator[bytes]:
    """The table's bytes, in chunks of at most CHUNK_BYTES.

    Raises ArchiveError as soon as a limit is passed or the archive turns out damaged or nested.
    """
    if archive.member is not None:  # the zip's own directory: refuse before unpacking anything
        _check_limits(archive, archive.member.file_size, archive.member.compress_size, max_bytes)
    chunks = _gunzip(archive) if archive.kind == "gzip" else _unzip(archive)
    total, first = 0, True
    try:
        for chunk, compressed in chunks:
            if first and chunk:
                _refuse_nested(archive, chunk)
                first = False
            total += len(chunk)
            _check_limits(archive, total, compressed, max_bytes)
            yield chunk
    except (zipfile.BadZipFile, gzip.BadGzipFile, zlib.error, EOFError, OSError):
        raise ArchiveError(
            f"The {archive.kind} file is damaged or cut short, so it cannot be unpacked; "
            "compress the table again and upload the new file."
        ) from None
    finally:
        chunks.close()


def _gunzip(archive: Archive) -> Generator[tuple[bytes, int], None, None]:
    """(chunk, compressed bytes read so far): every gzip member, as `gzip` reads them."""
    with open(archive.path, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as unpacked:
        for chunk in iter(lambda: unpacked.read(CHUNK_BYTES), b""):
            yield chunk, raw.tell()


def _unzip(archive: Archive) -> Generator[tuple[bytes, int], None, None]:
    assert archive.member is not None
    with zipfile.ZipFile(archive.path) as zipped, zipped.open(archive.member) as part:
        for chunk in iter(lambda: part.read(CHUNK_BYTES), b""):
            yield chunk, archive.member.compress_size


def _refuse_nested(archive: Archive, head: bytes) -> None:
    nested = head.startswith(GZIP_MAGIC) or other_compressor(head)
    if head.startswith(ZIP_MAGIC) and archive.inner_suffix != ".xlsx":
        nested = True
    if nested:
        raise ArchiveError(
            f"The {archive.kind} file holds another compressed file ({archive.inner_name!r}); "
            "archives inside archives are refused. Compress the table itself, once."
        )


def _check_limits(archive: Archive, total: int, compressed: int, max_bytes: int) -> None:
    if total > max_bytes:
        raise ArchiveError(
            f"The {archive.kind} file unpacks to more than the limit of "
            f"{max_bytes / (1 << 20):g} MB; nothing was kept. Remove columns or rows you do not "
            "need, or ask the administrator to raise the limit."
        )
    if total > RATIO_FLOOR and total > MAX_RATIO * max(compressed, 1):
        raise ArchiveError(
            f"The {archive.kind} file unpacks more than {MAX_RATIO} times larger than its "
            "compressed size, as a 'zip bomb' does; it was refused and nothing was kept."
        )


class ChunkStream(io.RawIOBase):
    """A readable binary stream over chunks of bytes (an unpacked table, for pandas)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buffer:
            self._buffer = next(self._chunks, b"")
            if not self._buffer:
                return 0
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size
