"""Downloads: permission checks, attachments, audit events, the zip's contents, and CSV cells
escaped against spreadsheet formula injection."""

import csv
import io
import json
import zipfile

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from dpportal.models import AuditEvent
from mechanisms import csv_safety
from tests.helpers import client_for, make_dataset, make_release, run_now

TRIGGERS = ("=", "+", "-", "@", "\t", "\r", "\0")
NASTY_CATEGORIES = [
    '=HYPERLINK("http://x.example","y")',
    "+cmd",
    "-2+3",
    "@SUM(A1)",
    "\tTabbed",
    "plain, with a comma",
    'say "hi"',
    "-",
]


@pytest.mark.parametrize(
    "cell, expected",
    [
        ("=1+2", "'=1+2"),
        ("+cmd", "'+cmd"),
        ("-x", "'-x"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tfoo", "'\tfoo"),
        ("\rfoo", "'\rfoo"),
        ("\0foo", "'\0foo"),
        ("-", "'-"),
        ("-inf", "'-inf"),
        ("-1e5x", "'-1e5x"),
        ("-3.5", "-3.5"),
        ("+7", "+7"),
        ("-1e-05", "-1e-05"),
        ("-.5", "-.5"),
        ("42", "42"),
        ("plain", "plain"),
        ("", ""),
        ("a=b", "a=b"),
    ],
)
def test_escape_cell(cell, expected):
    assert csv_safety.escape_cell(cell) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.text(alphabet=st.characters(codec="utf-8"), max_size=8), min_size=1, max_size=4
        ),
        min_size=1,
        max_size=5,
    )
)
def test_safe_csv_round_trips_through_csv_reader(rows):
    source = io.StringIO()
    csv.writer(source).writerows(rows)
    escaped = csv_safety.safe_csv(source.getvalue().encode())
    parsed = list(csv.reader(io.StringIO(escaped.decode(), newline="")))
    expected = [[csv_safety.escape_cell(cell) for cell in row] for row in rows]
    assert parsed == expected
    for row in parsed:
        for cell in row:
            assert not cell.startswith(TRIGGERS) or csv_safety.PURE_NUMBER.fullmatch(cell)


def release_with_categories(owner, folder, categories):
    """A finished release of a table whose public categories are `categories`."""
    lines = ["city,delta"] + [
        f'"{categories[i % len(categories)].replace(chr(34), chr(34) * 2)}",{(i % 21) - 10}'
        for i in range(400)
    ]
    path = folder / "nasty.csv"
    path.write_text("\n".join(lines) + "\n")
    schema = {
        "columns": [
            {"name": "city", "type": "categorical", "categories": categories},
            {"name": "delta", "type": "numeric", "lower": -10, "upper": 10, "bins": 4},
        ]
    }
    dataset = make_dataset(owner, schema=schema, path=path)
    return run_now(make_release(owner, dataset, columns=["city", "delta"], params={"rows": 300}))


@pytest.fixture
def nasty_release(owner, tmp_path):
    return release_with_categories(owner, tmp_path, NASTY_CATEGORIES)


def test_a_category_starting_with_a_carriage_return_survives(owner, tmp_path):
    release = release_with_categories(owner, tmp_path, ["\rReturn", "plain"])
    content = (
        client_for(owner)
        .get(reverse("release_download_file", args=[release.pk, "noisy_counts.csv"]))
        .content.decode()
    )
    rows = list(csv.reader(io.StringIO(content, newline="")))
    assert "'\rReturn" in [row[0] for row in rows] and all(len(r) == len(rows[0]) for r in rows)


def test_downloaded_csvs_are_escaped_quoted_and_parse_back(owner, nasty_release):
    client = client_for(owner)
    for name in ("synthetic.csv", "noisy_counts.csv"):
        response = client.get(reverse("release_download_file", args=[nasty_release.pk, name]))
        assert response.status_code == 200
        rows = list(csv.reader(io.StringIO(response.content.decode(), newline="")))
        cells = [cell for row in rows[1:] for cell in row]
        if name == "noisy_counts.csv":  # lists every cell's label, whatever the data
            assert '\'=HYPERLINK("http://x.example","y")' in cells
            assert {"'+cmd", "'-2+3", "'@SUM(A1)", "'\tTabbed", "'-"} <= set(cells)
            assert "plain, with a comma" in cells and 'say "hi"' in cells
        assert "'+cmd" in cells
        for cell in cells:
            assert not cell.startswith(TRIGGERS) or csv_safety.PURE_NUMBER.fullmatch(cell)
    synthetic = client.get(
        reverse("release_download_file", args=[nasty_release.pk, "synthetic.csv"])
    ).content.decode()
    negative = [row[1] for row in csv.reader(io.StringIO(synthetic)) if row[1].startswith("-")]
    assert negative and all(float(value) < 0 for value in negative)  # numbers stay numbers


