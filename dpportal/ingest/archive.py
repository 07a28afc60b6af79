"""Compressed uploads (.csv.gz, .tsv.gz, a .zip holding one CSV/TSV/XLSX): the table inside is
unpacked into its own private file, streamed, with the upload limit applied to the unpacked
bytes (`mechanisms.archives` holds the limits and refusals, shared with the command line)."""

from dataclasses import dataclass
from pathlib import Path

from dpportal.core import files
from dpportal.ingest.scan import ByteScan, IngestError
from mechanisms.archives import ArchiveError, open_archive, unpacked_chunks


@dataclass
class Unpacked:
    """The table from inside an archive: its private file, the scan of its bytes, its name."""

    path: Path
    scan: ByteScan
    name: str
    kind: str  # "gzip" or "zip"


def unpack_upload(path: Path, filename: str, *, max_bytes: int) -> Unpacked | None:
    """The table inside the uploaded archive `path` (named `filename`), or None if the upload
    is not an archive. Refusals raise IngestError; a refused archive leaves no unpacked file."""
    try:
        archive = open_archive(path, filename)
        if archive is None:
            return None
        _name, out = files.new_storage_name(archive.inner_suffix)
        scan = ByteScan()
        with files.PrivateWriter(out) as sink:
            for chunk in unpacked_chunks(archive, max_bytes=max_bytes):
                scan.update(chunk)
                sink.write(chunk)
        scan.finish()
    except ArchiveError as exc:
        raise IngestError(str(exc)) from None
    return Unpacked(out, scan, archive.inner_name, archive.kind)
