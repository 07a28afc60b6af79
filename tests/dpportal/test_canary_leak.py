"""T9: a unique value and a unique category placed in an uploaded file appear in no public
artifact: release packages (folders and zip downloads), manifests and traces, pages and CSVs
seen by an auditor, the audit log, the task messages and every key in Redis, and the worker log.

Only the custodian's private storage (the raw file and its Parquet copy) may hold them.
"""

import gzip
import io
import json
import zipfile

import pandas as pd
import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import Client
from django.urls import reverse

from dpportal import packaging, services
from dpportal.models import AuditEvent, Release
from tests.conftest import REPO_ROOT, wait_until
from tests.dpportal.test_foundation import DEMO_SCHEMA, make_user
from tests.dpportal.worker_app import start_worker

CANARY_VALUE = b"987654321"
CANARY_CATEGORY = b"Qzxv-canary-category"
RELEASES = [("perturbed_histogram", ["age", "workclass"], {}),
            ("smoothed_histogram", ["age", "workclass"], {"rows": 300}),
            ("mwem", ["age", "workclass", "sex"], {"rounds": 3}),
            ("range_count", ["age"], {"grid": [16], "prefixes": True})]


def hits(blob: bytes) -> int:
    return blob.count(CANARY_VALUE) + blob.count(CANARY_CATEGORY)


@pytest.fixture
def canary_dataset(tmp_path):
    with gzip.open(REPO_ROOT / "demo" / "adult.csv.gz", "rt") as handle:
        frame = pd.read_csv(handle, nrows=3000, dtype=str, keep_default_na=False)
    frame.loc[0, "age"] = CANARY_VALUE.decode()  # far outside the public bounds: clamped
    frame.loc[1, "workclass"] = CANARY_CATEGORY.decode()  # undeclared: goes to "other"
    frame.loc[2, "fnlwgt"] = CANARY_VALUE.decode()  # an ignored column
    path = tmp_path / "canary.csv"
    frame.to_csv(path, index=False)
    owner, auditor = make_user("owner"), make_user("auditor")
    dataset = services.dataset_create_from_path(owner=owner, name="Canary", source_path=path,
                                                epsilon_total=10)
    dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=DEMO_SCHEMA)
    dataset.auditors.add(auditor)
    return owner, auditor, dataset


def body(response) -> bytes:
    """A response's bytes; a zip download's members uncompressed (compression hides text)."""
    data = b"".join(response.streaming_content) if response.streaming else response.content
    if data.startswith(b"PK\x03\x04"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return b"".join(archive.read(name) for name in archive.namelist())
    return data


def redis_dump(url) -> bytes:
    client = redis.Redis.from_url(url)
    readers = {b"string": client.get, b"list": lambda k: client.lrange(k, 0, -1),
               b"hash": client.hgetall, b"set": client.smembers,
               b"zset": lambda k: client.zrange(k, 0, -1)}
    parts = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        parts.append(key + repr(readers[kind](key)).encode() if kind in readers else key)
    return b"\n".join(parts)


@pytest.mark.django_db(transaction=True)
def test_the_canary_appears_in_no_public_artifact(canary_dataset, a_minute_later):
    owner, auditor, dataset = canary_dataset
    with start_worker(connection) as (_, worker_log):
        releases = [services.release_create(dataset=dataset, user=owner, mechanism=name,
                                            columns=columns, params=params, epsilon="0.5")
                    for name, columns, params in RELEASES]
        during_run = redis_dump(settings.CELERY_BROKER_URL)
        releases = [wait_until(lambda r=r: Release.objects.filter(
            pk=r.pk, status__in=Release.TERMINAL).first(), timeout=180) for r in releases]
    assert {r.mechanism: r.status for r in releases} == {n: "done" for n, _, _ in RELEASES}, \
        {r.mechanism: r.error_message for r in releases}
    client = Client()
    client.force_login(auditor)
    pages = [reverse("release_list"), reverse("release_list_csv"), reverse("audit_log"),
             reverse("audit_log_csv"), reverse("dataset_ledger", args=[dataset.pk])]
    for release in releases:
        pages += [reverse("release_detail", args=[release.pk]),
                  reverse("release_progress", args=[release.pk]),
                  reverse("release_download_zip", args=[release.pk])]
    responses = [client.get(url) for url in pages]
    assert [r.status_code for r in responses] == [200] * len(pages)  # real pages, not 404s
    found = {
        "release packages": sum(hits(b"".join(packaging.package_files(r).values()))
                                for r in releases),
        "manifests, traces, messages": sum(hits(json.dumps(
            [r.manifest, r.trace, r.error_message, r.progress_stage]).encode())
            for r in releases),
        "auditor pages and downloads": sum(hits(body(response)) for response in responses),
        "audit log": hits(json.dumps(list(AuditEvent.objects.values_list("details", flat=True)))
                          .encode()),
        "Redis while running": hits(during_run),
        "Redis afterwards": hits(redis_dump(settings.CELERY_BROKER_URL)),
        "worker log": hits(worker_log.read_bytes()),
    }
    private = hits((settings.DATASET_STORAGE_DIR / dataset.storage_name).read_bytes())
    print(f"\nT9 canary hits ({len(releases)} releases, {len(pages)} auditor pages): {found}; "
          f"in the custodian's private raw file (expected): {private}")
    assert private > 0  # the scan can see the canary where it really is
    assert all(count == 0 for count in found.values())
