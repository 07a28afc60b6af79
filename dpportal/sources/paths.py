"""Local Parquet sources: the folders each custodian may read, and the files a source is.

DPPORTAL_SOURCE_ROOTS lists entries separated by ":", each either
- `NAME=FOLDER`: the folder is the custodian NAME's (their user name), all of it; or
- `FOLDER`: a folder of per-custodian folders: the custodian NAME reads FOLDER/NAME only
  (a `NAME` folder that is a link leading out of FOLDER is nobody's).
A path given relative is taken in the custodian's first folder.

Every file a source is made of is checked here, at registration and again before each release
(`vetted_files`): it resolves (links followed) inside one of the custodian's folders, and it is
a regular file, known by `stat` without opening it, so a pipe, device or socket never makes a
web process wait. The counting engines are given exactly this list of files.
"""

import os
import stat
from pathlib import Path

from django.conf import settings
from django.core.checks import Warning, register

from dpportal.sources.reach import SourceError

MAX_FILES = 10_000  # files in one source folder
IGNORED_PREFIXES = (".", "_")  # as pyarrow's folder discovery: hidden and metadata files


def owner_roots(username: str) -> list[Path]:
    """The folders `username` may register local files from, resolved."""
    roots = []
    for entry in settings.DPPORTAL_SOURCE_ROOTS:
        name, named, folder = entry.partition("=")
        if named and "/" not in name:
            if name == username:
                roots.append(Path(folder).resolve())
            continue
        base = Path(entry).resolve()
        mine = (base / username).resolve()
        if username not in (".", "..") and mine.parent == base:
            roots.append(mine)
    return roots


@register()
def check_plain_roots_hold_folders(app_configs=None, **kwargs):
    """dpportal.W010: a plain FOLDER of DPPORTAL_SOURCE_ROOTS holds files of its own. Before
    roots had owners such a folder was everyone's; now it holds per-custodian folders, so files
    directly in it belong to no one until the operator says whose they are."""
    warnings = []
    for entry in settings.DPPORTAL_SOURCE_ROOTS:
        name, named, _folder = entry.partition("=")
        if (named and "/" not in name) or not Path(entry).is_dir():
            continue
        with os.scandir(entry) as entries:
            loose = any(e.is_file() and not e.name.startswith(IGNORED_PREFIXES) for e in entries)
        if loose:
            warnings.append(
                Warning(
                    f"DPPORTAL_SOURCE_ROOTS: {entry} holds files, but a plain folder there is "
                    "a folder of per-custodian folders (FOLDER/NAME), so no one can register them.",
                    hint=f"Write NAME={entry} for the custodian these files are for, or move "
                    f"them to {entry}/NAME.",
                    id="dpportal.W010",
                )
            )
    return warnings


def vetted_files(location: str, username: str) -> tuple[Path, list[str]]:
    """The real path of `location` and the regular files it is made of (itself, or the files
    of the folder, sorted), every one inside `username`'s folders; else a SourceError."""
    roots = owner_roots(username)
    if not roots:
        raise SourceError(
            "You have no folder on this server to register files from (the administrator "
            "lists them in DPPORTAL_SOURCE_ROOTS); give an s3:// URL or a postgresql:// URL."
        )
    path = Path(location)
    real = _resolved(path if path.is_absolute() else roots[0] / path, location)
    if not any(real.is_relative_to(root) for root in roots):
        raise SourceError(
            f"{location!r} is outside your folders on this server ({', '.join(map(str, roots))})."
        )
    mode = _mode(real, location)
    if stat.S_ISREG(mode):
        return real, [str(real)]
    if not stat.S_ISDIR(mode):
        raise SourceError(_not_regular(location))
    files = sorted(_folder_files(real, roots, location))
    if not files:
        raise SourceError(f"The folder {location!r} holds no file.")
    return real, files


def _folder_files(folder: Path, roots: list[Path], location: str) -> list[str]:
    """The regular files under `folder`, each resolved inside `roots` (links followed once)."""
    found: list[str] = []
    seen, pending = {folder}, [folder]
    while pending:
        with os.scandir(pending.pop()) as entries:
            listed = sorted(entries, key=lambda e: e.name)
        for entry in listed:
            if entry.name.startswith(IGNORED_PREFIXES):
                continue
            shown = os.path.relpath(entry.path, folder)
            real = _resolved(Path(entry.path), shown)
            if not any(real.is_relative_to(root) for root in roots):
                raise SourceError(
                    f"{shown!r} in {location!r} is a link that leads outside your folders; "
                    "remove it or register a folder without it."
                )
            mode = _mode(real, shown)
            if stat.S_ISDIR(mode) and real not in seen:
                seen.add(real)
                pending.append(real)
            elif stat.S_ISREG(mode):
                found.append(str(real))
            elif not stat.S_ISDIR(mode):
                raise SourceError(_not_regular(shown))
            if len(found) > MAX_FILES:
                raise SourceError(
                    f"{location!r} holds more than {MAX_FILES:,} files; register a folder "
                    "with fewer (or merge small files)."
                )
    return found


def _resolved(path: Path, shown: str) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop of links
        raise SourceError(f"{shown!r} is a link that leads nowhere readable.") from None


def _mode(path: Path, shown: str) -> int:
    """The file type, from `stat` (which never opens the file, so never waits on a pipe)."""
    try:
        return path.stat().st_mode
    except FileNotFoundError:
        raise SourceError(f"There is no file or folder {shown!r}; check the path.") from None
    except OSError:
        raise SourceError(f"The portal may not read {shown!r}; check its permissions.") from None


def _not_regular(shown: str) -> str:
    return (
        f"{shown!r} is not a regular file (a pipe, a device or a socket): only Parquet files "
        "and folders of them can be registered."
    )