@pytest.fixture
def done_release(owner, dataset):
    return run_now(make_release(owner, dataset, params={"rows": 50}))


def test_the_zip_holds_the_public_package_and_nothing_custodian_only(owner, done_release):
    response = client_for(owner).get(reverse("release_download_zip", args=[done_release.pk]))
    assert response.status_code == 200
    assert response["Content-Disposition"] == (
        f'attachment; filename="release-{done_release.pk}.zip"'
    )
    assert response["X-Content-Type-Options"] == "nosniff"
    archive = zipfile.ZipFile(io.BytesIO(response.getvalue()))
    folder = f"release-{done_release.pk}/"
    names = {name.removeprefix(folder) for name in archive.namelist()}
    assert names == {
        "synthetic.csv",
        "noisy_counts.csv",
        "manifest.json",
        "README.txt",
        "report.html",
        "report.pdf",
        "release.xlsx",
    }
    methods = {info.filename.removeprefix(folder): info.compress_type for info in archive.filelist}
    assert methods.pop("release.xlsx") == zipfile.ZIP_STORED  # a zip already (package.write_zip)
    assert set(methods.values()) == {zipfile.ZIP_DEFLATED}
    manifest = json.loads(archive.read(folder + "manifest.json"))
    assert manifest["mechanism"] == "perturbed_histogram" and "input_sha256" not in manifest
    everything = b"".join(archive.read(name) for name in archive.namelist())
    assert done_release.dataset.sha256.encode() not in everything
    assert b"tvd" not in everything.lower() and b"original" not in everything.lower()
    readme = archive.read(folder + "README.txt").decode()
    flat = " ".join(readme.split())
    assert "epsilon = 0.5" in flat and "if any one row had been replaced by another." in flat
    assert '"Noisy histogram"' in flat and "Where a noisy count is negative" in flat
    assert max(len(line) for line in readme.splitlines()) <= 78


def test_downloads_are_permission_checked_and_audited(
    owner, auditor, stranger, done_release, a_minute_later
):
    file_url = reverse("release_download_file", args=[done_release.pk, "synthetic.csv"])
    zip_url = reverse("release_download_zip", args=[done_release.pk])
    report_url = reverse("release_utility_report", args=[done_release.pk])
    for url in (file_url, zip_url, report_url):
        assert client_for(stranger).get(url).status_code == 404
        assert Client().get(url).status_code == 302  # to the login page
    assert client_for(auditor).get(file_url).status_code == 200
    assert client_for(auditor).get(zip_url).status_code == 200
    assert client_for(auditor).get(report_url).status_code == 404  # custodian-only
    report = client_for(owner).get(report_url)
    assert report.status_code == 200
    assert report["Content-Disposition"].startswith("attachment;")
    assert "Custodian-only: not part of the release" in report.content.decode()
    downloads = AuditEvent.objects.filter(action=AuditEvent.Action.DOWNLOAD, release=done_release)
    assert sorted((e.actor_name, e.details["file"]) for e in downloads) == [
        ("auditor", "package.zip"),
        ("auditor", "synthetic.csv"),
        ("owner", "utility-report.html"),
    ]


def test_unknown_files_and_unfinished_releases_have_no_downloads(owner, dataset, done_release):
    client = client_for(owner)
    for name in ("../manifest.json", "utility.json", "nope.csv"):
        response = client.get(f"/releases/{done_release.pk}/download/{name}")
        assert response.status_code == 404
    queued = make_release(owner, dataset)
    assert client.get(reverse("release_download_zip", args=[queued.pk])).status_code == 404
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.DOWNLOAD).exists()
