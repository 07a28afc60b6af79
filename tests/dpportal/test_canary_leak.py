"""T9: a unique value and a unique category placed in an uploaded file appear in no public
artifact: release packages (folders and zip downloads; the text of report.pdf and the cells of
release.xlsx, read back), manifests and traces, pages and CSVs seen by an auditor, each
release's public page and its files as anyone sees them, the dataset's public record (its zip,
record.json and record.sig: dpportal/records), the audit log, the task messages and every key in
Redis, and the worker log.

Only the custodian's private storage (the raw file and its Parquet copy) may hold them.
"""

import gzip
import json
import re

import pandas as pd
import pytest
import redis
from django.conf import settings
from django.db import connection
from django.template.defaultfilters import filesizeformat
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.models import AuditEvent, Release
from dpportal.records.switch import record_set_public
from dpportal.releases import packaging
from mechanisms.package import PackageContext, build_package
from tests.conftest import REPO_ROOT, wait_until
from tests.dpportal.worker_app import start_worker
from tests.helpers import DEMO_SCHEMA, make_user
from tests.package_text import readable_text

CANARY_VALUE = b"987654321"
CANARY_CATEGORY = b"Qzxv-canary-category"
RELEASES = [
    ("perturbed_histogram", ["age", "workclass"], {}),
    ("smoothed_histogram", ["age", "workclass"], {"rows": 300}),
    ("mwem", ["age", "workclass", "sex"], {"rounds": 3}),
    ("range_count", ["age"], {"grid": [16], "prefixes": True}),
]


RECORD_ROUTES = ("public_record_zip", "public_record_json", "public_record_sig")


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
    dataset = services.dataset_create_from_path(
        owner=owner, name="Canary", source_path=path, epsilon_total=10
    )
    dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=DEMO_SCHEMA)
    dataset.auditors.add(auditor)
    return owner, auditor, dataset


def body(response) -> bytes:
    """What a reader sees in a response: a zip's members uncompressed, a PDF's text and a
    workbook's cells read back (compression would hide text from a byte search)."""
    data = b"".join(response.streaming_content) if response.streaming else response.content
    name = response.get("Content-Disposition", "").rstrip('"')
    return readable_text(name, data).encode()


def package_text(release) -> bytes:
    """Every file of a release's package as a reader sees it (see body())."""
    return "".join(
        readable_text(n, c) for n, c in packaging.package_files(release).items()
    ).encode()


def test_the_scan_reads_the_pdf_and_workbook_where_a_byte_search_cannot():
    """Twin: a canary in a package's public context (the dataset name) is found by the scan in
    report.pdf's text and release.xlsx's cells, though not in their raw bytes."""
    files = {"counts.csv": b"sex,noisy_count\nFemale,12\n"}
    manifest = {"mechanism": "perturbed_histogram", "guarantee": {"epsilon": 1}}
    context = PackageContext(dataset=CANARY_CATEGORY.decode())
    package = build_package(files, manifest, context)
    for name in ("report.pdf", "release.xlsx"):
        assert hits(package[name]) == 0  # compressed: a byte search misses it
        assert hits(readable_text(name, package[name]).encode()) > 0, name


def redis_dump(url) -> bytes:
    client = redis.Redis.from_url(url)
    readers = {
        b"string": client.get,
        b"list": lambda k: client.lrange(k, 0, -1),
        b"hash": client.hgetall,
        b"set": client.smembers,
        b"zset": lambda k: client.zrange(k, 0, -1),
    }
    parts = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        parts.append(key + repr(readers[kind](key)).encode() if kind in readers else key)
    return b"\n".join(parts)


