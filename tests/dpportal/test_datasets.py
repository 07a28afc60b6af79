"""Dataset pages and services: upload, budget, schema, dataset page, auditors, deletion."""

import json
import re
import stat
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.models import AuditEvent, BudgetLedgerEntry, Dataset, Release
from dpportal.releases import engine as release_engine
from tests.helpers import (
    DEMO_SCHEMA,
    SMALL_CSV,
    SMALL_SCHEMA,
    client_for,
    make_user,
    schema_post,
    upload,
)

pytestmark = pytest.mark.database


def storage_files():
    folder = Path(settings.DATASET_STORAGE_DIR)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def create_dataset(
    owner, content=SMALL_CSV, name="People", filename="people.csv", epsilon_total=1, tmp_path=None
):
    path = Path(tmp_path or settings.DATA_DIR) / filename
    path.write_bytes(content)
    try:
        return services.dataset_create_from_path(
            owner=owner, name=name, source_path=path, epsilon_total=epsilon_total
        )
    finally:
        path.unlink()


@pytest.fixture(autouse=True)
def private_storage(settings, tmp_path):
    """A fresh storage folder per test, so 'nothing left behind' is checked exactly."""
    settings.DATASET_STORAGE_DIR = tmp_path / "storage"
    return settings.DATASET_STORAGE_DIR


@pytest.fixture
def owner(db):
    return make_user("alice")


@pytest.fixture
def dataset(owner):
    return create_dataset(owner)


# ---------------------------------------------------------------- upload


def test_upload_page_renders_with_budget_guidance(owner):
    response = client_for(owner).get(reverse("dataset_upload"))
    assert response.status_code == 200
    text = response.content.decode()
    for phrase in (
        "0.1",
        "Very strong",
        "Weak",
        "Replace one row",
        'enctype="multipart/form-data"',
    ):
        assert phrase in text
    assert 'data-max-bytes="' in text


def test_upload_stores_dataset_parquet_and_original_privately(owner):
    response = upload(client_for(owner))
    dataset = Dataset.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("dataset_schema", args=[dataset.pk])
    assert dataset.row_count == 3 and dataset.columns == ["age", "sex", "city"]
    assert dataset.original_filename == "people.csv"
    assert dataset.epsilon_total == Decimal("1") and dataset.neighbouring == "replace-one"
    import hashlib

    assert dataset.sha256 == hashlib.sha256(SMALL_CSV).hexdigest()
    assert dataset.size_bytes == len(SMALL_CSV)
    assert sorted([dataset.storage_name, dataset.parquet_name]) == storage_files()
    for name in (dataset.storage_name, dataset.parquet_name):
        path = Path(settings.DATASET_STORAGE_DIR) / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    table = pq.read_table(Path(settings.DATASET_STORAGE_DIR) / dataset.parquet_name)
    assert table.column("age").to_pylist() == [34, 51, 29]
    assert table.column("city").to_pylist() == ["Leeds", "York", "Leeds"]
    event = AuditEvent.objects.get(action=AuditEvent.Action.UPLOAD)
    assert event.actor == owner and event.details["rows"] == 3


def test_upload_can_discard_the_original(owner, settings):
    settings.DPPORTAL_KEEP_ORIGINAL_UPLOADS = False
    upload(client_for(owner))
    dataset = Dataset.objects.get()
    assert dataset.storage_name == "" and storage_files() == [dataset.parquet_name]


def test_storage_folder_is_outside_served_folders():
    storage = Path(settings.DATASET_STORAGE_DIR).resolve()
    for served in [
        Path(settings.STATIC_ROOT),
        *map(Path, settings.STATICFILES_DIRS),
        Path(settings.MEDIA_ROOT or "/nonexistent-media-root"),
    ]:
        assert not storage.is_relative_to(served.resolve())


def test_no_url_serves_stored_files(owner, dataset):
    client = client_for(owner)
    for name in (dataset.storage_name, dataset.parquet_name):
        for url in (
            f"/{name}",
            f"/static/{name}",
            f"/media/{name}",
            f"/storage/{name}",
            f"/static/../storage/{name}",
        ):
            assert client.get(url).status_code == 404


