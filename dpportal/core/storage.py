"""Uploads into private storage (`files.storage_dir()`): outside every served folder,
owner-only permissions.

Uploads stream straight into storage (`PrivateUploadHandler`): the size limit is enforced chunk
by chunk, so an oversized upload is refused before it is stored, and a partial file is removed
whenever the upload or its ingest fails.
"""

from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopFutureHandlers, StopUpload

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
            _name, self._path = files.new_storage_name(".upload")
            self._out = files.PrivateWriter(self._path)  # committed in file_complete
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
        self._out.file.write(raw_data)
        return None

    def file_complete(self, file_size):
        if self._out is None or self._done:
            return None
        self._out.commit()
        self._done = True
        self._scan.finish()
        return PrivateUpload(self._path, self.file_name, self._scan, self.content_type)

    def upload_interrupted(self):
        self._abandon()

    def _abandon(self):
        if self._out is not None and not self._done:
            self._out.discard()
        if self._path is not None:
            self._path.unlink(missing_ok=True)
        self._out = None
        self._done = True
