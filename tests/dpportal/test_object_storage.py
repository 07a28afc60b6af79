"""Object storage: with DPPORTAL_S3_BUCKET set, datasets and package zips live in an
S3-compatible bucket, privately and encrypted, and the portal works end to end on it.

The bucket is on a real S3-compatible HTTP server, moto's standalone server
(tests/object_storage.py), reached over HTTP through the same client code as in production
(dpportal/core/object_store.py); each test gets a fresh bucket.
"""

import http.server
import io
import os
import re
import socket
import threading
import time
import uuid
import zipfile
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from django.db.models.signals import post_save
from django.urls import reverse

import mechanisms
from dpportal import services
from dpportal.core import files, object_store
from dpportal.models import Dataset, Release
from dpportal.releases import packaging
from dpportal.sources import reach, tables
from dpportal.sources.reach import FAILURE, FAILURE_SECONDS
from dpportal.sources.tables import seal
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
    bucket_with,
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


def worker_failures() -> str:
    """What the test workers logged as failed (type and stack), to say why a step is missing."""
    logs = sorted(Path(os.environ["DPPORTAL_DATA_DIR"]).glob("worker-*.log"))
    lines = [line for log in logs for line in log.read_text(errors="replace").splitlines()]
    return "\n".join(line for line in lines if "failed" in line or line.startswith("  File"))


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
    zip_name = packaging.package_zip_name(done)  # the layout and publishing key; not built here
    zip_key = object_store.key(files.release_cache_dir(done) / zip_name)
    assert zip_key == f"release-cache/{Path(done.output_dir).name}/{zip_name}"
    # made by the worker after the release and after the custodian's report
    wait_until(lambda: zip_key in keys(bucket), timeout=60)
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
    # made before the zip, which is there
    assert report_key.startswith("custodian/") and report_key in keys(bucket), worker_failures()
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


def test_a_package_zip_built_twice_at_once_is_stored_once_without_error(
    bucket, owner, monkeypatch, settings, tmp_path
):
    """A worker's prebuild and a download may build a release's zip at the same moment.
    Here the second build runs whole (written, uploaded, its local file removed) while the
    first is about to upload. Each uploads its own file: no FileNotFoundError (before, both
    committed to one local path, and the first to upload removed the file the other was
    uploading: a failed download, and the test flow's failure in CI), and one object holds
    the zip."""
    settings.DATA_DIR = str(tmp_path / "data")
    release = run_now(make_release(owner, make_dataset(owner)))
    real_upload, builds = object_store._upload, []

    def upload_after_another_build(path, object_key):
        if not builds:
            builds.append("the other build")
            builds.append(packaging.package_zip_path(release))  # the other process, whole
        real_upload(path, object_key)

    monkeypatch.setattr(object_store, "_upload", upload_after_another_build)
    path = packaging.package_zip_path(release)
    assert builds == ["the other build", path]
    zip_key = object_store.key(path)
    assert zip_key in keys(bucket) and not path.exists()
    with zipfile.ZipFile(io.BytesIO(stored_bytes(bucket, zip_key))) as archive:
        assert archive.testzip() is None and archive.namelist()
    assert not list(path.parent.glob(".*.tmp"))  # no temporary file left behind


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


# ---------------------------------------------------------------- sources custodians register

AMBIENT_KEY = "AKIAAMBIENTCANARY41"  # the portal's keys, as the AWS SDKs would find them


class RecordingStore(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that refuses everything and records each request's Authorization."""

    authorizations: list[str] = []

    def _refuse(self):
        RecordingStore.authorizations.append(self.headers.get("Authorization", ""))
        body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = _refuse

    def log_message(self, *args):
        pass


@pytest.fixture
def recording_store(settings):
    """The recording endpoint's URL, allowed by the operator."""
    RecordingStore.authorizations = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RecordingStore)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    settings.DPPORTAL_SOURCE_HOSTS = [f"{host}:{port}"]
    yield f"http://{host}:{port}"
    server.shutdown()
    server.server_close()


