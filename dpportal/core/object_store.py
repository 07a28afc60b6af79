"""Where stored bytes live: the local data folders (the default) or an S3-compatible bucket.

`dpportal.core.files` names every stored file by its local path. With DPPORTAL_S3_BUCKET unset,
that path is where the bytes are. With it set, the datasets' files (raw upload, Parquet copy),
the releases' published files, their package zips and the custodian-only utility reports are
objects in that bucket instead, keyed by the path's place in the layout (`storage/<name>`,
`releases/<folder>/<file>`, `release-cache/<folder>/<zip>`, `custodian/<report>`); a file is
written locally first (the ingest needs to read it several times) and `keep` moves it into the
bucket. Derived caches (chart data, public pages) stay local: each machine rebuilds its own.

What this module guarantees for every object:
- private: put with the `private` canned ACL (owner only, nothing for anonymous or other
  accounts); downloads go through the portal's permission-checked, audited views, never a
  public or presigned URL (a URL could be passed on, unchecked and unaudited, while valid);
- encrypted at rest (SSE, AES256) unless DPPORTAL_S3_SSE=0 for a store without it: a store
  that refuses the header makes the write fail, never silently store plaintext;
- whole or absent: large files go up in parts, and a failed upload is aborted (boto3's transfer
  manager), so a key holds a complete file or nothing; `remove` deletes objects of a refused
  upload or a deleted dataset;
- read by byte range: Parquet through pyarrow's S3 filesystem one record batch at a time,
  downloads in chunks, so no object needs to fit in memory.
"""

import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from functools import lru_cache
from pathlib import Path

import pyarrow.fs as pa_fs
from django.conf import settings

from dpportal.core import files
from mechanisms.counting.inprocess import s3_filesystem

# boto3 (with botocore) is imported where a bucket is used, not here: every process that loads
# the portal imports this module, and most never touch a bucket.

CHUNK_BYTES = 1 << 20  # downloads are streamed in pieces of this size
PART_BYTES = 8 << 20  # uploads above this size go up in parts of this size


def enabled() -> bool:
    return bool(settings.DPPORTAL_S3_BUCKET)


def key(path: Path) -> str:
    """The object key of a stored file: its place in the layout of `dpportal.core.files`."""
    path = Path(path)
    if path.is_relative_to(files.storage_dir()):
        return f"storage/{path.relative_to(files.storage_dir()).as_posix()}"
    return path.relative_to(files.data_dir()).as_posix()


# ---------------------------------------------------------------- writing and removing


def keep(path: Path) -> None:
    """Put the finished local file `path` where stored bytes live: left in place locally, or
    uploaded as a private, encrypted object and the local file removed."""
    if not enabled():
        return
    try:
        _upload(path, key(path))
    finally:
        Path(path).unlink(missing_ok=True)


def keep_written(writer: files.PrivateWriter) -> Path:
    """Finish `writer`'s file as `keep` does, where two processes may write the same file at
    once: committed in place, or uploaded as `writer.path`'s object from the writer's own
    temporary file and that file removed. Neither then uploads or removes the other's file
    (each committing to the one local path, the first to upload removed what the second was
    about to upload)."""
    if not enabled():
        return writer.commit()
    try:
        _upload(writer.close(), key(writer.path))
    finally:
        writer.temp.unlink(missing_ok=True)
    return writer.path


def _upload(path: Path, object_key: str) -> None:
    from boto3.s3.transfer import TransferConfig

    _client().upload_file(
        str(path),
        settings.DPPORTAL_S3_BUCKET,
        object_key,
        ExtraArgs=_put_arguments(),
        Config=TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES),
    )


def _put_arguments() -> dict[str, str]:
    arguments = {"ACL": "private"}
    if settings.DPPORTAL_S3_SSE:
        arguments["ServerSideEncryption"] = "AES256"
    return arguments


def remove(path: Path) -> None:
    """Remove a stored file: the local file (scratch, or the default store) and its object."""
    Path(path).unlink(missing_ok=True)
    if enabled():
        _client().delete_object(Bucket=settings.DPPORTAL_S3_BUCKET, Key=key(path))


def remove_stored(storage_name: str) -> None:
    if storage_name:
        remove(files.stored_path(storage_name))


def remove_orphan_stored_files(referenced: set[str], older_than_seconds: float) -> int:
    """Remove stored files no dataset refers to (left by a killed process) once old enough:
    local ones (scratch, or the default store) and, with a bucket, objects under `storage/`."""
    cutoff = time.time() - older_than_seconds
    removed = 0
    for path in files.storage_dir().iterdir():
        if path.name not in referenced and path.stat().st_mtime < cutoff:
            path.unlink(missing_ok=True)
            removed += 1
    if enabled():
        pages = _client().get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=settings.DPPORTAL_S3_BUCKET, Prefix="storage/"):
            for entry in page.get("Contents", []):
                name = entry["Key"].removeprefix("storage/")
                if name not in referenced and entry["LastModified"].timestamp() < cutoff:
                    _client().delete_object(Bucket=settings.DPPORTAL_S3_BUCKET, Key=entry["Key"])
                    removed += 1
    return removed