@pytest.mark.django_db(transaction=True)
def test_the_canary_appears_in_no_public_artifact(canary_dataset, a_minute_later):
    owner, auditor, dataset = canary_dataset
    with start_worker(connection) as (_, worker_log):
        releases = [
            services.release_create(
                dataset=dataset,
                user=owner,
                mechanism=name,
                columns=columns,
                params=params,
                epsilon="0.5",
            )
            for name, columns, params in RELEASES
        ]
        during_run = redis_dump(settings.CELERY_BROKER_URL)
        releases = [
            wait_until(
                lambda r=r: Release.objects.filter(pk=r.pk, status__in=Release.TERMINAL).first(),
                timeout=180,
            )
            for r in releases
        ]
    assert {r.mechanism: r.status for r in releases} == {n: "done" for n, _, _ in RELEASES}, {
        r.mechanism: r.error_message for r in releases
    }
    for release in releases:
        services.release_set_public(release=release, user=owner, public=True)
    record_set_public(dataset=dataset, user=owner, public=True)
    client, anyone = Client(), Client()
    client.force_login(auditor)
    pages = [
        reverse("release_list"),
        reverse("release_list_csv"),
        reverse("audit_log"),
        reverse("audit_log_csv"),
        reverse("dataset_ledger", args=[dataset.pk]),
        reverse("dataset_ledger_csv", args=[dataset.pk]),
    ]
    for release in releases:
        pages += [
            reverse("release_detail", args=[release.pk]),
            reverse("release_progress", args=[release.pk]),
            reverse("release_download_zip", args=[release.pk]),
        ]
    public = [reverse("public_report_css"), reverse("public_record_key")]
    public += [reverse(n, args=[dataset.pk]) for n in RECORD_ROUTES]
    for release in releases:
        public += [reverse("public_release", args=[release.pk])]
        public += [
            reverse("public_release_file", args=[release.pk, name])
            for name in packaging.package_names(release)
        ]
    responses = [client.get(url) for url in pages]
    seen_by_anyone = [anyone.get(url) for url in public]
    assert [r.status_code for r in responses] == [200] * len(pages)  # real pages, not 404s
    assert [r.status_code for r in seen_by_anyone] == [200] * len(public)
    found = {
        "release packages": sum(hits(package_text(r)) for r in releases),
        "public pages and files": sum(hits(body(response)) for response in seen_by_anyone),
        "manifests, traces, messages": sum(
            hits(json.dumps([r.manifest, r.trace, r.error_message, r.progress_stage]).encode())
            for r in releases
        ),
        "auditor pages and downloads": sum(hits(body(response)) for response in responses),
        "audit log": hits(
            json.dumps(list(AuditEvent.objects.values_list("details", flat=True))).encode()
        ),
        "Redis while running": hits(during_run),
        "Redis afterwards": hits(redis_dump(settings.CELERY_BROKER_URL)),
        "worker log": hits(worker_log.read_bytes()),
    }
    private = hits((settings.DATASET_STORAGE_DIR / dataset.storage_name).read_bytes())
    print(
        f"\nT9 canary hits ({len(releases)} releases, {len(pages)} auditor pages, "
        f"{len(public)} public pages and files): {found}; "
        f"in the custodian's private raw file (expected): {private}"
    )
    assert private > 0  # the scan can see the canary where it really is
    assert all(count == 0 for count in found.values())


# ---------------------------------------------------------------- raw-data aggregates (item 8b)
# The true row count n, the uploaded file's size in bytes, its SHA-256 and its name are facts
# about the raw file. Owner: all of them. Auditor: n only under replace-one (public there by
# definition), never the rest. Anyone else: nothing. n = 1,237 cannot appear by chance.

N_ROWS = 1237
RAW_NAME = "aggregate-canary-q7z.csv"
ROLES = ("owner", "auditor", "stranger", "anonymous")


def number_pattern(value: int) -> re.Pattern:
    """`value` as people and programs write it: 1237, 1,237, 1.237, 1 237 (any space), 1'237,
    1237.0, 1.2k / 1.24k; not inside a longer number, a decimal or a word (hex, tokens)."""
    digits = str(value)
    grouped = digits if len(digits) <= 3 else (f"{digits[:-3]}[,. '\u00a0\u202f]?{digits[-3:]}")
    short = rf"{digits[0]}[.,]{digits[1]}\d?\s?[kK]\b" if len(digits) == 4 else r"(?!)"
    return re.compile(rf"(?<![\w.,])(?:{grouped}(?![\d]|[.,]\d{{1,2}}\b(?<!\.0))|{short})")


def raw_fact_patterns(dataset) -> dict[str, re.Pattern]:
    sha = dataset.sha256
    amount, unit = filesizeformat(dataset.size_bytes).replace("\xa0", " ").split(" ")
    return {
        "row_count": number_pattern(dataset.row_count),
        "size_bytes": re.compile(
            rf"{number_pattern(dataset.size_bytes).pattern}"
            rf"|{re.escape(amount)}\s?{unit}"
        ),
        "sha256": re.compile(rf"{sha[:12]}|{sha[-12:]}", re.IGNORECASE),
        "original_filename": re.compile(re.escape(RAW_NAME.removesuffix(".csv"))),
    }


def test_the_number_pattern_finds_every_rendering_and_nothing_else():
    pattern = number_pattern(1237)
    for text in (
        "n=1237",
        "1,237 rows",
        "1.237",
        "1 237",
        "1\u202f237",
        "1'237",
        "1237.0",
        "(1.2k)",
        "1.24 k",
        '"rows": 1237}',
    ):
        assert pattern.search(text), text
    for text in ("12370", "0.1237", "a1237f", "11,237", "1237.5", "1.23", "3.1237", "21.2k"):
        assert not pattern.search(text), text


def allowed_facts(role, neighbouring) -> set[str]:
    if role == "owner":
        return {"row_count", "size_bytes", "sha256", "original_filename"}
    return {"row_count"} if role == "auditor" and neighbouring == "replace-one" else set()