def test_a_source_without_keys_is_never_read_with_the_portals_keys(
    recording_store, owner, monkeypatch
):
    """Item 7: with the portal's keys in the environment, a source given without keys is read
    anonymously, at registration and by the counting engine (before: signed with the portal's
    key, so the portal's store answered with another custodian's private file)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AMBIENT_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ambient-secret-41")
    options = {"endpoint_url": recording_store}
    with pytest.raises(services.ServiceError) as refused:
        services.dataset_register_source(
            owner=owner,
            name="Someone else's",
            location="s3://someone-else/people.parquet",
            epsilon_total=1,
            storage_options=options,
        )
    source = TableSource("s3://someone-else/people.parquet", storage_options=options)
    with pytest.raises(mechanisms.MechanismError):
        count_cells(source, mechanisms.Schema.from_dict(DEMO_SCHEMA), ["age"])
    assert RecordingStore.authorizations, "the store was never asked"
    assert not any(AMBIENT_KEY in sent for sent in RecordingStore.authorizations)
    assert "Cannot read this source" in str(refused.value)
    assert "someone-else" not in str(refused.value)  # no object named, nothing the store said
    assert not Dataset.objects.filter(name="Someone else's").exists()


def test_the_portals_own_bucket_and_endpoint_are_refused(bucket, owner, settings):
    """Item 7: another custodian's Parquet copy in the portal's bucket, by its name or another
    spelling of the endpoint, with no keys or the portal's own; any bucket on that endpoint."""
    dataset = make_dataset(owner)
    stored = f"storage/{dataset.parquet_name}"
    port = bucket.url.rsplit(":", 1)[1]
    settings.DPPORTAL_SOURCE_HOSTS = [f"127.0.0.1:{port}", f"localhost:{port}"]
    bucket.client.create_bucket(Bucket="beside-the-portals")
    bucket.client.put_object(Bucket="beside-the-portals", Key="t.parquet", Body=b"PAR1")
    portal_keys = {"access_key": "portal-test", "secret_key": "portal-test-secret"}
    intruder = make_user("intruder")
    for location, options in [
        (f"s3://{bucket.name}/{stored}", {"endpoint_url": bucket.url}),
        (f"s3://{bucket.name}/storage/", {"endpoint_url": f"http://localhost:{port}"}),
        (f"s3://{bucket.name}/{stored}", {"endpoint_url": bucket.url} | portal_keys),
        ("s3://beside-the-portals/t.parquet", {"endpoint_url": f"http://LOCALHOST:{port}/"}),
    ]:
        with pytest.raises(services.ServiceError) as refused:
            services.dataset_register_source(
                owner=intruder,
                name="Theirs",
                location=location,
                epsilon_total=1,
                storage_options=options,
            )
        assert "where the portal keeps its own files" in str(refused.value), location
        assert dataset.parquet_name not in str(refused.value)
    assert not Dataset.objects.filter(owner=intruder).exists()


def test_refusals_never_name_an_object_or_repeat_the_stores_words(s3_endpoint, owner, settings):
    """Item 7: a folder holding a file that is not Parquet, and a path that does not exist:
    the messages name no object and repeat nothing the store or pyarrow said."""
    settings.DPPORTAL_S3_BUCKET = ""  # the store here is not the portal's
    settings.DPPORTAL_SOURCE_HOSTS = [s3_endpoint.removeprefix("http://")]
    keys = {"aws_access_key_id": "custodian", "aws_secret_access_key": "custodian-secret"}
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name=REGION, **keys)
    name = f"custodian-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    table = io.BytesIO()
    pq.write_table(pa.table({"age": [30, 40]}), table)
    client.put_object(Bucket=name, Key="people/0.parquet", Body=table.getvalue())
    client.put_object(Bucket=name, Key="people/Canary-object-name-41.csv", Body=b"age\n50\n")
    options = {"endpoint_url": s3_endpoint, "access_key": "custodian", "secret_key": "x"}
    for location in (f"s3://{name}/people/", f"s3://{name}/absent/Canary-absent-41.parquet"):
        with pytest.raises(services.ServiceError) as refused:
            services.dataset_register_source(
                owner=owner,
                name="Mine",
                location=location,
                epsilon_total=1,
                storage_options=options,
            )
        said = str(refused.value)
        for echo in ("Canary-object-name-41", "Parquet file size", "AWS Error", "Path does not"):
            assert echo not in said, said


# ---------------------------------------------------------------- the store when a release starts

PEOPLE_SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"], "unknown": "other"},
    ]
}


def queued_on_the_store(s3_endpoint, settings, tmp_path):
    """A Parquet folder in a fresh bucket of the test store, registered by a new custodian with
    keys of its own, and a histogram queued on it at ε 0.5 (debited): (dataset, release, how to
    reach the bucket)."""
    settings.DPPORTAL_S3_BUCKET = settings.DPPORTAL_S3_ENDPOINT_URL = ""  # not the portal's store
    settings.DPPORTAL_SOURCE_HOSTS = [s3_endpoint.removeprefix("http://")]
    part = tmp_path / "0.parquet"
    pq.write_table(
        pa.table({"age": [20 + i % 60 for i in range(60)], "sex": ["F", "M"] * 30}), part
    )
    name = f"custodian-{uuid.uuid4().hex[:12]}"
    options = bucket_with(s3_endpoint, name, {"people/0.parquet": part})
    owner = make_user("custodian")
    dataset = services.dataset_register_source(
        owner=owner,
        name="People",
        location=f"s3://{name}/people/",
        epsilon_total=1,
        storage_options=options,
        engine="inprocess",
    )
    dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=PEOPLE_SCHEMA)
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age", "sex"],
        params={"rows": 60},
        epsilon="0.5",
    )
    assert Dataset.objects.get(pk=dataset.pk).epsilon_spent == Decimal("0.5")
    bucket = SimpleNamespace(name=name, options=options, client=boto3_client(options))
    return dataset, release, bucket


