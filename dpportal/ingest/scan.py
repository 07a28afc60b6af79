"""Bytes as they arrive: hash, size, NUL bytes and UTF-8 validity, gathered in one pass."""

import codecs
import hashlib
from pathlib import Path

HEAD_BYTES = 1 << 20  # the first bytes are kept for detecting the format


class IngestError(Exception):
    """The file cannot be used; the message tells the custodian what is wrong and where."""


class ByteScan:
    """Facts gathered while the bytes stream past: hash, size, NUL bytes, UTF-8 validity.

    Kept cheap (plain ASCII chunks skip the UTF-8 decoder); positions are worked out later, and
    only for files that are refused.
    """

    def __init__(self):
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.quotes = 0
        self.head = bytearray()
        self.nul_offset: int | None = None
        self.utf8_valid = True
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def update(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        if len(self.head) < HEAD_BYTES:
            self.head += chunk[: HEAD_BYTES - len(self.head)]
        if self.nul_offset is None and b"\0" in chunk:
            self.nul_offset = self.size + chunk.index(b"\0")
        if self.utf8_valid and not (chunk.isascii() and not self._utf8.getstate()[0]):
            try:
                self._utf8.decode(chunk)
            except UnicodeDecodeError:
                self.utf8_valid = False
        if b'"' in chunk:
            self.quotes += chunk.count(b'"')
        self.size += len(chunk)

    def finish(self) -> None:
        if self.utf8_valid:
            try:
                self._utf8.decode(b"", final=True)
            except UnicodeDecodeError:
                self.utf8_valid = False

    @property
    def hexdigest(self) -> str:
        return self.sha256.hexdigest()


def scan_file(path: Path) -> ByteScan:
    """A `ByteScan` of a file already on disk."""
    scan = ByteScan()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            scan.update(chunk)
    scan.finish()
    return scan
