"""Person-level releases in the portal: a schema with a person column and k, released through
the real release service; the results page and the package state the unit; only the owner sees
how many rows bounding dropped; the ID column is in no public file."""

import json

import pandas as pd
import pytest
from django.urls import reverse

from dpportal.models import Release
from dpportal.releases import packaging
from tests.helpers import (
    SMALL_ADULT,
    client_for,
    make_dataset,
    make_release,
    make_visits_dataset,
    run_now,
)

UNIT = "one person: all rows with the same visitor, at most 2 rows each"


@pytest.fixture
def person_release(owner, tmp_path):
    dataset = make_visits_dataset(owner, tmp_path)  # 3 rows per person, k = 2
    table = pd.read_csv(SMALL_ADULT)
    release = run_now(make_release(owner, dataset, params={"rows": 50}))
    people = -(-len(table) // 3)
    dropped = len(table) - 2 * people + (1 if len(table) % 3 == 1 else 0)
    return release, dropped


def test_a_person_level_release_states_its_unit_everywhere(owner, person_release):
    release, dropped = person_release
    guarantee = release.manifest["guarantee"]
    assert guarantee["unit"] == UNIT and guarantee["max_rows_per_person"] == 2
    assert guarantee["sensitivity"] == 4  # replace one person: 2k
    page = client_for(owner).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "Unit of privacy" in page and UNIT in page
    assert f"dropped {dropped:,} rows" in page  # the owner alone
    readme = packaging.package_file(release, "README.txt").decode()
    assert "all the rows of any one person" in " ".join(readme.split())
    package = packaging.package_files(release)
    text = [v for n, v in package.items() if n.endswith((".csv", ".json", ".txt", ".html"))]
    assert b"vis-" not in b"".join(package.values()) and text  # no ID value in any file
    assert "rows_dropped" not in json.dumps(release.manifest)


def test_others_see_the_unit_but_not_the_rows_dropped(person_release, a_minute_later):
    from tests.helpers import make_user

    release, dropped = person_release
    auditor = make_user("auditor2")
    release.dataset.auditors.add(auditor)
    page = client_for(auditor).get(reverse("release_detail", args=[release.pk])).content.decode()
    assert UNIT in page
    assert "dropped" not in page and f"{dropped:,}" not in page


PERSON_ROWS = [
    {"type": "numeric", "lower": "0", "upper": "120", "bins": "12"},
    {"type": "categorical", "categories": "F\nM\nX", "unknown": "reject"},
    {"type": "ignored"},
]


def test_the_schema_page_asks_about_persons_and_stores_the_keys(owner, tmp_path):
    from tests.helpers import SMALL_CSV, schema_post

    (tmp_path / "people.csv").write_bytes(SMALL_CSV)  # age, sex, city
    dataset = make_dataset(owner, schema=None, path=tmp_path / "people.csv", name="People")
    url = reverse("dataset_schema", args=[dataset.pk])
    client = client_for(owner)
    page = client.get(url).content.decode()
    assert "Can one person appear in several rows? Which column identifies them?" in page
    assert "Noise grows with this number" in page
    missing_k = client.post(url, {**schema_post(PERSON_ROWS), "person_column": "city"})
    assert missing_k.status_code == 400
    assert "Give the most rows one person may contribute" in missing_k.content.decode()
    data = {**schema_post(PERSON_ROWS), "person_column": "city", "max_rows_per_person": "1"}
    assert client.post(url, data).status_code == 302
    dataset.refresh_from_db()
    assert dataset.schema["max_rows_per_person"] == 1
    assert {"name": "city", "role": "person_id"} in dataset.schema["columns"]
    again = client.get(url).content.decode()  # the confirmed answer is shown again
    assert '<option value="city" selected>' in again


def test_a_mechanism_without_a_person_level_form_is_refused_on_the_form(owner, person_release):
    from tests.helpers import histogram_post, post_new_release

    release, _ = person_release
    dataset = release.dataset
    data = histogram_post(mechanism="smoothed_histogram", rows="20")
    response = post_new_release(client_for(owner), dataset.pk, data)
    assert "smoothed_histogram cannot protect persons" in response.content.decode()
    assert list(Release.objects.all()) == [release]  # refused before any budget was spent


def test_auditors_never_see_the_row_count_of_a_person_level_dataset(person_release):
    from dpportal.access.rules import facts_visible_to
    from tests.helpers import make_user

    dataset = person_release[0].dataset
    assert dataset.neighbouring == "replace-one"  # the row count would be public at row level
    auditor = make_user("auditor3")
    dataset.auditors.add(auditor)
    assert "row_count" not in facts_visible_to(auditor, dataset)
    page = client_for(auditor).get(reverse("dataset_detail", args=[dataset.pk])).content.decode()
    assert f"{dataset.row_count:,}" not in page


def test_the_dataset_page_describes_the_person_column(owner, person_release):
    dataset = person_release[0].dataset
    page = client_for(owner).get(reverse("dataset_detail", args=[dataset.pk])).content.decode()
    assert "identifies a person (at most 2 rows each are used); never released" in page
