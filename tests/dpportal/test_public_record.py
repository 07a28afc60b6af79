"""A dataset's public record on the portal (issue 46 item 3).

Off by default (404 to everyone); only the owner switches it, each switch audit-logged; while on,
anyone downloads the zip (or record.json and record.sig alone) and `dp-release verify`, run as a
subprocess with the key read from the portal's key page, accepts it. Its totals count unpublished,
refunded and shared-budget releases as the ledger does (expected figures worked out by hand from
what each test requested); its audit commitment moves with its figures only; the key comes from
DPPORTAL_SIGNING_KEY, and `check --deploy` names a missing or broken one.
"""

import hashlib
import json
import re
import subprocess
import sys
import zipfile

import pytest
from cryptography.hazmat.primitives import serialization
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.models import AuditEvent
from dpportal.releases import packaging
from mechanisms.public_record import public_key_hex
from tests.conftest import RAW_CANARIES, REPO_ROOT
from tests.helpers import client_for, deploy_check, ed25519_pem, make_dataset, make_release

pytestmark = pytest.mark.django_db

RECORD_ROUTES = ("public_record_zip", "public_record_json", "public_record_sig")


def switch(user, dataset, public: bool):
    return client_for(user).post(
        reverse("dataset_public_record", args=[dataset.pk]), {"public": "1" if public else "0"}
    )


def statuses(dataset, client=None) -> list[int]:
    client = client or Client()
    return [client.get(reverse(name, args=[dataset.pk])).status_code for name in RECORD_ROUTES]


def key_from_the_key_page() -> str:
    page = Client().get(reverse("public_record_key"))
    assert page.status_code == 200
    return re.search(r'<code id="record-key">([0-9a-f]{64})</code>', page.content.decode())[1]


def download_zip(dataset, folder):
    response = Client().get(reverse("public_record_zip", args=[dataset.pk]))
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/zip"
    path = folder / f"record-{dataset.pk}.zip"
    path.write_bytes(response.content)
    return path


def record_of(zip_path) -> dict:
    with zipfile.ZipFile(zip_path) as archive:
        name = next(n for n in archive.namelist() if n.endswith("/record.json"))
        return json.loads(archive.read(name))


def dp_release_verify(path, key):
    command = [sys.executable, "-m", "mechanisms", "verify", str(path), "--key", key]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)


def test_a_record_is_off_by_default_and_answers_404_to_everyone(world):
    assert statuses(world.dataset) == [404, 404, 404]
    assert statuses(world.dataset, client_for(world.alice)) == [404, 404, 404]


def test_only_the_owner_switches_it_and_each_switch_is_logged(world):
    for user in (world.carol, world.bob):  # the auditor, another custodian
        assert switch(user, world.dataset, True).status_code == 404
    anonymous = Client().post(reverse("dataset_public_record", args=[world.dataset.pk]))
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    world.dataset.refresh_from_db()
    assert not world.dataset.public_record
    assert switch(world.alice, world.dataset, True).status_code == 302
    assert statuses(world.dataset) == [200, 200, 200]
    switch(world.alice, world.dataset, True)  # a second click changes nothing
    switch(world.alice, world.dataset, False)
    assert statuses(world.dataset) == [404, 404, 404]
    events = list(
        AuditEvent.objects.filter(action__in=["record_published", "record_withdrawn"])
        .order_by("pk")
        .values_list("action", "actor_name", "dataset")
    )
    assert events == [
        ("record_published", "alice", world.dataset.pk),
        ("record_withdrawn", "alice", world.dataset.pk),
    ]


def test_the_record_round_trips_through_dp_release_verify(world, tmp_path):
    services.release_set_public(release=world.release, user=world.alice, public=True)
    switch(world.alice, world.dataset, True)
    zip_path = download_zip(world.dataset, tmp_path)
    key = key_from_the_key_page()
    result = dp_release_verify(zip_path, key)
    print(f"\ndp-release verify (portal's zip): exit {result.returncode}\n{result.stdout}")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(f"VERIFIED: dataset {world.dataset.name!r}")
    record = record_of(zip_path)
    assert record["budget"] | {"neighbouring": None} == {
        "neighbouring": None,
        "epsilon_total": "2",
        "epsilon_spent": "0.5",  # the world's one release, requested at 0.5
        "delta_total": "0",
        "delta_spent": "0",
        "releases_charged": 1,
    }
    [listed] = record["public_releases"]
    served = {
        name: Client().get(reverse("public_release_file", args=[world.release.pk, name])).content
        for name in packaging.package_names(world.release)
    }
    assert listed["files"] == {n: hashlib.sha256(c).hexdigest() for n, c in served.items()}
    assert (listed["id"], listed["epsilon"], listed["guarantee"]["epsilon"]) == (
        world.release.pk,
        "0.5",
        0.5,
    )
    text = zip_path.read_bytes() + json.dumps(record).encode()
    custodian_only = [world.dataset.sha256, world.dataset.original_filename.removesuffix(".csv")]
    assert not [v for v in [*custodian_only, *RAW_CANARIES.values()] if v.encode() in text]


