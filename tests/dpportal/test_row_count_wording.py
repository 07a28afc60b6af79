"""Issue 41 item 5b: the dataset page explains a hidden row count with the right reason.

On a replace-one dataset with a person column the auditor does not see the number of rows (it
is private there), and the page said it was hidden "under add or remove one row", which is not
this dataset's relation. It now names the person column as the reason, and the relation's hint
says what "replace one" protects at person level.
"""

import html
import re

import pytest
from django.urls import reverse

from tests.helpers import client_for, make_dataset, make_user, make_visits_dataset

pytestmark = pytest.mark.django_db


def rows_line(page: str) -> str:
    found = re.search(r"<dt>Rows</dt><dd>(.*?)</dd>", page, re.S)
    assert found, "the summary has a Rows line"
    return html.unescape(found.group(1))


def detail_page(user, dataset) -> str:
    response = client_for(user).get(reverse("dataset_detail", args=[dataset.pk]))
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def test_a_person_level_replace_one_dataset_gives_the_person_reason(owner, tmp_path):
    dataset = make_visits_dataset(owner, tmp_path)
    assert dataset.neighbouring == "replace-one"
    auditor = make_user("auditor-5b")
    dataset.auditors.add(auditor)
    page = detail_page(auditor, dataset)
    line = rows_line(page)
    assert "with a person column" in line and "add or remove" not in line
    assert f"{dataset.row_count:,}" not in line and str(dataset.row_count) not in line
    assert "the number of rows may be published" not in page
    assert "“replace one” means one person" in page


def test_without_a_person_column_the_wording_follows_the_relation(owner):
    dataset = make_dataset(owner)
    auditor = make_user("auditor-5b")
    dataset.auditors.add(auditor)
    assert rows_line(detail_page(auditor, dataset)) == f"{dataset.row_count:,}"  # public here
    budget = dataset.budget
    budget.neighbouring = "add-remove"
    budget.save()
    dataset.refresh_from_db()
    assert "under “add or remove one row”" in rows_line(detail_page(auditor, dataset))
