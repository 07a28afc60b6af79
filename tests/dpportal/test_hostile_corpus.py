"""Issue 13: the red team's hostile-upload corpus (scripts/hostile_corpus.py, at least 73 cases)
through the real upload page. Each case is refused with a message containing its words (HTTP
400/413, nothing stored) or accepted with exactly its values stored; never a server error."""

import html
import importlib.util
import subprocess
import sys
import tempfile

import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from dpportal.core import files
from dpportal.models import Dataset
from tests.helpers import REPO_ROOT, make_user

SCRIPT = REPO_ROOT / "scripts" / "hostile_corpus.py"
_spec = importlib.util.spec_from_file_location("hostile_corpus", SCRIPT)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)
CASES = corpus.cases()


def test_the_corpus_has_at_least_73_distinct_cases_of_both_kinds():
    assert len(CASES) >= 73
    assert len({c.id for c in CASES}) == len(CASES)
    refusals = sum(not c.accepted for c in CASES)
    print(f"{len(CASES)} cases: {refusals} refusals, {len(CASES) - refusals} acceptances")
    assert refusals >= 40 and len(CASES) - refusals >= 20


def test_the_script_writes_the_corpus_to_a_folder(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    quick = [c for c in CASES if not c.slow]
    assert f"{len(quick)} cases written" in result.stdout
    assert len(list(tmp_path.glob("*.bin"))) == len(quick)
    assert (tmp_path / "manifest.json").exists()


@pytest.fixture
def clean_dirs(settings, tmp_path, monkeypatch):
    """Fresh private storage and temporary folders, to check what each upload leaves."""
    storage, temp = tmp_path / "storage", tmp_path / "tmp"
    temp.mkdir()
    settings.DATASET_STORAGE_DIR = storage
    settings.FILE_UPLOAD_TEMP_DIR = str(temp)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return storage, temp


def _params(cases):
    return [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else []) for c in cases]


@pytest.mark.django_db
@pytest.mark.parametrize("case", _params(CASES))
def test_hostile_upload_does_what_the_corpus_says(case, clean_dirs):
    client = Client(raise_request_exception=False)  # a 500 is a response, not an exception
    client.force_login(make_user("alice"))
    response = client.post(
        reverse("dataset_upload"),
        {
            "name": "Hostile",
            "header": "auto",
            "epsilon_total": "1",
            "delta_total": "0",
            "neighbouring": "replace-one",
            "file": SimpleUploadedFile(case.filename, case.make()),
        },
    )
    assert response.status_code < 500, response.content[-3000:]
    text = html.unescape(response.content.decode())
    storage, temp = clean_dirs
    assert list(temp.iterdir()) == []
    if case.accepted:
        assert response.status_code == 302, text[-3000:]
        _assert_stored_exactly(case)
        return
    assert response.status_code in (400, 413), text[-3000:]
    for words in case.refuse:
        assert words in text, (words, _error_text(text))
    assert "Nothing was stored" in text
    assert Dataset.objects.count() == 0
    assert not storage.exists() or list(storage.iterdir()) == []


def _assert_stored_exactly(case):
    dataset = Dataset.objects.get()
    name = dataset.original_filename
    assert not any(bad in name for bad in ("/", "\\", "\0")), name
    table = pq.read_table(files.dataset_path(dataset))
    for column, values in case.table.items():
        assert table.column(column).to_pylist() == values, column


def _error_text(page: str) -> str:
    """The upload form's error lines (for assertion messages)."""
    return " | ".join(line.strip() for line in page.splitlines() if "rror" in line)[:2000]
