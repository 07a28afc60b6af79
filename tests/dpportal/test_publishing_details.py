"""The owner's publishing details (issue 43 item 8): a title, publisher, contact and note set
on the dataset page, shown on every public page of its releases and in each package (report,
README.txt); a change reaches pages and packages already made. Only the owner may set them."""

import io
import re
import zipfile

import pytest
from django.test import Client
from django.urls import reverse

from tests.helpers import client_for

pytestmark = pytest.mark.django_db

DETAILS = {
    "publish_title": "Adults by age and work, census sample",
    "publisher": "Office of Statistics",
    "publish_contact": "stats@example.org",
    "publish_note": "A 2,000-row sample of the 1994 census.\r\n\r\nCite as: OS (2026).",
}


def _set(user, dataset, details):
    return client_for(user).post(reverse("dataset_publishing", args=[dataset.pk]), details)


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_only_the_owner_sets_them_and_the_dataset_page_offers_them_to_the_owner(world):
    page = client_for(world.alice).get(reverse("dataset_detail", args=[world.dataset.pk]))
    assert 'name="publish_title"' in page.content.decode()
    auditor_page = client_for(world.carol).get(reverse("dataset_detail", args=[world.dataset.pk]))
    assert 'name="publish_title"' not in auditor_page.content.decode()
    for user in (world.carol, world.bob):
        assert _set(user, world.dataset, DETAILS).status_code == 404
    world.dataset.refresh_from_db()
    assert world.dataset.publisher == ""
    assert _set(world.alice, world.dataset, DETAILS).status_code == 302
    world.dataset.refresh_from_db()
    assert world.dataset.publish_title == DETAILS["publish_title"]
    assert (
        world.dataset.publish_note
        == "A 2,000-row sample of the 1994 census.\n\nCite as: OS (2026)."  # \r\n as \n
    )


def test_the_public_page_and_the_package_show_them_and_follow_a_change(world):
    release = world.release
    client_for(world.alice).post(reverse("release_public", args=[release.pk]), {"public": "1"})
    url = reverse("public_release", args=[release.pk])
    before = Client().get(url).content.decode()
    assert f"<h1>Differentially private release {release.pk}</h1>" in before
    assert _set(world.alice, world.dataset, DETAILS).status_code == 302
    page = Client().get(url).content.decode()
    assert "<h1>Adults by age and work, census sample</h1>" in page
    text = _text(page)
    assert f"Release {release.pk} ·" in text
    assert "Published by Office of Statistics. Contact: stats@example.org." in text
    assert "<p>Cite as: OS (2026).</p>" in page
    owner = client_for(world.alice)
    zipped = owner.get(reverse("release_download_zip", args=[release.pk]))
    with zipfile.ZipFile(io.BytesIO(b"".join(zipped.streaming_content))) as archive:
        readme = archive.read(f"release-{release.pk}/README.txt").decode()
    assert readme.startswith("Adults by age and work, census sample\n")
    assert "Published by Office of Statistics." in readme
    _set(world.alice, world.dataset, {**DETAILS, "publisher": "Another Office"})
    assert "Published by Another Office." in _text(Client().get(url).content.decode())
