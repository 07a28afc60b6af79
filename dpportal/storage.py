"""Private storage of raw dataset files: outside every served folder, owner-only permissions."""

import hashlib
import os
import secrets
from pathlib import Path

from django.conf import settings


def storage_dir() -> Path:
    path = Path(settings.DATASET_STORAGE_DIR)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def new_storage_name(suffix: str) -> str:
    return f"{secrets.token_hex(16)}{suffix}"


def write_private(chunks, suffix=".csv"):
    """Stream byte chunks into a new private file; return (storage_name, sha256, size)."""
    name = new_storage_name(suffix)
    path = storage_dir() / name
    digest, size = hashlib.sha256(), 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return name, digest.hexdigest(), size


def remove(storage_name: str) -> None:
    if storage_name:
        (storage_dir() / storage_name).unlink(missing_ok=True)
