"""Where the portal keeps its files, and the one way it writes a private file.

Layout (none of it under a served folder; folders 0700, files 0600):

    DATASET_STORAGE_DIR/<random>.<suffix>     raw uploads, their Parquet copies (private)
    DATA_DIR/work/<release>-<token>/          one execution's scratch folder (private)
    DATA_DIR/releases/<release>-<token12>/    a published release's mechanism output (public)
    DATA_DIR/release-cache/<output folder>/   zip and chart data derived from it (public)
    DATA_DIR/custodian/<output folder>-utility.json   comparison with the raw data (owner only)

Every private file is written by `PrivateWriter`: under a temporary name in its own folder, with
mode 0600 from the start, flushed to disk, then renamed into place in one step, so a reader never
sees half a file and a killed writer leaves only a temporary name (which the sweeps remove).

With an object store configured, the datasets' files, the published release files, the package
zips and the utility reports are written here first, then moved into the bucket
(`dpportal.core.object_store`, which owns where stored bytes live); the layout gives their keys.
"""

import os
import secrets
from pathlib import Path

from django.conf import settings

# ---------------------------------------------------------------- the layout


def private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def storage_dir() -> Path:
    """Raw uploads and their Parquet copies."""
    return private_dir(Path(settings.DATASET_STORAGE_DIR))


def stored_path(storage_name: str) -> Path:
    return storage_dir() / storage_name


def new_storage_name(suffix: str) -> tuple[str, Path]:
    """A fresh random name (128 bits) in storage, and its path; nothing is created yet."""
    name = f"{secrets.token_hex(16)}{suffix}"
    return name, storage_dir() / name


def dataset_path(dataset) -> Path:
    """The dataset's typed columnar copy (Parquet), which every release reads."""
    return Path(settings.DATASET_STORAGE_DIR) / dataset.parquet_name


def data_dir() -> Path:
    return Path(settings.DATA_DIR)


def work_root() -> Path:
    return data_dir() / "work"


def work_dir(release, token: str) -> Path:
    """One execution's scratch folder (not created here)."""
    return work_root() / f"{release.pk}-{token}"


def releases_root() -> Path:
    return data_dir() / "releases"


def package_dir(release, token: str) -> Path:
    """Where the execution holding `token` publishes its output: unique to that execution."""
    return releases_root() / f"{release.pk}-{token[:12]}"


def output_dir(release) -> Path:
    """The published output of a finished release (`Release.output_dir`, relative)."""
    return data_dir() / release.output_dir


def relative_to_data(path: Path) -> str:
    return str(path.relative_to(data_dir()))


def release_cache_dir(release) -> Path:
    """Derived copies of a release's public files (zip, chart data), rebuilt if removed."""
    return private_dir(data_dir() / "release-cache" / Path(release.output_dir).name)


def utility_report_path(release) -> Path:
    """The custodian-only report, named after the release's output folder (unique to the
    execution that published it)."""
    name = Path(release.output_dir).name or f"release-{release.pk}"
    return data_dir() / "custodian" / f"{name}-utility.json"


# ---------------------------------------------------------------- the private writer


class PrivateWriter:
    """A private file being written: at a temporary name beside `path`, mode 0600 from its
    creation; `commit()` flushes it to disk and renames it to `path` in one step, `discard()`
    removes it. As a context manager it yields the open file and commits unless an exception
    leaves the block (then it discards)."""

    def __init__(self, path, mode: str = "wb", **open_args):
        self.path = Path(path)
        private_dir(self.path.parent)
        self.temp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(6)}.tmp")
        fd = os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.file = os.fdopen(fd, mode, **open_args)

    def close(self) -> Path:
        """Flush the file to disk and close it, still at its temporary name (returned)."""
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return self.temp

    def commit(self) -> Path:
        os.replace(self.close(), self.path)
        return self.path

    def discard(self) -> None:
        self.file.close()
        self.temp.unlink(missing_ok=True)

    def __enter__(self):
        return self.file

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def write_private(path, content: bytes) -> Path:
    """Write `content` to `path` as a private file, atomically (see PrivateWriter)."""
    with PrivateWriter(path) as out:
        out.write(content)
    return Path(path)
