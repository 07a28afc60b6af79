"""A spend the preview warns against needs an explicit confirmation (issue 43 item 7).

The smoothed histogram's "98% of rows evenly spread: ask for fewer rows" sat beside a single
"Spend" button. Now each kind's warnings (`Kind.preview_warnings`) come with the preview, the
page shows them next to the button with a "Spend anyway" box, and the form refuses the spend
without the box ticked, whatever sends it (the page or the API); the preview itself needs no
confirmation."""

from django.urls import reverse

from dpportal.models import Release
from tests.dpportal.test_api import api, post_json, token_from_page
from tests.helpers import client_for, histogram_post, make_dataset, make_user, post_new_release

NOISY = histogram_post(epsilon="0.001")  # noise of ±thousands of rows over cells of about 70
QUIET = histogram_post()


def test_the_preview_warns_and_asks_for_nothing(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    url = reverse("release_preview", args=[dataset.pk])
    noisy = client_for(owner).get(url, NOISY).json()
    assert noisy["ok"] and len(noisy["warnings"]) == 1
    assert "large against an average combination" in noisy["warnings"][0]
    assert client_for(owner).get(url, QUIET).json()["warnings"] == []


def test_a_warned_spend_is_refused_until_confirmed(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    client = client_for(owner)
    refused = post_new_release(client, dataset.pk, NOISY)
    page = refused.content.decode()
    assert refused.status_code == 200 and not Release.objects.exists()
    assert "The expected accuracy warns: The typical error" in page
    assert "Nothing was spent. To make this release as it is, tick “Spend anyway”" in page
    assert '<section id="confirm-box" class="warning"' in page  # shown, not hidden
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == 0
    post_new_release(client, dataset.pk, {**NOISY, "confirm": "on"})
    assert Release.objects.count() == 1
    post_new_release(client, dataset.pk, QUIET)  # nothing to warn against: no box needed
    assert Release.objects.count() == 2


def test_the_api_refuses_a_warned_spend_without_confirm(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    client = api(token_from_page(owner))
    url = reverse("api_dataset_releases", args=[dataset.pk])
    body = {"mechanism": "perturbed_histogram", "columns": ["age", "sex"], "epsilon": "0.001"}
    refused = post_json(client, url, body, HTTP_IDEMPOTENCY_KEY="one")
    assert refused.status_code == 400
    assert 'send "confirm": true' in refused.json()["errors"]["confirm"][0]
    assert not Release.objects.exists()
    confirmed = post_json(client, url, {**body, "confirm": True}, HTTP_IDEMPOTENCY_KEY="two")
    assert confirmed.status_code == 201, confirmed.content


def test_the_smoothed_histogram_warns_of_evenly_spread_rows(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    post = {"mechanism": "smoothed_histogram", "columns": ["age", "sex", "education"],
            "epsilon": "0.05", "rows": "2000"}  # fmt: skip
    result = client_for(owner).get(reverse("release_preview", args=[dataset.pk]), post).json()
    assert result["ok"], result
    assert any("spread evenly over all cells" in w for w in result["warnings"])


def test_statistics_warn_when_an_interval_is_the_whole_range(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    post = {"mechanism": "statistics", "columns": ["age", "sex"], "epsilon": "0.1",
            "stats_kinds": ["count", "median"], "stats_quantiles": ""}  # fmt: skip
    result = client_for(owner).get(reverse("release_preview", args=[dataset.pk]), post).json()
    assert any("median of age is about the whole declared range" in w for w in result["warnings"])