def test_upload_form_errors_rerender_with_400_and_store_nothing(owner):
    response = upload(client_for(owner), epsilon_total="-1")
    assert response.status_code == 400
    assert "Ensure this value is greater than or equal to" in response.content.decode()
    assert Dataset.objects.count() == 0 and storage_files() == []


def test_upload_refuses_a_raised_header_choice_mismatch_as_named_columns(owner):
    response = upload(client_for(owner), content=b"1,2\n3,4\n", header="no")
    dataset = Dataset.objects.get()
    assert response.status_code == 302
    assert dataset.columns == ["column_1", "column_2"] and dataset.row_count == 2


def test_upload_without_login_redirects_and_stores_nothing(db):
    response = upload(Client())
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert storage_files() == []


def test_upload_without_csrf_token_is_refused_and_leaves_nothing(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    response = upload(client)
    assert response.status_code == 403
    assert Dataset.objects.count() == 0 and storage_files() == []


def test_upload_over_the_limit_by_one_byte_is_refused_while_streaming(owner, settings):
    settings.MAX_UPLOAD_BYTES = len(SMALL_CSV) - 1
    response = upload(client_for(owner))
    assert response.status_code == 413
    assert "larger than the limit" in response.content.decode()
    assert Dataset.objects.count() == 0 and storage_files() == []


def test_upload_exactly_at_the_limit_is_accepted(owner, settings):
    settings.MAX_UPLOAD_BYTES = len(SMALL_CSV)
    assert upload(client_for(owner)).status_code == 302


def test_upload_with_declared_length_far_over_limit_is_refused_unread(owner, settings):
    settings.MAX_UPLOAD_BYTES = 1000
    client = client_for(owner)
    response = client.post(
        reverse("dataset_upload"),
        data=b"x" * 200_000,
        content_type="multipart/form-data; boundary=zzz",
    )
    assert response.status_code == 413 and storage_files() == []


# ---------------------------------------------------------------- budget


def test_budget_can_be_raised_before_the_first_release(owner, dataset):
    response = client_for(owner).post(
        reverse("dataset_budget", args=[dataset.pk]),
        {"epsilon_total": "2", "delta_total": "0", "neighbouring": "add-remove"},
    )
    dataset.refresh_from_db()
    assert response.status_code == 302
    assert dataset.epsilon_total == Decimal("2") and dataset.neighbouring == "add-remove"
    event = AuditEvent.objects.get(action=AuditEvent.Action.BUDGET_CHANGED)
    assert event.details["before"]["epsilon_total"] == "1.000000"
    assert event.details["after"]["epsilon_total"] == "2"


def make_release(dataset, owner, epsilon="0.25"):
    """A queued release (its job is sent on commit, which a `db` test never reaches)."""
    services.dataset_confirm_schema(dataset=dataset, user=owner, schema=SMALL_SCHEMA)
    dataset.refresh_from_db()
    return services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age"],
        params={},
        epsilon=Decimal(epsilon),
    )


def test_budget_can_only_be_lowered_once_a_release_exists(owner, dataset):
    make_release(dataset, owner)
    client = client_for(owner)
    url = reverse("dataset_budget", args=[dataset.pk])
    client.post(url, {"epsilon_total": "3", "delta_total": "0", "neighbouring": "replace-one"})
    dataset.refresh_from_db()
    assert dataset.epsilon_total == Decimal("1")
    client.post(url, {"epsilon_total": "0.2", "delta_total": "0", "neighbouring": "replace-one"})
    dataset.refresh_from_db()
    assert dataset.epsilon_total == Decimal("1")  # below the 0.25 already spent
    response = client.post(
        url,
        {"epsilon_total": "0.5", "delta_total": "0", "neighbouring": "replace-one"},
        follow=True,
    )
    dataset.refresh_from_db()
    assert dataset.epsilon_total == Decimal("0.5")
    assert "budget was updated" in response.content.decode()
    assert AuditEvent.objects.filter(action=AuditEvent.Action.BUDGET_CHANGED).count() == 1


