"""Object storage: with DPPORTAL_S3_BUCKET set, datasets and package zips live in an
S3-compatible bucket, privately and encrypted, and the portal works end to end on it.

The bucket is on a real S3-compatible HTTP server, moto's standalone server
(tests/object_storage.py), reached over HTTP through the same client code as in production
(dpportal/object_store.py); each test gets a fresh bucket.
"""

import io
import re
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from django.db.models.signals import post_save
from django.urls import reverse

import mechanisms
from dpportal import files, object_store, packaging, services
from dpportal.models import Dataset, Release
from mechanisms.counting import TableSource, count_cells
from tests.conftest import wait_until
from tests.helpers import (
    DEMO_SCHEMA,
    REPO_ROOT,
    SMALL_ADULT,
    client_for,
    make_dataset,
    make_release,
    make_user,
    run_now,
    upload,
)
from tests.object_storage import (
    AWS_ENV,
    REGION,
    anonymous_get,
    keys,
    local_files,
    s3_server,
    stored_bytes,
    use_bucket,
)


@pytest.fixture(scope="session")
def s3_endpoint():
    with s3_server() as url:
        yield url


@pytest.fixture
def bucket(s3_endpoint, settings, monkeypatch, tmp_path):
    """A fresh bucket the portal uses; a fresh, empty local storage folder."""
    return use_bucket(s3_endpoint, settings, monkeypatch, tmp_path / "storage")


# ---------------------------------------------------------------- upload -> release -> download


@pytest.fixture
def s3_worker(transactional_db, bucket, request):
    """A real Celery worker started after the bucket is configured, so it reads the bucket."""
    return request.getfixturevalue("celery_worker_process")


def test_upload_release_and_download_run_on_the_bucket(prebuild_packages, bucket, s3_worker):
    owner = make_user()
    content = SMALL_ADULT.read_bytes()
    response = upload(client_for(owner), content=content, filename="adult.csv", name="Adult")
    assert response.status_code == 302, response.content.decode()[:2000]
    dataset = Dataset.objects.get(owner=owner)
    raw, parquet = f"storage/{dataset.storage_name}", f"storage/{dataset.parquet_name}"
    assert keys(bucket) == {raw, parquet}
    assert stored_bytes(bucket, raw) == content
    assert stored_bytes(bucket, parquet).startswith(b"PAR1")
    assert local_files(bucket.storage) == []  # not even a scratch file is left

    # the schema check and the worker read the Parquet copy from the bucket (there is no other)
    dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=DEMO_SCHEMA)
    release = make_release(owner, dataset, params={"rows": 300})
    done = wait_until(
        lambda: Release.objects.filter(pk=release.pk, status__in=Release.TERMINAL).first(),
        timeout=120,
    )
    assert done.status == Release.Status.DONE, done.error_message
    zip_name = f"package-v{packaging.PACKAGE_LAYOUT}.zip"
    zip_key = object_store.key(files.release_cache_dir(done) / zip_name)
    assert zip_key == f"release-cache/{Path(done.output_dir).name}/{zip_name}"
    wait_until(lambda: zip_key in keys(bucket), timeout=60)  # made by the worker after release
    # the worker removes its local copy right after the upload (object_store.keep)
    wait_until(
        lambda: not any(p.suffix == ".zip" for p in local_files(files.release_cache_dir(done))),
        timeout=10,
    )
    published = keys(bucket, f"{done.output_dir}/")
    assert {"synthetic.csv", "noisy_counts.csv"} <= {k.rsplit("/", 1)[1] for k in published}
    assert not files.output_dir(done).exists()  # the published files are only in the bucket
    page = client_for(owner).get(reverse("release_detail", args=[done.pk]))
    assert page.status_code == 200 and "Rows 1–25 of 300" in page.content.decode()
    report_key = object_store.key(files.utility_report_path(done))
    assert report_key.startswith("custodian/") and report_key in keys(bucket)  # before the zip
    report = client_for(owner).get(reverse("release_utility_report", args=[done.pk]))
    assert report.status_code == 200

    downloaded = client_for(owner).get(reverse("release_download_zip", args=[done.pk]))
    assert downloaded.status_code == 200 and downloaded.streaming
    body = downloaded.getvalue()
    assert body == stored_bytes(bucket, zip_key)
    assert downloaded["Content-Length"] == str(len(body))
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        synthetic = archive.read(f"release-{done.pk}/synthetic.csv")
    assert synthetic.count(b"\n") == 301
    single = client_for(owner).get(
        reverse("release_download_file", args=[done.pk, "synthetic.csv"])
    )
    assert single.content == synthetic  # read from the zip object by byte range
    stranger = make_user("stranger")
    assert (
        client_for(stranger).get(reverse("release_download_zip", args=[done.pk])).status_code == 404
    )

    services.dataset_delete(dataset=dataset, user=owner)
    assert keys(bucket, "storage/") == set()  # the dataset's objects went with it
    assert report_key not in keys(bucket)  # derived from the raw data: gone with it
    assert zip_key in keys(bucket)  # the public package stays, as releases do


# ---------------------------------------------------------------- private and encrypted


def test_objects_are_private_and_encrypted(bucket, owner):
    dataset = make_dataset(owner)
    stored = keys(bucket)
    assert stored == {f"storage/{dataset.storage_name}", f"storage/{dataset.parquet_name}"}
    for key in stored:
        assert anonymous_get(bucket, key) == 403
        grants = bucket.client.get_object_acl(Bucket=bucket.name, Key=key)["Grants"]
        assert [g["Grantee"].get("URI") for g in grants] == [None]  # the owner alone
        assert [g["Permission"] for g in grants] == ["FULL_CONTROL"]
        head = bucket.client.head_object(Bucket=bucket.name, Key=key)
        assert head.get("ServerSideEncryption") == "AES256"