def boto3_client(options):
    return boto3.client(
        "s3",
        endpoint_url=options["endpoint_url"],
        region_name=REGION,
        aws_access_key_id=options["access_key"],
        aws_secret_access_key=options["secret_key"],
    )


def empty_the_bucket(bucket):
    bucket.client.delete_object(Bucket=bucket.name, Key="people/0.parquet")


def closed_port_endpoint():
    """An endpoint nothing answers at (a store moved or down)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{closed.getsockname()[1]}"


def move_the_source(dataset, bucket, endpoint, settings):
    """The source now read at `endpoint` (allowed by the operator), with the same keys."""
    settings.DPPORTAL_SOURCE_HOSTS = [*settings.DPPORTAL_SOURCE_HOSTS, endpoint[7:]]
    options = bucket.options | {"endpoint_url": endpoint}
    source = TableSource(f"s3://{bucket.name}/people", storage_options=options)
    Dataset.objects.filter(pk=dataset.pk).update(source_secret=seal(source))


def run_on_the_store(dataset, release):
    """Run `release` here, as the worker does; the release, the budget spent after, seconds."""
    started = time.monotonic()
    services.release_run(release_id=release.pk)
    release.refresh_from_db()
    return release, Dataset.objects.get(pk=dataset.pk).epsilon_spent, time.monotonic() - started


@pytest.mark.django_db
@pytest.mark.parametrize("breaks", ["emptied", "down", "keys refused"])
def test_a_release_on_a_store_that_cannot_be_read_fails_refunded(
    s3_endpoint, settings, tmp_path, request, monkeypatch, breaks
):
    """Issue 45: a release on an object-storage source whose objects are gone, whose store is
    down or which refuses the source's keys used to be marked read first and keep its ε. The
    worker now lists the source's Parquet files with the source's own keys (their names, never
    a row) before that mark: the release fails in the words every unreadable source gets, after
    at least FAILURE_SECONDS, nothing read, and the ledger is back where it was."""
    dataset, release, bucket = queued_on_the_store(s3_endpoint, settings, tmp_path)
    delay = FAILURE_SECONDS if breaks == "emptied" else 0.0  # the wait: once is enough
    monkeypatch.setattr(reach, "FAILURE_SECONDS", delay)
    if breaks == "emptied":
        empty_the_bucket(bucket)
    elif breaks == "down":
        move_the_source(dataset, bucket, closed_port_endpoint(), settings)
    else:  # a store that answers every request with 403 AccessDenied
        move_the_source(dataset, bucket, request.getfixturevalue("recording_store"), settings)
    done, spent, seconds = run_on_the_store(dataset, release)
    assert done.status == Release.Status.FAILED and not done.data_was_read
    assert spent == 0 and sum_of_ledger(dataset) == 0
    assert "could not be reached" in done.error_message and FAILURE in done.error_message
    assert "budget was returned" in done.error_message
    assert bucket.name not in done.error_message and "AWS" not in done.error_message
    assert seconds >= delay


def sum_of_ledger(dataset):
    signs = {"debit": 1, "reserve": 1, "refund": -1, "return": -1}
    return sum(signs[e.kind] * e.epsilon for e in dataset.ledger.all())


@pytest.mark.django_db
def test_without_the_listing_an_emptied_bucket_keeps_the_epsilon(
    s3_endpoint, settings, tmp_path, monkeypatch
):
    """Twin of the test above: with the worker's listing of the store made a no-op (as before
    the fix), the same release is marked read, fails in the engine and keeps its ε, which the
    checks above catch."""
    monkeypatch.setattr(tables, "_list_parquet_files", lambda *_: None)
    dataset, release, bucket = queued_on_the_store(s3_endpoint, settings, tmp_path)
    empty_the_bucket(bucket)
    done, spent, _seconds = run_on_the_store(dataset, release)
    assert done.status == Release.Status.FAILED and done.data_was_read
    assert spent == Decimal("0.5") == sum_of_ledger(dataset)


@pytest.mark.django_db
def test_a_release_on_a_readable_store_runs_and_spends(s3_endpoint, settings, tmp_path):
    """The listing lets a readable source through: the release runs and keeps its ε."""
    dataset, release, _bucket = queued_on_the_store(s3_endpoint, settings, tmp_path)
    done, spent, _seconds = run_on_the_store(dataset, release)
    assert done.status == Release.Status.DONE, done.error_message
    assert spent == Decimal("0.5") == sum_of_ledger(dataset)