def test_budget_refusals_say_why(owner, dataset):
    make_release(dataset, owner)
    with pytest.raises(services.ServiceError, match="never raised"):
        services.dataset_change_budget(dataset=dataset, user=owner, epsilon_total=2, delta_total=0)
    with pytest.raises(services.ServiceError, match="already spent"):
        services.dataset_change_budget(
            dataset=dataset, user=owner, epsilon_total="0.1", delta_total=0
        )
    with pytest.raises(services.ServiceError, match="neighbouring relation cannot change"):
        services.dataset_change_budget(
            dataset=dataset, user=owner, epsilon_total=1, delta_total=0, neighbouring="add-remove"
        )
    with pytest.raises(services.ServiceError, match=r"Total ε \(0\)"):
        services.dataset_change_budget(dataset=dataset, user=owner, epsilon_total=0, delta_total=0)


def test_budget_form_errors_are_shown_not_applied(owner, dataset):
    response = client_for(owner).post(
        reverse("dataset_budget", args=[dataset.pk]),
        {"epsilon_total": "abc", "delta_total": "0", "neighbouring": "replace-one"},
        follow=True,
    )
    dataset.refresh_from_db()
    assert dataset.epsilon_total == Decimal("1")
    assert "Budget not changed" in response.content.decode()


# ---------------------------------------------------------------- schema


def test_schema_page_proposes_types_but_no_value_from_the_data(owner, dataset):
    response = client_for(owner).get(reverse("dataset_schema", args=[dataset.pk]))
    text = response.content.decode()
    assert response.status_code == 200
    assert "Nothing on this page was read from your data" in text
    assert 'value="29"' not in text and 'value="51"' not in text  # the data's own min and max
    assert "F\nM</textarea>" not in text
    assert '<option value="numeric" selected>' in text  # the type is proposed
    assert not dataset.schema_confirmed


GOOD_ROWS = [
    {"type": "numeric", "lower": "0", "upper": "120", "bins": "12"},
    {"type": "categorical", "categories": "F\nM\nX", "unknown": "reject"},
    {"type": "ignored"},
]


def test_schema_confirmation_needs_the_public_knowledge_statement(owner, dataset):
    page = client_for(owner).get(reverse("dataset_schema", args=[dataset.pk])).content.decode()
    assert re.search(r'<input type="checkbox" name="public_knowledge"[^>]*required', page)
    assert (
        "These bounds and categories come from public knowledge (e.g. a code book) or from "
        "DP estimates, not from looking at the data</label>"
    ) in page
    response = client_for(owner).post(
        reverse("dataset_schema", args=[dataset.pk]), schema_post(GOOD_ROWS, public_knowledge=False)
    )
    dataset.refresh_from_db()
    assert response.status_code == 400 and not dataset.schema_confirmed
    assert "tick the box to confirm" in response.content.decode()
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.SCHEMA_CONFIRMED).exists()


def test_schema_confirmation_stores_the_mechanisms_schema(owner, dataset):
    response = client_for(owner).post(
        reverse("dataset_schema", args=[dataset.pk]), schema_post(GOOD_ROWS)
    )
    dataset.refresh_from_db()
    assert response.status_code == 302
    assert dataset.schema_confirmed
    assert dataset.schema == {
        "columns": [
            {
                "name": "age",
                "type": "numeric",
                "lower": 0,
                "upper": 120,
                "bins": 12,
                "missing": "cell",  # the defaults of issue 14, stored explicitly
                "integer": False,
                "decimals": 1,
            },
            {
                "name": "sex",
                "type": "categorical",
                "categories": ["F", "M", "X"],
                "unknown": "reject",
                "missing": "cell",
            },
            {"name": "city", "type": "ignored"},
        ]
    }
    import mechanisms

    assert mechanisms.Schema.from_dict(dataset.schema).to_dict() == dataset.schema
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SCHEMA_CONFIRMED).count() == 1
    # Re-opening shows the confirmed values, no longer marked as coming from the data.
    text = client_for(owner).get(reverse("dataset_schema", args=[dataset.pk])).content.decode()
    assert 'value="120"' in text and 'class="from-data"' not in text


