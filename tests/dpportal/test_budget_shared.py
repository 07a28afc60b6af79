"""Issue 20, item 6: the privacy budget belongs to the data, not to the upload.

A second upload of the same table content by the same owner (deleted datasets included) draws
on the first one's budget and says so; across owners nothing reveals that someone else holds the
same content, unless the portal-wide setting shares fingerprints. The fingerprint ignores the
container (row and column order, CSV/TSV/XLSX, BOM, line endings, 1 vs 1.0) and, by design,
cannot catch a changed table (one row edited, a column dropped).
"""

import html
import io
import logging
from decimal import Decimal
from pathlib import Path

import openpyxl
import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from dpportal import ingest, services
from dpportal.models import AuditEvent
from tests.helpers import SMALL_SCHEMA, client_for, make_user, upload

pytestmark = pytest.mark.database

ROWS = [["34", "F", "Leeds"], ["51", "M", "Zürich"], ["29", "F", "Leeds"], ["29", "F", "Leeds"]]
TABLE = b"age,sex,city\n" + b"".join(",".join(r).encode() + b"\n" for r in ROWS)
SAME_MESSAGE = "This file has the same content as"


@pytest.fixture(autouse=True)
def private_storage(settings, tmp_path, monkeypatch):
    settings.DATASET_STORAGE_DIR = tmp_path / "storage"
    monkeypatch.setattr(
        services.delivery, "release_send", lambda pk: True
    )  # no broker traffic here


def fingerprint(tmp_path: Path, content: bytes, suffix=".csv") -> str:
    path, out = tmp_path / f"in{suffix}", tmp_path / "out.parquet"
    path.write_bytes(content)
    if suffix == ".xlsx":
        path, suffix = tmp_path / "sheet.csv", ".csv"
        ingest.xlsx_to_csv(tmp_path / "in.xlsx", path)
    ingest.ingest_text(path, ingest.scan_file(path), out, suffix=suffix)
    return ingest.content_fingerprint(out)


def xlsx(rows) -> bytes:
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_the_fingerprint_ignores_the_container(tmp_path):
    reference = fingerprint(tmp_path, TABLE)
    reordered = "age,sex,city\n29,F,Leeds\n51,M,Zürich\n29,F,Leeds\n34,F,Leeds\n".encode()
    columns_moved = "city,age,sex\nLeeds,34,F\nZürich,51,M\nLeeds,29,F\nLeeds,29,F\n".encode()
    as_floats = "age,sex,city\n34.0,F,Leeds\n51.0,M,Zürich\n29.0,F,Leeds\n2.9e1,F,Leeds\n".encode()
    same = {
        "rows reordered": fingerprint(tmp_path, reordered),
        "columns reordered": fingerprint(tmp_path, columns_moved),
        "BOM and CRLF": fingerprint(tmp_path, b"\xef\xbb\xbf" + TABLE.replace(b"\n", b"\r\n")),
        "quoted": fingerprint(tmp_path, TABLE.replace(b"Leeds", b'"Leeds"')),
        "TSV": fingerprint(tmp_path, TABLE.replace(b",", b"\t"), suffix=".tsv"),
        "Latin-1": fingerprint(tmp_path, TABLE.decode().encode("cp1252")),
        "1.0 for 1": fingerprint(tmp_path, as_floats),
        "XLSX": fingerprint(
            tmp_path,
            xlsx([["age", "sex", "city"]] + [[int(r[0]), r[1], r[2]] for r in ROWS]),
            suffix=".xlsx",
        ),
    }
    assert same == dict.fromkeys(same, reference)


def test_the_fingerprint_changes_with_the_content(tmp_path):
    reference = fingerprint(tmp_path, TABLE)
    changed = {
        "one row edited": TABLE.replace(b"51,M", b"52,M"),
        "a duplicate row removed": TABLE[: TABLE.rindex(b"29,F")],
        "a column dropped": b"age,sex\n34,F\n51,M\n29,F\n29,F\n",
        "a column renamed": TABLE.replace(b"city", b"town"),
        "a category re-coded": TABLE.replace(b",F,", b",W,"),
    }
    prints = {what: fingerprint(tmp_path, content) for what, content in changed.items()}
    assert reference not in prints.values() and len(set(prints.values())) == len(prints)


def spend(dataset, epsilon="0.25"):
    by_name = {c["name"]: c for c in SMALL_SCHEMA["columns"]}
    schema = {"columns": [by_name[name] for name in dataset.columns]}
    services.dataset_confirm_schema(dataset=dataset, user=dataset.owner, schema=schema)
    return services.release_create(
        dataset=dataset,
        user=dataset.owner,
        mechanism="stand_in",
        columns=["age"],
        params={},
        epsilon=epsilon,
    )


def upload_and_read(client, content=TABLE, **fields):
    response = upload(client, content, **fields)
    assert response.status_code == 302, response.content.decode()[:2000]
    said = [str(m) for m in get_messages(response.wsgi_request)]
    from dpportal.models import Dataset

    dataset = Dataset.objects.order_by("-pk").first()
    page = client.get(reverse("dataset_detail", args=[dataset.pk])).content.decode()
    return dataset, said, html.unescape(page)


