"""The reaper also sweeps stored files no dataset refers to (uploads cut off by a killed
process), once they are old enough, so storage is cleaned without waiting for the next upload."""

import io
import os
import re
import time

import pytest
from django.core.management import call_command

from dpportal.core import files

pytestmark = pytest.mark.database


@pytest.mark.django_db
def test_a_reaper_sweep_removes_old_orphan_uploads_only():
    folder = files.storage_dir()
    old, young = folder / "reaper-old.upload", folder / "reaper-young.upload"
    for path in (old, young):
        path.write_bytes(b"partial upload")
    os.utime(old, (time.time() - 7 * 3600,) * 2)
    out = io.StringIO()
    call_command("reap_releases", stdout=out)
    assert re.search(r"uploads_removed=[1-9]", out.getvalue())  # other tests may leave some
    assert not old.exists() and young.exists()
    young.unlink()