@pytest.mark.parametrize(
    "row, message",
    [
        ({"type": "numeric", "lower": "5", "upper": "5", "bins": "3"}, "must be above the lower"),
        (
            {"type": "numeric", "lower": "", "upper": "5", "bins": "3"},
            "Column &#x27;age&#x27;: Lower bound is required for a numeric column — enter",
        ),
        ({"type": "numeric", "lower": "0", "upper": "5", "bins": "0"}, "whole number from 1"),
        ({"type": "numeric", "lower": "0", "upper": "5", "bins": "0, 3, 4"}, "must start at the"),
        ({"type": "numeric", "lower": "0", "upper": "5", "bins": "0, 3, 3, 5"}, "must increase"),
        ({"type": "numeric", "lower": "0", "upper": "5", "bins": "0, x, 5"}, "must be numbers"),
        ({"type": "categorical", "categories": "  \n "}, "at least one category"),
        ({"type": "categorical", "categories": "F\nF"}, "repeated: F"),
        ({"type": "categorical", "categories": "(other)"}, "reserved"),
        ({"type": "bogus"}, "Select a valid choice"),
    ],
)
def test_schema_errors_rerender_with_a_message(owner, dataset, row, message):
    rows = [row, GOOD_ROWS[1], GOOD_ROWS[2]]
    response = client_for(owner).post(
        reverse("dataset_schema", args=[dataset.pk]), schema_post(rows)
    )
    dataset.refresh_from_db()
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not dataset.schema_confirmed


def test_schema_accepts_explicit_bin_edges_and_shows_them_again(owner, dataset):
    rows = [{"type": "numeric", "lower": "0", "upper": "120", "bins": "0, 18, 65.5, 120"}]
    client = client_for(owner)
    response = client.post(
        reverse("dataset_schema", args=[dataset.pk]), schema_post(rows + GOOD_ROWS[1:])
    )
    dataset.refresh_from_db()
    assert response.status_code == 302
    assert dataset.schema["columns"][0]["bins"] == [0, 18, 65.5, 120]
    text = client.get(reverse("dataset_schema", args=[dataset.pk])).content.decode()
    assert 'value="0, 18, 65.5, 120"' in text


def test_schema_post_with_wrong_column_count_is_refused(owner, dataset):
    response = client_for(owner).post(
        reverse("dataset_schema", args=[dataset.pk]), schema_post(GOOD_ROWS[:2])
    )
    assert response.status_code == 400 and "out of date" in response.content.decode()


def test_schema_service_refuses_columns_that_are_not_the_datasets(owner, dataset):
    with pytest.raises(services.ServiceError, match="in order"):
        services.dataset_confirm_schema(dataset=dataset, user=owner, schema=DEMO_SCHEMA)


def test_releases_impossible_until_schema_confirmed(owner, dataset):
    with pytest.raises(services.ServiceError, match="Confirm the dataset's schema"):
        services.release_create(
            dataset=dataset,
            user=owner,
            mechanism="perturbed_histogram",
            columns=["age"],
            params={},
            epsilon=Decimal("0.1"),
        )


def test_the_page_never_confirms_that_bounds_equal_the_data_extremes(owner, dataset):
    """Saying "equals your data's smallest value" would reveal the raw minimum by guessing."""
    rows = [{"type": "numeric", "lower": "29", "upper": "51", "bins": "2"}] + GOOD_ROWS[1:]
    client_for(owner).post(reverse("dataset_schema", args=[dataset.pk]), schema_post(rows))
    text = client_for(owner).get(reverse("dataset_schema", args=[dataset.pk])).content.decode()
    assert "equals your data" not in text


# ---------------------------------------------------------------- dataset page and roles