def test_record_json_and_record_sig_alone_verify_without_the_files(world, tmp_path):
    switch(world.alice, world.dataset, True)
    folder = tmp_path / "record"
    folder.mkdir()
    for name, route in (("record.json", "public_record_json"), ("record.sig", "public_record_sig")):
        response = Client().get(reverse(route, args=[world.dataset.pk]))
        assert response["Content-Disposition"].endswith(f'-{name}"')
        (folder / name).write_bytes(response.content)
    result = dp_release_verify(folder, key_from_the_key_page())
    assert result.returncode == 0, result.stdout + result.stderr
    other = Client().get(reverse("public_record_key")).content.decode()
    assert dp_release_verify(folder, "ab" * 32).returncode == 1 and "ab" * 32 not in other


def test_the_totals_count_unpublished_refunded_and_shared_budget_releases(world, tmp_path):
    """Charged on the shared budget: the world's release (0.5, public), an unpublished one of
    the same dataset (0.25), and one of Alice's second upload of the same file (0.125), which
    shares the budget; a cancelled release (0.0625) was refunded and counts nowhere."""
    alice = world.alice
    make_release(alice, world.dataset, epsilon="0.25")  # unpublished: in the sum, not listed
    refunded = make_release(alice, world.dataset, epsilon="0.0625")
    services.release_cancel(release=refunded, user=alice)
    same_file = tmp_path / "adult-with-canaries.csv"  # the world's upload (tests/conftest.py)
    copy = make_dataset(alice, name="Copy", path=same_file, epsilon_total=2)
    assert copy.budget_id == world.dataset.budget_id  # the same content: one budget
    make_release(alice, copy, epsilon="0.125")
    services.release_set_public(release=world.release, user=alice, public=True)
    switch(alice, world.dataset, True)
    zip_path = download_zip(world.dataset, tmp_path)
    record = record_of(zip_path)
    assert record["budget"]["epsilon_spent"] == "0.875"  # 0.5 + 0.25 + 0.125
    assert record["budget"]["releases_charged"] == 3
    assert record["other_charged_releases"] == {"releases": 2, "epsilon": "0.375", "delta": "0"}
    assert [r["id"] for r in record["public_releases"]] == [world.release.pk]
    result = dp_release_verify(zip_path, key_from_the_key_page())
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_audit_commitment_moves_with_the_figures_only(world):
    switch(world.alice, world.dataset, True)
    opted_in = AuditEvent.objects.get(action="record_published")

    def head():
        url = reverse("public_record_json", args=[world.dataset.pk])
        return json.loads(Client().get(url).content)["audit_chain_head"]

    assert head() == opted_in.hash
    download = client_for(world.alice).get(reverse("release_download_zip", args=[world.release.pk]))
    assert download.status_code == 200
    assert AuditEvent.objects.filter(action="download", dataset=world.dataset).exists()
    assert head() == opted_in.hash  # a download is not timed by the public record
    release = make_release(world.alice, world.dataset, epsilon="0.25")
    requested = AuditEvent.objects.get(action="release_requested", release=release)
    assert head() == requested.hash
    call_command("verify_audit_chain", expect_head=head())  # raises if the head is missing


def test_a_deleted_datasets_record_answers_404_and_cannot_be_switched_on(world):
    switch(world.alice, world.dataset, True)
    services.dataset_delete(dataset=world.dataset, user=world.alice)
    assert statuses(world.dataset) == [404, 404, 404]
    switch(world.alice, world.dataset, False)
    response = client_for(world.alice).post(
        reverse("dataset_public_record", args=[world.dataset.pk]), {"public": "1"}, follow=True
    )
    assert "its record can no longer be published" in response.content.decode()
    assert statuses(world.dataset) == [404, 404, 404]


def test_the_key_comes_from_the_setting_as_pem_text_or_a_file(world, settings, tmp_path):
    pem = ed25519_pem()
    private = serialization.load_pem_private_key(pem.encode(), password=None)
    expected = public_key_hex(private.public_key())
    key_file = tmp_path / "signing-key.pem"
    key_file.write_text(pem)
    switch(world.alice, world.dataset, True)
    for value in (pem, str(key_file)):
        settings.DPPORTAL_SIGNING_KEY = value
        assert key_from_the_key_page() == expected
        result = dp_release_verify(download_zip(world.dataset, tmp_path), expected)
        assert result.returncode == 0, result.stdout


def test_a_broken_key_answers_503_with_words_and_refuses_the_switch(world, settings, tmp_path):
    switch(world.alice, world.dataset, True)
    settings.DPPORTAL_SIGNING_KEY = str(tmp_path / "no-such-key.pem")
    assert statuses(world.dataset) == [503, 503, 503]
    page = Client().get(reverse("public_record_key"))
    assert page.status_code == 503 and b"cannot sign records" in page.content
    switch(world.alice, world.dataset, False)
    response = client_for(world.alice).post(
        reverse("dataset_public_record", args=[world.dataset.pk]), {"public": "1"}, follow=True
    )
    assert "no-such-key.pem" in response.content.decode()  # the owner is told why
    world.dataset.refresh_from_db()
    assert not world.dataset.public_record


def test_check_deploy_warns_on_the_fallback_key_and_refuses_a_broken_one():
    fallback = deploy_check(DPPORTAL_SIGNING_KEY="")
    assert fallback.returncode != 0 and "dpportal.W020" in fallback.stderr + fallback.stdout
    broken = deploy_check(DPPORTAL_SIGNING_KEY="-----BEGIN PRIVATE KEY-----\nnot a key\n")
    assert broken.returncode != 0 and "dpportal.E020" in broken.stderr + broken.stdout
