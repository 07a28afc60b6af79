"""Issue 13, the repeatable hostile run: a table whose name, description, column names and
categories are XSS and formula payloads goes through upload, schema confirmation and one release
of each quick mechanism on the real worker; then every HTML page and every download, as owner
and as auditor, is checked: no 5xx, no live payload in HTML, no formula a spreadsheet would run
in any CSV (mechanisms/csv_safety.py's rule), and no raw value of the table in any log line."""

import csv
import io
import json
import logging
import os
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.models import Dataset, Release
from mechanisms import csv_safety
from tests.conftest import wait_until
from tests.helpers import (
    assert_no_live_html,
    enumerate_routes,
    html_pages,
    make_user,
    object_kwargs,
    post_new_release,
    upload,
)

pytestmark = pytest.mark.slow

CANARY = "CANARY-7Q3"  # in raw cells only: never in a log line, nor on an auditor's page
NUM_A = "<img src=x onerror=alert(1)>"
NUM_B = "=cmd|' /C calc'!A0"
CAT = "<script>alert(1)</script>"
CATEGORIES = ["@SUM(A1)", "<img src=x onerror=alert(2)>", "{{7*7}}", "${7*7}", "+1+1", "-2+3"]
NAME = '<script>alert("name")</script>;=HYPERLINK("https://evil.example")'
DESCRIPTION = "<img src=x onerror=alert(3)>;@SUM(A1);'; DROP TABLE dpportal_dataset;--"


def hostile_csv(rows=300) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([NUM_A, NUM_B, CAT, "note"])
    for i in range(rows):
        category = f"{CANARY}-cat" if i % 50 == 0 else CATEGORIES[i % len(CATEGORIES)]
        writer.writerow([i % 90, (i * 7) % 100, category, f"{CANARY}-{i}"])
    return out.getvalue().encode()


SCHEMA = {
    "columns": [
        {"name": NUM_A, "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
        {"name": NUM_B, "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
        {"name": CAT, "type": "categorical", "categories": CATEGORIES, "unknown": "other"},
        {"name": "note", "type": "ignored"},
    ]
}
RELEASES = [
    {"mechanism": "perturbed_histogram", "columns": [NUM_A, CAT], "epsilon": "0.5", "rows": "200"},
    {
        "mechanism": "mwem",
        "columns": [NUM_A, NUM_B, CAT],
        "epsilon": "0.5",
        "rows": "200",
        "mwem_marginal_size": "2",
        "mwem_rounds": "3",
    },
    {
        "mechanism": "range_count",
        "columns": [NUM_A, NUM_B],
        "epsilon": "0.5",
        "delta": "0.000001",
        "range_workload": "boxes",
        "range_queries": "20",
        "range_grid": "8",
        "range_method": "auto",
    },
]


@pytest.fixture
def hostile_world(celery_worker_process, settings, a_minute_later, caplog):
    caplog.set_level(logging.DEBUG)  # from the upload on: every record of every logger
    owner, auditor = make_user("owner"), make_user("auditor")
    client = Client(raise_request_exception=False)
    client.force_login(owner)
    budget = {"epsilon_total": "5", "delta_total": "0.00001"}
    response = upload(client, hostile_csv(), "h.csv", name=NAME, description=DESCRIPTION, **budget)
    assert response.status_code == 302, response.content.decode()[-2000:]
    dataset = Dataset.objects.get()
    dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=SCHEMA)
    dataset.auditors.add(auditor)
    for fields in RELEASES:
        response = post_new_release(client, dataset.pk, {**fields, "confirm": "on"})  # noisy
        assert response.status_code == 302, (fields["mechanism"], response.context["form"].errors)
    releases = wait_until(_all_done, timeout=240, interval=0.5)
    for release in releases:
        assert release.status == Release.Status.DONE, release.error_message
    return SimpleNamespace(owner=owner, auditor=auditor, dataset=dataset, releases=releases)


def _all_done():
    releases = list(Release.objects.order_by("pk"))
    terminal = len(releases) == len(RELEASES) and all(
        r.status in Release.TERMINAL for r in releases
    )
    return releases if terminal else None


def test_payloads_stay_inert_on_every_page_and_download_and_out_of_logs(hostile_world, caplog):
    world = hostile_world
    objects = SimpleNamespace(dataset=world.dataset, release=world.releases[0])
    checked = {"html": 0, "csv": 0, "other": 0}
    for user in (world.owner, world.auditor):
        client = Client(raise_request_exception=False)
        client.force_login(user)
        for path in html_pages(user, objects, world.releases[1:]):
            page = _get(client, path).content.decode()
            assert_no_live_html(page, path)
            if user is world.auditor:
                assert CANARY not in page, path
            checked["html"] += 1
        for path, name, content in _downloads(client, world):
            kind = _check_download(name, content, path)
            if user is world.auditor:
                assert CANARY.encode() not in content, (path, name)
            checked[kind] += 1
    print(f"checked {checked} (owner and auditor)")
    assert checked["html"] >= 10 and checked["csv"] >= 6
    records = caplog.get_records("setup") + caplog.get_records("call")
    logged = [r.getMessage() for r in records]
    worker_logs = Path(os.environ["DPPORTAL_DATA_DIR"]).glob("worker-*.log")
    logged += [line for log in worker_logs for line in log.read_text(errors="replace").splitlines()]
    assert logged, "no log line was captured"
    assert not [line for line in logged if CANARY in line]


def _get(client, path, **query):
    response = client.get(path, query)
    assert response.status_code < 500, (path, response.status_code)
    return response


def _downloads(client, world):
    """(path, file name, bytes) of every download: the exports, each release's files, its zip
    and the zip's members."""
    found = []
    for name in ("release_list_csv", "audit_log_csv"):
        path = reverse(name)
        found.append((path, name + ".csv", _get(client, path).content))
    path = reverse("dataset_ledger_csv", args=[world.dataset.pk])
    found.append((path, "ledger.csv", _get(client, path).content))
    for release in world.releases:
        objects = SimpleNamespace(dataset=world.dataset, release=release)
        zipped = _get(client, reverse("release_download_zip", args=[release.pk]))
        if zipped.status_code != 200:
            continue
        content = b"".join(zipped.streaming_content) if zipped.streaming else zipped.content
        archive = zipfile.ZipFile(io.BytesIO(content))
        for member in archive.namelist():
            found.append((f"zip:{release.pk}", member, archive.read(member)))
            path = reverse("release_download_file", args=[release.pk, Path(member).name])
            response = _get(client, path)
            if response.status_code == 200:
                body = (
                    b"".join(response.streaming_content) if response.streaming else response.content
                )
                found.append((path, member, body))
        for route, _pattern, kwargs in enumerate_routes():
            if route == "release_utility_report":
                path = reverse(route, kwargs=object_kwargs(route, kwargs, objects))
                found.append((path, "utility-report.html", _get(client, path).content))
    return found


def _check_download(name: str, content: bytes, where: str) -> str:
    if name.endswith(".csv"):
        for row in csv.reader(io.StringIO(content.decode("utf-8-sig"), newline="")):
            for cell in row:
                assert csv_safety.escape_cell(cell) == cell, (where, name, cell)
        return "csv"
    if name.endswith((".html", ".htm")):
        assert_no_live_html(content.decode(), f"{where} {name}")
    elif name.endswith(".json"):
        json.loads(content)
    return "other"