def stage_folder(folder: Path, final: Path) -> None:
    """Before publication: upload a release's files (the local `folder`) under `final`'s key,
    unique to the execution. Local: nothing yet (`place_folder` renames)."""
    if enabled():
        for path in sorted(folder.iterdir()):
            _upload(path, key(final / path.name))


def place_folder(folder: Path, final: Path) -> None:
    """Publication itself, under the release's lock: local, rename `folder` to `final` in one
    step; with a bucket the staged objects are already there (the database row publishes)."""
    if not enabled():
        final.parent.mkdir(parents=True, exist_ok=True)
        folder.rename(final)


def remove_unpublished_folders(published: set[str], older_than: float) -> int:
    """Remove objects under `releases/` of folders no release published (an execution that
    lost its lease, or was killed after staging), once last written before `older_than`."""
    if not enabled():
        return 0
    stale: dict[str, bool] = {}
    pages = _client().get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=settings.DPPORTAL_S3_BUCKET, Prefix="releases/"):
        for entry in page.get("Contents", []):
            folder = entry["Key"].rsplit("/", 1)[0]
            old = entry["LastModified"].timestamp() < older_than
            stale[folder] = stale.get(folder, True) and old and folder not in published
    removed = 0
    for folder, remove_it in stale.items():
        if remove_it:
            for page in pages.paginate(Bucket=settings.DPPORTAL_S3_BUCKET, Prefix=f"{folder}/"):
                for entry in page.get("Contents", []):
                    _client().delete_object(Bucket=settings.DPPORTAL_S3_BUCKET, Key=entry["Key"])
            removed += 1
    return removed


# ---------------------------------------------------------------- reading


def names(folder: Path) -> list[str]:
    """The names of the files in a stored folder, sorted (none if it does not exist)."""
    if not enabled():
        return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    prefix = f"{key(folder)}/"
    pages = _client().get_paginator("list_objects_v2")
    found = []
    for page in pages.paginate(Bucket=settings.DPPORTAL_S3_BUCKET, Prefix=prefix):
        found += [entry["Key"].removeprefix(prefix) for entry in page.get("Contents", [])]
    return sorted(name for name in found if "/" not in name)


def read_bytes(path: Path) -> bytes:
    """A small stored file whole (a release's JSON or CSV)."""
    if not enabled():
        return Path(path).read_bytes()
    body = _client().get_object(Bucket=settings.DPPORTAL_S3_BUCKET, Key=key(path))["Body"]
    with closing(body):
        return body.read()


def exists(path: Path) -> bool:
    if not enabled():
        return Path(path).is_file()
    from botocore.exceptions import ClientError

    try:
        _client().head_object(Bucket=settings.DPPORTAL_S3_BUCKET, Key=key(path))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
            return False
        raise
    return True


@contextmanager
def open_input(path: Path):
    """A seekable binary file (pyarrow's) reading the stored file by byte range: for Parquet
    readers (`pq.ParquetFile`, `pq.read_table`) and `zipfile`."""
    if enabled():
        source = f"{settings.DPPORTAL_S3_BUCKET}/{key(path)}"
        handle = _filesystem(*_location()).open_input_file(source)
    else:
        handle = pa_fs.LocalFileSystem().open_input_file(str(path))
    try:
        yield handle
    finally:
        handle.close()


def size(path: Path) -> int:
    if not enabled():
        return Path(path).stat().st_size
    head = _client().head_object(Bucket=settings.DPPORTAL_S3_BUCKET, Key=key(path))
    return int(head["ContentLength"])


def chunks(path: Path) -> Iterator[bytes]:
    """The stored file's bytes in pieces of CHUNK_BYTES, for a streamed download."""
    if enabled():
        body = _client().get_object(Bucket=settings.DPPORTAL_S3_BUCKET, Key=key(path))["Body"]
        try:
            yield from body.iter_chunks(CHUNK_BYTES)
        finally:
            body.close()
        return
    with open(path, "rb") as handle:
        yield from iter(lambda: handle.read(CHUNK_BYTES), b"")


# ---------------------------------------------------------------- clients


def _location() -> tuple[str, str]:
    return settings.DPPORTAL_S3_ENDPOINT_URL, settings.DPPORTAL_S3_REGION


def _client():
    return _boto_client(*_location())


@lru_cache(maxsize=4)
def _boto_client(endpoint_url: str, region: str):
    """Keys come from the standard AWS sources (AWS_ACCESS_KEY_ID, ..., or an instance role)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url or None,
        region_name=region or None,
        config=Config(retries={"max_attempts": 3, "mode": "standard"}),
    )


@lru_cache(maxsize=4)
def _filesystem(endpoint_url: str, region: str) -> pa_fs.S3FileSystem:
    """The portal's own bucket, with the portal's own keys (the AWS SDK's usual sources);
    sources custodians register never get these (`dpportal.sources.reach`)."""
    options = {"endpoint_url": endpoint_url, "region": region, "credentials": "ambient"}
    return s3_filesystem(options)