@pytest.fixture
def aggregate_world(tmp_path, monkeypatch, settings, request):
    """A 1,237-row dataset (with the neighbouring of the test's parameter) owned by `owner` and
    audited by `auditor`, with one finished release run in this process."""
    settings.DPPORTAL_HEARTBEAT_SECONDS = 0
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    with gzip.open(REPO_ROOT / "demo" / "adult.csv.gz", "rt") as handle:
        frame = pd.read_csv(handle, nrows=N_ROWS, dtype=str, keep_default_na=False)
    path = tmp_path / RAW_NAME
    frame.to_csv(path, index=False)
    owner, auditor, stranger = make_user("owner"), make_user("auditor"), make_user("stranger")
    dataset = services.dataset_create_from_path(
        owner=owner, name="Survey", source_path=path, epsilon_total=10, neighbouring=request.param
    )
    dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=DEMO_SCHEMA)
    services.dataset_set_auditor(dataset=dataset, user=owner, username="auditor", add=True)
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age", "workclass"],
        params={"rows": 500},
        epsilon="0.5",
    )
    services.release_run(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == "done", release.error_message
    release = services.release_set_public(release=release, user=owner, public=True)
    record_set_public(dataset=dataset, user=owner, public=True)
    assert dataset.row_count == N_ROWS
    clients = {}
    for role, user in (("owner", owner), ("auditor", auditor), ("stranger", stranger)):
        clients[role] = Client()
        clients[role].force_login(user)
    clients["anonymous"] = Client()
    return dataset, release, clients


def reachable_urls(dataset, release) -> dict[str, str]:
    urls = {
        "home": reverse("home"),
        "release list": reverse("release_list"),
        "releases CSV": reverse("release_list_csv"),
        "audit log": reverse("audit_log"),
        "audit CSV": reverse("audit_log_csv"),
        "dataset page": reverse("dataset_detail", args=[dataset.pk]),
        "ledger": reverse("dataset_ledger", args=[dataset.pk]),
        "ledger CSV": reverse("dataset_ledger_csv", args=[dataset.pk]),
        "release page": reverse("release_detail", args=[release.pk]),
        "release progress": reverse("release_progress", args=[release.pk]),
        "package zip": reverse("release_download_zip", args=[release.pk]),
        "utility report": reverse("release_utility_report", args=[release.pk]),
    }
    for name in packaging.package_names(release):
        urls[f"file {name}"] = reverse("release_download_file", args=[release.pk, name])
        urls[f"public {name}"] = reverse("public_release_file", args=[release.pk, name])
    urls["public page"] = reverse("public_release", args=[release.pk])
    for name in RECORD_ROUTES:
        urls[name.replace("_", " ")] = reverse(name, args=[dataset.pk])
    return urls


OBJECT_PAGES = (
    "dataset page",
    "ledger",
    "ledger CSV",
    "release page",
    "release progress",
    "package zip",
    "utility report",
)


def scan(clients, dataset, release) -> dict:
    """{role: {page: (status, facts found)}} over every page and download of the release."""
    patterns = raw_fact_patterns(dataset)
    seen = {}
    for role in ROLES:
        seen[role] = {}
        for label, url in reachable_urls(dataset, release).items():
            response = clients[role].get(url)
            text = body(response).decode("utf-8", "replace")
            seen[role][label] = (
                response.status_code,
                {fact for fact, p in patterns.items() if p.search(text)},
            )
    return seen


def check_roles(seen, neighbouring):
    leaks = {
        role: {
            label: facts - allowed_facts(role, neighbouring)
            for label, (_, facts) in pages.items()
            if facts - allowed_facts(role, neighbouring)
        }
        for role, pages in seen.items()
    }
    assert leaks == dict.fromkeys(ROLES, {})
    owner_page = seen["owner"]["dataset page"]
    assert owner_page == (200, allowed_facts("owner", neighbouring))  # twin: the scan sees them
    assert seen["auditor"]["dataset page"] == (200, allowed_facts("auditor", neighbouring))
    assert seen["auditor"]["utility report"][0] == 404
    for role in ("stranger", "anonymous"):
        refused = {seen[role][label][0] for label in OBJECT_PAGES}
        assert refused <= {302, 403, 404}, (role, refused)


@pytest.mark.parametrize("aggregate_world", ["add-remove", "replace-one"], indirect=True)
@pytest.mark.django_db
def test_raw_aggregates_reach_only_the_roles_allowed_to_see_them(aggregate_world, a_minute_later):
    dataset, release, clients = aggregate_world
    before = scan(clients, dataset, release)
    assert before["anonymous"]["public record zip"][0] == 200  # the record is scanned, served
    owner = dataset.owner
    services.dataset_delete(dataset=dataset, user=owner)
    dataset.refresh_from_db()
    after = scan(clients, dataset, release)
    summary = {
        when: {
            role: sorted(set().union(*(f for _, f in pages.values())))
            for role, pages in seen.items()
        }
        for when, seen in (("before deletion", before), ("after deletion", after))
    }
    print(
        f"\nRaw aggregates ({dataset.neighbouring}; n = {N_ROWS:,}, "
        f"{len(reachable_urls(dataset, release))} pages per role): {summary}"
    )
    check_roles(before, dataset.neighbouring)
    check_roles(after, dataset.neighbouring)