def test_dataset_page_for_owner(owner, dataset):
    release = make_release(dataset, owner)
    response = client_for(owner).get(reverse("dataset_detail", args=[dataset.pk]))
    text = response.content.decode()
    assert response.status_code == 200
    assert '<progress id="budget-spent"' in text and "25% spent" in text
    assert "Spent (dark): 0.25" in text and "Left (light): 0.75" in text
    assert "what any one person's row contains is protected" in text
    assert "Noisy histogram" in text  # the releases table names the kind, not its id
    assert f'href="{reverse("release_detail", kwargs={"pk": release.pk})}"' in text
    assert f'href="{reverse("release_new", kwargs={"dataset_pk": dataset.pk})}"' in text
    assert "Read as" in text and "Add auditor" in text and "Change the budget" in text


def test_dataset_page_for_auditor_shows_public_parts_only(owner, dataset, a_minute_later):
    auditor = make_user("bob")
    services.dataset_set_auditor(dataset=dataset, user=owner, username="bob", add=True)
    client = client_for(auditor)
    response = client.get(reverse("dataset_detail", args=[dataset.pk]))
    text = response.content.decode()
    assert response.status_code == 200 and dataset.name in text
    assert "Read as" not in text and "Add auditor" not in text and "Delete" not in text
    assert "Leeds" not in text  # nothing from the data
    for name in ("dataset_schema", "dataset_delete"):
        assert client.get(reverse(name, args=[dataset.pk])).status_code == 404
    for name in ("dataset_budget", "dataset_auditors", "dataset_delete", "dataset_schema"):
        assert client.post(reverse(name, args=[dataset.pk]), {}).status_code == 404


@pytest.mark.parametrize(
    "name, method",
    [
        ("dataset_detail", "get"),
        ("dataset_schema", "get"),
        ("dataset_schema", "post"),
        ("dataset_budget", "post"),
        ("dataset_auditors", "post"),
        ("dataset_delete", "get"),
        ("dataset_delete", "post"),
    ],
)
def test_other_custodians_get_404(owner, dataset, name, method):
    stranger = client_for(make_user("mallory"))
    response = getattr(stranger, method)(reverse(name, args=[dataset.pk]))
    assert response.status_code == 404


@pytest.mark.parametrize("name", ["dataset_detail", "dataset_schema", "dataset_delete"])
def test_anonymous_users_are_sent_to_login(dataset, name):
    response = Client().get(reverse(name, args=[dataset.pk]))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_home_lists_owned_and_audited_datasets_with_links(owner, dataset):
    other = make_user("carol")
    theirs = create_dataset(other, name="Theirs")
    services.dataset_set_auditor(dataset=theirs, user=other, username="alice", add=True)
    hidden = create_dataset(other, name="Hidden")
    text = client_for(owner).get(reverse("home")).content.decode()
    assert reverse("dataset_detail", args=[dataset.pk]) in text
    assert reverse("dataset_detail", args=[theirs.pk]) in text and "Auditor" in text
    assert reverse("dataset_detail", args=[hidden.pk]) not in text
    assert reverse("dataset_upload") in text
    assert "How it works" in text and "Budget left (ε): how much" in text
    assert reverse("release_new", args=[dataset.pk]) not in text  # schema not confirmed yet
    services.dataset_confirm_schema(dataset=dataset, user=owner, schema=SMALL_SCHEMA)
    services.dataset_confirm_schema(dataset=theirs, user=other, schema=SMALL_SCHEMA)
    text = client_for(owner).get(reverse("home")).content.decode()
    assert reverse("release_new", args=[dataset.pk]) in text  # the owner's row
    assert reverse("release_new", args=[theirs.pk]) not in text  # audited: no release link


def test_auditors_are_added_and_removed_with_audit_events(owner, dataset):
    make_user("bob")
    client = client_for(owner)
    url = reverse("dataset_auditors", args=[dataset.pk])
    client.post(url, {"username": "bob", "action": "add"})
    assert list(dataset.auditors.values_list("username", flat=True)) == ["bob"]
    response = client.post(url, {"username": "nobody", "action": "add"}, follow=True)
    assert "There is no user named &#x27;nobody&#x27;" in response.content.decode()
    response = client.post(url, {"username": "alice", "action": "add"}, follow=True)
    assert "owns this dataset" in response.content.decode()
    client.post(url, {"username": "bob", "action": "remove"})
    assert dataset.auditors.count() == 0
    changes = AuditEvent.objects.filter(action=AuditEvent.Action.ACCESS_CHANGED)
    assert [e.details["change"] for e in changes] == ["added", "removed"]


