"""Object storage in a real browser: with the portal on a bucket (moto's S3 server, over HTTP),
a custodian uploads a table through the upload page, makes a histogram release on the
new-release page, a real Celery worker runs it reading the Parquet copy from the bucket, and
the package zip downloaded through the portal is the object in the bucket, byte for byte.

Step screenshots (DPPORTAL_E2E_SCREENSHOTS=steps):
test-artifacts/e2e/test_custodian_works_on_object_storage/.
"""

import re
import time
from pathlib import Path
from urllib.parse import urljoin

import pytest
from django.urls import reverse

from dpportal import services
from dpportal.models import Dataset
from dpportal.releases import packaging
from tests.conftest import wait_until
from tests.helpers import DEMO_SCHEMA, SMALL_ADULT
from tests.object_storage import keys, local_files, s3_server, stored_bytes, use_bucket

pytestmark = pytest.mark.e2e

RELEASE_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def s3_endpoint():
    with s3_server() as url:
        yield url


@pytest.fixture
def s3_worker(custodian, s3_endpoint, settings, monkeypatch, tmp_path, request):
    """A fresh bucket the portal uses, then a real Celery worker started to use it too."""
    bucket = use_bucket(s3_endpoint, settings, monkeypatch, tmp_path / "storage")
    request.getfixturevalue("celery_worker_process")
    return bucket


@pytest.mark.timeout(300)
def test_custodian_works_on_object_storage(prebuild_packages, browser, s3_worker):
    bucket, page = s3_worker, browser.page
    browser.log_in("custodian")
    browser.goto("/datasets/new/")
    page.get_by_label(re.compile(r"^Name:?$")).fill("Adult on object storage")
    page.get_by_label("Table file").set_input_files(str(SMALL_ADULT))
    page.get_by_label("Total privacy budget ε (epsilon)").fill("10")
    browser.click_and_wait(page.get_by_role("button", name=re.compile("upload", re.I)))
    assert page.get_by_text("2,000 rows").first.is_visible()
    browser.screenshot("schema page after an upload into the bucket")
    dataset = Dataset.objects.get(name="Adult on object storage")
    assert keys(bucket) == {f"storage/{dataset.storage_name}", f"storage/{dataset.parquet_name}"}
    assert stored_bytes(bucket, f"storage/{dataset.storage_name}") == SMALL_ADULT.read_bytes()
    assert local_files(bucket.storage) == []
    services.dataset_confirm_schema(dataset=dataset, user=dataset.owner, schema=DEMO_SCHEMA)

    browser.goto(reverse("release_new", args=[dataset.pk]))
    page.get_by_role("radio", name=re.compile(r"Histogram|histogram")).first.check()
    for name in ("age", "sex"):
        page.get_by_role("checkbox", name=re.compile(rf"^\s*{name} \(")).check()
    page.get_by_label("Privacy cost ε for this release").fill("1")
    page.locator("#preview-body").filter(has_text="Budget left after this release").wait_for()
    browser.wait_for_estimate()
    browser.click_and_wait(
        page.get_by_role("button", name="Spend this budget and make the release")
    )
    assert re.search(r"/releases/\d+/$", page.url), page.locator("main").inner_text()
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    status = ""
    while status not in ("Done", "Failed", "Cancelled") and time.monotonic() < deadline:
        page.wait_for_timeout(100)
        if page.locator("#job-status").count():
            status = page.locator("#job-status").inner_text().strip()
    browser.screenshot("release done on object storage")
    assert status == "Done", page.locator("main").inner_text()

    release = dataset.releases.get(mechanism="perturbed_histogram")
    folder = Path(release.output_dir).name
    zip_key = f"release-cache/{folder}/{packaging.package_zip_path(release).name}"
    wait_until(lambda: zip_key in keys(bucket), timeout=60)  # made by the worker
    download = page.request.get(
        urljoin(page.url, reverse("release_download_zip", args=[release.pk]))
    )  # as the logged-in custodian
    assert download.ok, download.status
    assert download.body() == stored_bytes(bucket, zip_key)
    browser.assert_no_problems()