@pytest.mark.django_db
def test_a_second_upload_by_the_same_owner_shares_the_budget_and_says_so():
    owner = make_user("alice")
    client = client_for(owner)
    first, said, page = upload_and_read(client, name="First")
    assert not any(SAME_MESSAGE in m for m in said) and SAME_MESSAGE not in page
    spend(first)
    reordered = "city,sex,age\r\nLeeds,F,29\r\nZürich,M,51\r\nLeeds,F,34\r\nLeeds,F,29\r\n".encode()
    second, said, page = upload_and_read(client, reordered, name="Second", epsilon_total="5")
    shared = (
        f"This file has the same content as “First” (uploaded "
        f"{first.created_at:%Y-%m-%d}, not deleted): it shares that dataset's privacy "
        "budget: ε spent so far 0.25 of 1."
    )
    assert any(m.startswith(shared) for m in said), said
    assert any("the shared budget keeps its total of ε = 1" in m for m in said), said
    assert shared in page
    assert second.budget_id == first.budget_id
    assert second.epsilon_spent == Decimal("0.25") and second.epsilon_total == Decimal("1")
    event = AuditEvent.objects.filter(action=AuditEvent.Action.UPLOAD).last()
    assert event.details["shared_budget"] is True

    spend(second, "0.75")  # both draw on one budget: it is now used up, from either upload
    with pytest.raises(services.ServiceError, match="Not enough privacy budget"):
        services.release_create(
            dataset=first,
            user=owner,
            mechanism="stand_in",
            columns=["age"],
            params={},
            epsilon="0.01",
        )


@pytest.mark.django_db
def test_a_deleted_datasets_budget_still_binds_a_new_upload_of_its_content():
    owner = make_user("alice")
    client = client_for(owner)
    first, _, _ = upload_and_read(client, name="First")
    release = spend(first, "0.5")
    services.release_cancel(release=release, user=owner)  # refunded: nothing spent now
    spend(first, "0.5")
    from dpportal.models import Release

    Release.objects.filter(dataset=first).update(status=Release.Status.DONE)
    services.dataset_delete(dataset=first, user=owner)
    again, said, page = upload_and_read(client, name="Again")
    assert again.epsilon_remaining == Decimal("0.5")
    assert any("(uploaded" in m and "since deleted): it shares" in m for m in said), said
    assert "since deleted" in page


@pytest.mark.django_db
def test_changing_the_total_changes_it_for_every_upload_of_the_content():
    owner = make_user("alice")
    client = client_for(owner)
    first, _, _ = upload_and_read(client, name="First")
    second, _, _ = upload_and_read(client, name="Second")
    services.dataset_change_budget(dataset=second, user=owner, epsilon_total="3", delta_total=0)
    first.refresh_from_db()
    assert first.epsilon_total == Decimal("3")
    spend(first)  # a release of either upload forbids raising the total through the other
    with pytest.raises(services.ServiceError, match="lowered but never raised"):
        services.dataset_change_budget(dataset=second, user=owner, epsilon_total="4", delta_total=0)


@pytest.mark.django_db
def test_another_owner_uploading_the_same_file_sees_nothing_of_the_first(caplog):
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    first, _, _ = upload_and_read(client_for(alice), name="Alice's")
    spend(first)
    caplog.set_level(logging.DEBUG)
    bobs, bob_said, bob_page = upload_and_read(client_for(bob), name="Bob's")
    # a control: carol uploads content nobody holds
    fresh = TABLE.replace(b"Leeds", b"Hull")
    carols, carol_said, carol_page = upload_and_read(client_for(carol), fresh, name="Bob's")
    assert bobs.budget_id != first.budget_id
    assert bobs.epsilon_spent == 0 and bobs.epsilon_total == Decimal("1")
    assert bob_said == carol_said  # the same messages as for content nobody else holds
    for text in (bob_page, *bob_said):
        assert SAME_MESSAGE not in text and "Alice" not in text and "shares" not in text
    events = AuditEvent.objects.filter(action=AuditEvent.Action.UPLOAD)
    details = {e.dataset_id: e.details for e in events}
    assert details[bobs.pk]["shared_budget"] is False is details[carols.pk]["shared_budget"]
    assert "Alice" not in caplog.text


@pytest.mark.django_db
def test_the_portal_wide_setting_shares_budgets_across_owners(settings):
    settings.DPPORTAL_SHARE_FINGERPRINTS_ACROSS_OWNERS = True
    alice, bob = make_user("alice"), make_user("bob")
    first, _, _ = upload_and_read(client_for(alice), name="Alice's")
    spend(first)
    bobs, said, page = upload_and_read(client_for(bob), name="Bob's")
    assert bobs.budget_id == first.budget_id and bobs.epsilon_spent == Decimal("0.25")
    assert any(m.startswith(f"{SAME_MESSAGE} “Alice's”") for m in said), said
