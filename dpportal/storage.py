"""Private storage of raw dataset files: outside every served folder, owner-only permissions.

Uploads stream straight into this folder (`PrivateUploadHandler`): the size limit is enforced
chunk by chunk, so an oversized upload is refused before it is stored, and a partial file is
removed whenever the upload or its ingest fails.
"""

import os
import secrets
import time
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopFutureHandlers, StopUpload

from .ingest import ByteScan

UPLOAD_FIELD = "file"


def storage_dir() -> Path:
    path = Path(settings.DATASET_STORAGE_DIR)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def path_of(storage_name: str) -> Path:
    return storage_dir() / storage_name


def new_private_file(suffix: str) -> tuple[str, Path]:
    """Create a new empty file (mode 0600) with a random name; return (storage_name, path)."""
    name = f"{secrets.token_hex(16)}{suffix}"
    path = storage_dir() / name
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return name, path


def write_private(chunks, suffix: str, scan: ByteScan) -> tuple[str, Path]:
    """Stream byte chunks into a new private file, scanning them; removed if anything fails."""
    name, path = new_private_file(suffix)
    try:
        with open(path, "wb") as out:
            for chunk in chunks:
                scan.update(chunk)
                out.write(chunk)
        scan.finish()
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return name, path


def remove(storage_name: str) -> None:
    if storage_name:
        path_of(storage_name).unlink(missing_ok=True)


def remove_orphans(referenced: set[str], older_than_seconds: float) -> int:
    """Remove files no dataset refers to (left by a killed process) once they are old enough."""
    cutoff = time.time() - older_than_seconds
    removed = 0
    for path in storage_dir().iterdir():
        if path.name not in referenced and path.stat().st_mtime < cutoff:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


class PrivateUpload(UploadedFile):
    """An upload already in private storage, with the facts gathered while it streamed."""

    def __init__(self, path: Path, name: str, scan: ByteScan, content_type: str):
        super().__init__(file=None, name=name, content_type=content_type, size=scan.size)
        self.path = path
        self.scan = scan

    @property
    def storage_name(self) -> str:
        return self.path.name

    def discard(self) -> None:
        """Remove the stored bytes (a no-op once the service has kept or removed them)."""
        self.path.unlink(missing_ok=True)


class PrivateUploadHandler(FileUploadHandler):
    """Stream the one dataset file into private storage, refusing it once it passes the limit."""

    def __init__(self, request=None, max_bytes=None):
        super().__init__(request)
        self.max_bytes = max_bytes if max_bytes is not None else settings.MAX_UPLOAD_BYTES
        self.exceeded = False
        self._out = None
        self._path = None
        self._scan = None
        self._done = False

    def new_file(self, field_name, file_name, *args, **kwargs):
        super().new_file(field_name, file_name, *args, **kwargs)
        if field_name == UPLOAD_FIELD and self._path is None:
            _name, self._path = new_private_file(".upload")
            self._out = open(self._path, "wb")  # noqa: SIM115  (closed in file_complete)
            self._scan = ByteScan()
        raise StopFutureHandlers()

    def receive_data_chunk(self, raw_data, start):
        if self._out is None or self._done:
            return None  # any other file field is dropped unread
        if self._scan.size + len(raw_data) > self.max_bytes:
            self.exceeded = True
            self._abandon()
            raise StopUpload(connection_reset=False)
        self._scan.update(raw_data)
        self._out.write(raw_data)
        return None

    def file_complete(self, file_size):
        if self._out is None or self._done:
            return None
        self._out.close()
        self._done = True
        self._scan.finish()
        return PrivateUpload(self._path, self.file_name, self._scan, self.content_type)

    def upload_interrupted(self):
        self._abandon()

    def _abandon(self):
        if self._out is not None:
            self._out.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)
        self._out = None
        self._done = True