def test_the_privacy_checks_see_a_public_or_plain_object(bucket, settings):
    """Twin of the test above: the same checks catch an object anyone may read, and one stored
    without encryption (as the portal does only with DPPORTAL_S3_SSE=0)."""
    bucket.client.put_object(Bucket=bucket.name, Key="public", Body=b"x", ACL="public-read")
    assert anonymous_get(bucket, "public") == 200
    grants = bucket.client.get_object_acl(Bucket=bucket.name, Key="public")["Grants"]
    assert any("AllUsers" in (g["Grantee"].get("URI") or "") for g in grants)
    settings.DPPORTAL_S3_SSE = False
    path = files.stored_path("plain.bin")
    files.write_private(path, b"plain")
    object_store.keep(path)
    head = bucket.client.head_object(Bucket=bucket.name, Key="storage/plain.bin")
    assert head.get("ServerSideEncryption") is None


# ---------------------------------------------------------------- failures leave nothing


@pytest.mark.parametrize(
    "content, limit, status",
    [
        (b"a,b\n1,2,3,4\n\x00\x01binary", None, 400),  # refused by the ingest
        (SMALL_ADULT.read_bytes(), 10_000, 413),  # cut off while streaming: over the limit
    ],
    ids=["refused", "too-large"],
)
def test_a_failed_upload_leaves_no_object_and_no_file(
    bucket, owner, settings, content, limit, status
):
    if limit is not None:
        settings.MAX_UPLOAD_BYTES = limit
    response = upload(client_for(owner), content=content, filename="t.csv")
    assert response.status_code == status
    assert not Dataset.objects.exists()
    assert keys(bucket) == set()
    assert local_files(bucket.storage) == []


def test_objects_already_stored_are_removed_when_registration_fails(bucket, owner):
    """Both objects are up when the dataset row is written; a failure there removes them."""

    def refuse(**_):
        raise RuntimeError("registration refused")

    post_save.connect(refuse, sender=Dataset, dispatch_uid="refuse-dataset", weak=False)
    try:
        with pytest.raises(RuntimeError):
            make_dataset(owner, schema=None)
    finally:
        post_save.disconnect(sender=Dataset, dispatch_uid="refuse-dataset")
    assert not Dataset.objects.exists()
    assert keys(bucket) == set()
    assert local_files(bucket.storage) == []


def test_the_orphan_sweep_removes_unreferenced_objects_only(bucket, owner):
    dataset = make_dataset(owner, schema=None)
    bucket.client.put_object(Bucket=bucket.name, Key="storage/left-by-a-killed-upload", Body=b"x")
    time.sleep(1.1)  # object times have whole seconds
    assert services.dataset_remove_orphan_files(older_than_hours=0) == 1
    assert keys(bucket) == {f"storage/{dataset.storage_name}", f"storage/{dataset.parquet_name}"}


# ---------------------------------------------------------------- counting where the data lives


def test_the_counting_engine_reads_parquet_from_the_bucket(bucket, owner, tmp_path):
    """mechanisms.counting's in-process engine counts an s3:// Parquet object as it counts
    the same file on disk."""
    dataset = make_dataset(owner)
    key = f"storage/{dataset.parquet_name}"
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(stored_bytes(bucket, key))
    schema = mechanisms.Schema.from_dict(DEMO_SCHEMA)
    columns = ["age", "sex"]
    options = {
        "endpoint_url": bucket.url,
        "region": REGION,
        "access_key": AWS_ENV["AWS_ACCESS_KEY_ID"],
        "secret_key": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    }
    counted = count_cells(
        TableSource(f"s3://{bucket.name}/{key}", storage_options=options), schema, columns
    )
    assert counted.sum() == dataset.row_count
    assert (counted == count_cells(TableSource(str(copy)), schema, columns)).all()


# ---------------------------------------------------------------- deployment


def test_the_compose_option_sets_every_object_store_setting_it_documents():
    """docker-compose.object-store.yml gives each portal service the settings the portal reads
    (dpportal/settings.py), each of them described in docs/deployment-object-storage.md."""
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.object-store.yml").read_text())
    base = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    read = set(
        re.findall(
            r'env(?:_bool)?\("(DPPORTAL_S3_\w+)"',
            (REPO_ROOT / "dpportal" / "settings.py").read_text(),
        )
    )
    docs = (REPO_ROOT / "docs" / "deployment-object-storage.md").read_text()
    assert len(read) == 4
    for name in ("web", "worker", "worker-long", "reaper"):
        assert name in base["services"]
        env = compose["services"][name]["environment"]
        assert {v for v in env if v.startswith("DPPORTAL_S3_")} == read
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env)
    for variable in read | {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}:
        assert f"`{variable}`" in docs
    assert "ports" not in compose["services"]["minio"]  # the store stays on the private network


def test_the_reaper_removes_unpublished_release_objects_only(bucket, owner, settings, tmp_path):
    """Files an execution staged in the bucket but never published (it lost its lease, or was
    killed) are swept; a published release's files stay."""
    settings.DATA_DIR = str(tmp_path / "data")  # not the worker's folder other tests leave files in
    release = run_now(make_release(owner, make_dataset(owner)))
    published = keys(bucket, "releases/")
    assert published and all(k.startswith(f"{release.output_dir}/") for k in published)
    staged = f"releases/{release.pk}-0123456789ab/synthetic.csv"
    bucket.client.put_object(Bucket=bucket.name, Key=staged, Body=b"x")
    settings.DPPORTAL_LEASE_SECONDS = 0
    time.sleep(1.1)  # object times have whole seconds
    assert services.release_reap()["files_removed"] == 1
    assert keys(bucket, "releases/") == published