# ---------------------------------------------------------------- deletion


def test_delete_removes_files_keeps_releases_ledger_and_audit(
    owner, dataset, django_capture_on_commit_callbacks
):
    release = make_release(dataset, owner)
    Release.objects.filter(pk=release.pk).update(status=Release.Status.DONE)
    client = client_for(owner)
    url = reverse("dataset_delete", args=[dataset.pk])
    assert client.get(url).status_code == 200
    response = client.post(url, {"confirm_name": "wrong"})
    assert response.status_code == 400 and len(storage_files()) == 2
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"confirm_name": "People"})
    assert response.status_code == 302
    dataset.refresh_from_db()
    assert dataset.is_deleted and dataset.profile is None
    assert storage_files() == []
    assert Release.objects.filter(pk=release.pk).exists()
    assert BudgetLedgerEntry.objects.filter(dataset=dataset).count() == 1
    assert AuditEvent.objects.filter(action=AuditEvent.Action.DELETION).count() == 1
    assert (
        reverse("dataset_detail", args=[dataset.pk])
        not in client.get(reverse("home")).content.decode()
    )
    page = client.get(reverse("dataset_detail", args=[dataset.pk])).content.decode()
    assert "(deleted)" in page and f"Release {release.pk}" in page
    with pytest.raises(services.ServiceError, match="deleted"):
        services.dataset_confirm_schema(dataset=dataset, user=owner, schema=SMALL_SCHEMA)


def test_delete_waits_for_queued_releases(owner, dataset):
    make_release(dataset, owner)
    with pytest.raises(services.ServiceError, match="still queued or running"):
        services.dataset_delete(dataset=dataset, user=owner)
    assert len(storage_files()) == 2


# ---------------------------------------------------------------- the columnar copy


def test_load_columns_reads_only_the_requested_columns(owner, dataset, monkeypatch):
    seen = {}
    real = pq.read_table

    def spy(path, columns=None, **kwargs):
        seen["columns"] = columns
        return real(path, columns=columns, **kwargs)

    monkeypatch.setattr(release_engine.pq, "read_table", spy)
    frame = release_engine.load_columns(dataset, ["sex"])
    assert seen["columns"] == ["sex"] and list(frame.columns) == ["sex"]
    assert frame["sex"].tolist() == ["F", "M", "F"]


