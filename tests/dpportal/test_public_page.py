"""A release's public page: the owner switches it on, anyone reads it (its report under the
strict CSP, its PDF and workbook), the owner withdraws it, and both changes are audit-logged.
Nobody but the owner can switch it, and it lists the dataset's budget spent so far. Deleting
the dataset withdraws its pages."""

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dpportal.core.middleware import CONTENT_SECURITY_POLICY
from dpportal.models import AuditEvent, Dataset
from tests.conftest import RAW_CANARIES
from tests.helpers import client_for
from tests.package_text import pdf_text, xlsx_cells

pytestmark = pytest.mark.django_db


def switch(user, release, public: bool):
    return client_for(user).post(
        reverse("release_public", args=[release.pk]), {"public": "1" if public else "0"}
    )


def test_an_unpublished_release_has_no_public_page(world):
    for url in (
        reverse("public_release", args=[world.release.pk]),
        reverse("public_release_file", args=[world.release.pk, "report.pdf"]),
    ):
        assert Client().get(url).status_code == 404
        assert client_for(world.alice).get(url).status_code == 404


def test_only_the_owner_can_switch_the_page_on(world, a_minute_later):
    for user in (world.carol, world.bob):  # the auditor, another custodian
        assert switch(user, world.release, True).status_code == 404
    world.release.refresh_from_db()
    assert world.release.public_since is None
    assert Client().post(reverse("release_public", args=[world.release.pk])).status_code == 302


def test_anyone_reads_the_published_report_pdf_and_workbook(world):
    assert switch(world.alice, world.release, True).status_code == 302
    anonymous = Client()
    page = anonymous.get(reverse("public_release", args=[world.release.pk]))
    assert page.status_code == 200
    assert page["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert page["Cache-Control"] == "no-cache"  # a withdrawal reaches cached copies too
    assert "unsafe-inline" not in page["Content-Security-Policy"]
    html = page.content.decode()
    assert "<style" not in html and "<script" not in html and not re.search(r"\sstyle=", html)
    css = reverse("public_report_css")
    assert f'<link rel="stylesheet" href="{css}">' in html
    assert anonymous.get(css)["Content-Type"].startswith("text/css")
    flat = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "epsilon = 0.5" in flat  # this release's cost
    # the dataset's cumulative cost: the world's one release spent 0.5 of its total 2
    assert "The one release of this dataset has spent epsilon = 0.5 of its total" in flat
    assert "budget of 2" in flat
    pdf = anonymous.get(reverse("public_release_file", args=[world.release.pk, "report.pdf"]))
    assert pdf.status_code == 200 and pdf["Content-Type"] == "application/pdf"
    text = " ".join(pdf_text(pdf.content).split())
    assert "epsilon = 0.5" in text and "Wasserman" in text
    xlsx = anonymous.get(reverse("public_release_file", args=[world.release.pk, "release.xlsx"]))
    sheets = xlsx_cells(xlsx.content)
    assert list(sheets) == ["About", "noisy_counts", "synthetic"]
    assert all(isinstance(row[2], int) for row in sheets["noisy_counts"][1:])
    everything = html + text + repr(sheets)
    assert not any(value in everything for value in RAW_CANARIES.values())


def test_withdrawing_the_page_is_logged_and_the_address_says_so(world, a_minute_later):
    switch(world.alice, world.release, True)
    switch(world.alice, world.release, True)  # a second click changes nothing
    switch(world.alice, world.release, False)
    url = reverse("public_release", args=[world.release.pk])
    gone = Client().get(url)
    assert gone.status_code == 410 and b"was withdrawn" in gone.content
    pdf = reverse("public_release_file", args=[world.release.pk, "report.pdf"])
    assert Client().get(pdf).status_code == 410
    events = list(
        AuditEvent.objects.filter(release=world.release)
        .filter(action__in=["release_published", "release_withdrawn"])
        .order_by("pk")
        .values_list("action", "actor_name")
    )
    assert events == [("release_published", "alice"), ("release_withdrawn", "alice")]
    auditor_log = client_for(world.carol).get(reverse("audit_log")).content.decode()
    assert "Release public page withdrawn" in auditor_log
    switch(world.alice, world.release, True)  # it can be switched on again
    assert Client().get(url).status_code == 200


def test_the_release_page_offers_the_switch_to_the_owner_only(world, a_minute_later):
    owner_page = client_for(world.alice).get(reverse("release_detail", args=[world.release.pk]))
    assert b"Switch the public page on" in owner_page.content
    auditor_page = client_for(world.carol).get(reverse("release_detail", args=[world.release.pk]))
    assert (
        auditor_page.status_code == 200 and b"Switch the public page on" not in auditor_page.content
    )


# Deleting a dataset withdraws the public pages of its releases (issue 41, item 14): the owner
# is told how many on the confirmation page, the pages answer 410 like a withdrawn page, each
# withdrawal is audit-logged, and none can be switched on again.


def test_deleting_the_dataset_withdraws_its_public_pages(world, a_minute_later):
    switch(world.alice, world.release, True)
    url = reverse("public_release", args=[world.release.pk])
    assert Client().get(url).status_code == 200
    owner = client_for(world.alice)
    delete = reverse("dataset_delete", args=[world.dataset.pk])
    confirm = " ".join(owner.get(delete).content.decode().split())
    assert "One release of this dataset has a public page; it is withdrawn with the dataset" in (
        confirm
    )
    done = owner.post(delete, {"confirm_name": world.dataset.name}, follow=True)
    assert "1 public page(s) withdrawn" in done.content.decode()
    gone = Client().get(url)
    assert gone.status_code == 410 and b"was withdrawn" in gone.content
    pdf = reverse("public_release_file", args=[world.release.pk, "report.pdf"])
    assert Client().get(pdf).status_code == 410
    withdrawal = AuditEvent.objects.get(release=world.release, action="release_withdrawn")
    assert withdrawal.details["withdrawn_because"] == "dataset deleted"
    assert AuditEvent.objects.get(action="deletion").details["public_pages_withdrawn"] == 1
    again = switch(world.alice, world.release, True)
    assert again.status_code == 302 and Client().get(url).status_code == 410
    page = owner.get(reverse("release_detail", args=[world.release.pk])).content.decode()
    assert "withdrawn when the dataset was deleted" in page
    assert "Switch the public page on" not in page


def test_the_confirmation_page_says_nothing_of_pages_when_there_are_none(world):
    page = client_for(world.alice).get(reverse("dataset_delete", args=[world.dataset.pk]))
    assert page.status_code == 200 and b"public page" not in page.content


def test_a_page_whose_dataset_was_deleted_before_deletion_withdrew_pages_answers_410(world):
    """Datasets deleted by an earlier version left their pages switched on."""
    switch(world.alice, world.release, True)
    Dataset.objects.filter(pk=world.dataset.pk).update(deleted_at=timezone.now())
    gone = Client().get(reverse("public_release", args=[world.release.pk]))
    assert gone.status_code == 410 and b"was withdrawn" in gone.content
