"""The risk in words (issue 46 item 2) where the portal shows it: the new-release form's preview
(before anything is spent), the API's estimate and release, the public page and the package's
README.txt and report.html.

Every number expected is computed from the formula p1 = e^eps p0 / (1 - p0 + e^eps p0) by
tests.mechanisms.test_risk (60-digit decimals), for the epsilon the test requested.
"""

import re
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from dpportal import services
from dpportal.models import Release
from tests.conftest import RAW_CANARIES
from tests.dpportal.test_api import api, token_from_page
from tests.dpportal.test_release_range_count import range_post
from tests.helpers import (
    client_for,
    histogram_post,
    make_dataset,
    make_release,
    make_visits_dataset,
)
from tests.mechanisms.test_risk import expected_percent, expected_posterior

pytestmark = [pytest.mark.database, pytest.mark.django_db]

PRIORS = (0.01, 0.1, 0.5)
ROW_PROPERTY = "a given row has some property (a value in one of its columns)"
TOTAL = "all releases of this dataset together"


def shown_table(epsilon: float) -> list[list[str]]:
    """[before, at most after] per prior, as the formula gives them."""
    return [
        [expected_percent(Decimal(str(p))), expected_percent(expected_posterior(epsilon, p))]
        for p in PRIORS
    ]


def sentence(epsilon: float, prior: float, event: str, claim: str) -> str:
    before, after = shown_table(epsilon)[PRIORS.index(prior)]
    return f"Someone who was {before} sure, before {event}, that {claim} is at most {after} sure"


def assert_risk(part: dict, epsilon: float, delta: str, unit: str, neighbouring: str):
    assert (part["delta"], part["unit"], part["neighbouring"]) == (delta, unit, neighbouring)
    assert [row["shown"] for row in part["table"]] == shown_table(epsilon)
    for row, prior in zip(part["table"], PRIORS, strict=True):
        assert row["prior"] == prior
        assert row["posterior_at_most"] == pytest.approx(
            float(expected_posterior(epsilon, prior)), rel=1e-12
        )


def test_the_form_preview_states_the_risk_of_the_release_and_the_total_after_it(owner, dataset):
    make_release(owner, dataset, epsilon="0.5")  # the dataset has spent 0.5 of its 1
    spent = dataset.epsilon_spent
    result = (
        client_for(owner)
        .get(reverse("release_preview", args=[dataset.pk]), histogram_post(epsilon="0.25"))
        .json()
    )
    assert result["ok"], result
    risk = result["risk"]
    assert_risk(risk["release"], 0.25, "0", "row", "replace-one")
    assert_risk(risk["dataset_total"], 0.75, "0", "row", "replace-one")  # 0.5 + 0.25
    assert risk["release"]["sentences"][1].startswith(
        sentence(0.25, 0.1, "this release", ROW_PROPERTY)
    )
    assert risk["dataset_total"]["sentences"][2].startswith(
        sentence(0.75, 0.5, TOTAL + " (this one included)", ROW_PROPERTY)
    )
    assert "number of rows is public" in risk["release"]["sentences"][3]
    assert risk["release"]["sentences"][-1].startswith("These bounds always hold (delta = 0)")
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == spent and Release.objects.count() == 1  # nothing spent
    page = client_for(owner).get(reverse("release_new", args=[dataset.pk])).content.decode()
    assert "expected accuracy and risk" in page


def test_the_api_estimate_states_a_person_level_risk(owner, tmp_path):
    visits = make_visits_dataset(owner, tmp_path)
    services.dataset_change_budget(
        dataset=visits, user=owner, epsilon_total=2, delta_total=0, neighbouring="add-remove"
    )
    query = {"mechanism": "perturbed_histogram", "columns": ["age"], "epsilon": "1"}
    response = api(token_from_page(owner)).get(
        reverse("api_dataset_preview", args=[visits.pk]), query
    )
    assert response.status_code == 200, response.content
    release = response.json()["risk"]["release"]
    assert_risk(release, 1.0, "0", "person", "add-remove")
    claim = "a given person is in the table"
    assert release["sentences"][0].startswith(sentence(1.0, 0.01, "this release", claim))
    assert not any("property" in line for line in release["sentences"])


def test_the_preview_states_what_delta_means(owner):
    dataset = make_dataset(owner, delta_total="0.00001")
    result = (
        client_for(owner)
        .get(reverse("release_preview", args=[dataset.pk]), range_post(epsilon="2"))
        .json()
    )
    assert result["ok"], result
    for part in (result["risk"]["release"], result["risk"]["dataset_total"]):
        assert_risk(part, 2.0, "0.000001", "row", "replace-one")
        assert part["sentences"][-1].startswith(
            "With a probability of at most delta = 0.000001 these bounds may not hold"
        )


def test_the_api_release_states_its_risk_and_the_datasets_total(world):
    make_release(world.alice, world.dataset, epsilon="0.25")  # the total is now 0.75
    data = api(token_from_page(world.alice)).get(
        reverse("api_release_detail", args=[world.release.pk])
    )
    risk = data.json()["risk"]
    assert_risk(risk["release"], 0.5, "0", "row", "replace-one")
    assert_risk(risk["dataset_total"], 0.75, "0", "row", "replace-one")
    assert risk["dataset_total"]["sentences"][0].startswith(
        sentence(0.75, 0.01, TOTAL, ROW_PROPERTY)
    )
    assert set(risk["release"]) == {
        "epsilon",
        "delta",
        "unit",
        "neighbouring",
        "table",
        "sentences",
    }
    assert not any(value in repr(risk) for value in RAW_CANARIES.values())


def test_the_public_page_readme_and_report_state_the_risk(world):
    client_for(world.alice).post(
        reverse("release_public", args=[world.release.pk]), {"public": "1"}
    )
    anonymous = Client()
    page = anonymous.get(reverse("public_release", args=[world.release.pk])).content.decode()
    readme = anonymous.get(reverse("public_release_file", args=[world.release.pk, "README.txt"]))
    report = anonymous.get(reverse("public_release_file", args=[world.release.pk, "report.html"]))
    for text in (page, readme.content.decode(), report.content.decode()):
        flat = " ".join(re.sub(r"<[^>]+>", " ", text).split()).replace("&#x27;", "'")
        for prior in PRIORS:  # the release (0.5) and the dataset's total (its one release)
            assert sentence(0.5, prior, "this release", ROW_PROPERTY) in flat
            assert sentence(0.5, prior, TOTAL, ROW_PROPERTY) in flat
        assert "These bounds always hold (delta = 0)" in flat
        assert not any(value in flat for value in RAW_CANARIES.values())