def test_load_columns_refuses_after_deletion(owner, dataset, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.dataset_delete(dataset=dataset, user=owner)
    dataset.refresh_from_db()
    with pytest.raises(release_engine.ReleaseInputError, match="no longer stored"):
        release_engine.load_columns(dataset, ["age"])


def test_demo_loader_goes_through_ingest(db):
    call_command("load_demo", password="demo-portal-test")
    dataset = Dataset.objects.get(name="Adult (demo)")
    assert dataset.parquet_name and dataset.schema_confirmed
    assert dataset.row_count == 48842
    frame = release_engine.load_columns(dataset, ["age", "income"])
    assert len(frame) == 48842 and frame["age"].between(17, 90).all()


# ---------------------------------------------------------------- storage hygiene


CANARY = b"CANARY-7f3a9c-SHOULD-NEVER-SURVIVE"


def files_containing(folder: Path, needle: bytes) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_no_canary_bytes_remain_after_deletion(
    owner, private_storage, django_capture_on_commit_callbacks
):
    content = b"age,secret\n" + b"".join(b"%d,%s-%d\n" % (i, CANARY, i % 3) for i in range(50))
    upload(client_for(owner), content=content)
    dataset = Dataset.objects.get()
    assert files_containing(private_storage, CANARY)  # the check can see the canary
    with django_capture_on_commit_callbacks(execute=True):
        services.dataset_delete(dataset=dataset, user=owner)
    assert files_containing(private_storage, CANARY) == []
    assert CANARY.decode() not in json.dumps(list(AuditEvent.objects.values("details")))


def test_orphaned_files_are_swept_only_when_old(owner, dataset, private_storage):
    import os
    import time

    old, young = private_storage / "old.upload", private_storage / "young.upload"
    for path in (old, young):
        path.write_bytes(b"partial upload")
    os.utime(old, (time.time() - 7 * 3600,) * 2)
    assert services.dataset_remove_orphan_files() == 1
    assert sorted(storage_files()) == sorted(
        [dataset.storage_name, dataset.parquet_name, "young.upload"]
    )


def test_whole_numbers_with_gaps_match_categories_as_text(owner):
    import mechanisms

    dataset = create_dataset(owner, content=b"code,x\n1,a\n,b\n2,c\n1,d\n")
    frame = release_engine.load_columns(dataset, ["code"])
    schema = mechanisms.Schema.from_dict(
        {
            "columns": [
                {
                    "name": "code",
                    "type": "categorical",
                    "categories": ["1", "2"],
                    "unknown": "other",
                },
                {"name": "x", "type": "ignored"},
            ]
        }
    )
    assert schema.encode(frame, ["code"])[:, 0].tolist() == [0, 3, 1, 0]  # 3 = "(missing)"


def test_upload_handler_streams_to_private_storage_and_stops_at_the_limit(private_storage):
    from django.core.files.uploadhandler import StopFutureHandlers, StopUpload

    from dpportal.core.storage import PrivateUploadHandler

    handler = PrivateUploadHandler(max_bytes=10)
    with pytest.raises(StopFutureHandlers):
        handler.new_file("file", "t.csv", "text/csv", None)
    handler.receive_data_chunk(b"a,b\n", 0)
    (part,) = private_storage.iterdir()
    assert stat.S_IMODE(part.stat().st_mode) == 0o600
    handler.receive_data_chunk(b"1,2\n", 4)  # 8 bytes so far: within the limit
    assert not handler.exceeded
    with pytest.raises(StopUpload):
        handler.receive_data_chunk(b"345", 8)  # 11 > 10: refused before it is written
    assert handler.exceeded and list(private_storage.iterdir()) == []
    assert handler.file_complete(11) is None


def test_upload_handler_returns_the_scanned_private_file(private_storage):
    from django.core.files.uploadhandler import StopFutureHandlers

    from dpportal.core.storage import PrivateUploadHandler

    handler = PrivateUploadHandler(max_bytes=100)
    with pytest.raises(StopFutureHandlers):
        handler.new_file("file", "t.csv", "text/csv", None)
    handler.receive_data_chunk(SMALL_CSV, 0)
    upload = handler.file_complete(len(SMALL_CSV))
    assert upload.name == "t.csv" and upload.size == len(SMALL_CSV)
    assert upload.path.read_bytes() == SMALL_CSV and upload.scan.utf8_valid
    upload.discard()
    assert list(private_storage.iterdir()) == []


@pytest.mark.django_db
def test_relation_cannot_become_add_remove_once_an_auditor_could_see_n():
    """Under replace-one an auditor may see n; switching to add-remove later cannot hide it."""
    owner = make_user("owner-n")
    dataset = create_dataset(owner)
    services.dataset_change_budget(
        dataset=dataset, user=owner, epsilon_total=1, delta_total=0, neighbouring="add-remove"
    )  # nobody else has seen it yet
    services.dataset_change_budget(
        dataset=dataset, user=owner, epsilon_total=1, delta_total=0, neighbouring="replace-one"
    )
    make_user("auditor-n")
    services.dataset_set_auditor(dataset=dataset, user=owner, username="auditor-n", add=True)
    services.dataset_set_auditor(dataset=dataset, user=owner, username="auditor-n", add=False)
    with pytest.raises(services.ServiceError, match="can no longer become add-remove"):
        services.dataset_change_budget(
            dataset=dataset, user=owner, epsilon_total=1, delta_total=0, neighbouring="add-remove"
        )
    dataset.refresh_from_db()
    assert dataset.neighbouring == "replace-one"
