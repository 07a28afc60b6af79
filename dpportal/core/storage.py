"""Uploads into private storage (`files.storage_dir()`): outside every served folder,
owner-only permissions.

Uploads stream straight into storage (`PrivateUploadHandler`): the size limit is enforced chunk
by chunk, so an oversized upload is refused before it is stored, and a partial file is removed
whenever the upload or its ingest fails.
"""

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopFutureHandlers, StopUpload
from django.http import HttpRequest

from dpportal.core import files
from dpportal.ingest import ByteScan

UPLOAD_FIELD = "file"


def store_stream(chunks, suffix: str, scan: ByteScan) -> tuple[str, Path]:
    """Stream byte chunks into a new private file, scanning them; nothing is left if anything
    fails. Returns (storage_name, path)."""
    name, path = files.new_storage_name(suffix)
    with files.PrivateWriter(path) as out:
        for chunk in chunks:
            scan.update(chunk)
            out.write(chunk)
        scan.finish()
    return name, path


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


@dataclass
class _Receiving:
    """The dataset file while it streams in: where it goes, its writer and its scan."""

    path: Path
    out: files.PrivateWriter
    scan: ByteScan
    name: str
    content_type: str


class PrivateUploadHandler(FileUploadHandler):
    """Stream the one dataset file into private storage, refusing it once it passes the limit."""

    def __init__(self, request: HttpRequest | None = None, max_bytes: int | None = None):
        super().__init__(request)
        self.max_bytes = max_bytes if max_bytes is not None else settings.MAX_UPLOAD_BYTES
        self.exceeded = False
        self._receiving: _Receiving | None = None
        self._done = False

    def new_file(self, field_name: str, file_name: str, content_type: str, *args, **kwargs):
        super().new_file(field_name, file_name, content_type, *args, **kwargs)
        if field_name == UPLOAD_FIELD and self._receiving is None:
            _name, path = files.new_storage_name(".upload")
            out = files.PrivateWriter(path)  # committed in file_complete
            self._receiving = _Receiving(path, out, ByteScan(), file_name, content_type)
        raise StopFutureHandlers()

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        receiving = self._receiving
        if receiving is None or self._done:
            return None  # any other file field is dropped unread
        if receiving.scan.size + len(raw_data) > self.max_bytes:
            self.exceeded = True
            self._abandon()
            raise StopUpload(connection_reset=False)
        receiving.scan.update(raw_data)
        receiving.out.file.write(raw_data)
        return None

    def file_complete(self, file_size: int) -> PrivateUpload | None:
        receiving = self._receiving
        if receiving is None or self._done:
            return None
        receiving.out.commit()
        self._done = True
        receiving.scan.finish()
        return PrivateUpload(receiving.path, receiving.name, receiving.scan, receiving.content_type)

    def upload_interrupted(self) -> None:
        self._abandon()

    def _abandon(self) -> None:
        receiving = self._receiving
        if receiving is not None:
            if not self._done:
                receiving.out.discard()
            receiving.path.unlink(missing_ok=True)
        self._done = True
