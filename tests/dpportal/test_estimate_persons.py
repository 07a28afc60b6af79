"""Issue 41 item 1 in the portal: "estimate for me" protects one person, as releases do.

The audit's table: 2,000 people with 2 rows each, and one person with 600 rows holding a
category no one else has and an income of 7e9. At row level (before the fix) that category was
found and the upper bound lifted to 1e10 almost surely (the category's threshold is 339 rows at
ε = 0.1, δ = 1e-7). Bounded to k = 2 rows per person, the person adds at most 2 rows: the
category is found with probability below δ, and the bounds (ε = 1, a 10% spend: 0.25 per row;
their scans stop where about 23 kept rows lie beyond, before noise) never reach its 2 rows.
Checked for a confirmed person-level schema (k = 2) and for a person column chosen on the schema
page but not yet confirmed; the release, ledger and audit log record the unit "one
person", the relation and the person-level sensitivity. The statistical test with its broken
twin is tests/mechanisms/test_public_bounds_persons.py.
"""

from decimal import Decimal

import numpy as np
import pandas as pd
import pytest
from django.urls import reverse

from dpportal import services
from dpportal.models import AuditEvent, BudgetLedgerEntry, Release
from mechanisms import public_bounds
from mechanisms.persons import PersonLevel
from tests.helpers import client_for, make_release, make_user, schema_post

pytestmark = pytest.mark.django_db

RARE = "Qzxv-one-person-canary"
UNIT_K2 = PersonLevel("pid", 2).unit()
EPSILON, DELTA = Decimal("0.1"), Decimal("1E-7")  # 1% of ε = 10, δ = 1e-5
BOUNDS_EPSILON = Decimal("1")  # the bounds' spend: 10% (at 1%, 0.025 per row, too little)


@pytest.fixture
def owner():
    return make_user("alice")


def audit_table(tmp_path):
    rng = np.random.default_rng(8)
    people = pd.DataFrame(
        {
            "pid": np.repeat([f"p{i}" for i in range(2000)], 2),
            "income": rng.lognormal(10, 0.5, 4000).round(2),
            "group": rng.choice(["Alpha", "Beta"], 4000),
        }
    )
    attacked = pd.DataFrame({"pid": ["target"] * 600, "income": [7e9] * 600, "group": [RARE] * 600})
    path = tmp_path / "people.csv"
    pd.concat([people, attacked], ignore_index=True).to_csv(path, index=False)
    return path


def person_dataset(owner, tmp_path, *, confirmed):
    dataset = services.dataset_create_from_path(
        owner=owner,
        name="People",
        source_path=audit_table(tmp_path),
        epsilon_total="10",
        delta_total="0.00001",
    )
    if not confirmed:
        return dataset
    return services.dataset_confirm_schema(
        dataset=dataset, user=owner, schema=schema(person="pid", k=2)
    )


def schema(person, k):
    columns = [
        {"name": "income", "type": "numeric", "lower": 0, "upper": 1e10, "bins": 10},
        {"name": "group", "type": "categorical", "categories": ["Alpha", "Beta"]},
    ]
    if person is None:
        return {"columns": [{"name": "pid", "type": "ignored"}, *columns]}
    return {
        "columns": [{"name": person, "role": "person_id"}, *columns],
        "max_rows_per_person": k,
    }


def estimate(client, dataset, index, kind, **person):
    """POST as the schema page's button does: the page's person question goes with it, and
    the bounds' spend (10%)."""
    data = {"estimate": f"{index}:{kind}", "spend_numeric": "10"}
    data |= {k: str(v) for k, v in person.items()}
    return client.post(
        reverse("dataset_dp_estimate", args=[dataset.pk]), data, HTTP_ACCEPT="application/json"
    )


def assert_person_level(dataset, release, kind, group=4):
    """The release, ledger and audit events record one person (k = 2, replace-one: g = 4)."""
    guarantee = release.manifest["guarantee"]
    assert guarantee["unit"] == UNIT_K2 and guarantee["neighbouring"] == "replace-one"
    assert guarantee["sensitivity"] == group and guarantee["max_rows_per_person"] == 2
    assert release.params["person_column"] == "pid" and release.params["max_rows_per_person"] == 2
    epsilon = BOUNDS_EPSILON if kind == "numeric" else EPSILON
    scale = release.manifest["result"]["noise_scale"]
    if kind == "numeric":  # the count noise of bounds_plan at epsilon / g, add-remove
        plan = public_bounds.bounds_plan(guarantee["per_row"]["epsilon"], "add-remove")
        assert scale == plan.query_scale and guarantee["per_row"]["neighbouring"] == "add-remove"
    else:
        assert scale == pytest.approx(group / float(epsilon))
    assert guarantee["per_row"]["epsilon"] <= float(epsilon) / group
    entry = BudgetLedgerEntry.objects.get(release=release)
    assert entry.epsilon == epsilon and entry.delta == (DELTA if kind == "categorical" else 0)
    for event in AuditEvent.objects.filter(release=release):
        assert event.details["unit"] == UNIT_K2 and event.details["sensitivity"] == group


@pytest.mark.parametrize("confirmed", [True, False], ids=["confirmed", "chosen-on-the-page"])
def test_estimates_bound_each_person_and_record_the_person_unit(owner, tmp_path, confirmed):
    dataset = person_dataset(owner, tmp_path, confirmed=confirmed)
    client = client_for(owner)
    page = {"person_column": "pid", "max_rows_per_person": 2}
    found = estimate(client, dataset, 2, "categorical", **page).json()
    assert found["ok"], found
    assert RARE not in found["categories"] and found["categories"] == ["Alpha", "Beta"]
    bounds = estimate(client, dataset, 1, "numeric", **page).json()
    # Not lifted to 1e10 or beyond, as at row level (300/300 runs): bounded to 2 rows, the target
    # lies far below the scan's threshold. In 1,000 runs of mechanisms.public_bounds.
    # estimate_column on this table at this spend (issue 43) the upper bound was 1e10 or more in
    # none, above 1e6 in 5.
    assert bounds["ok"] and (bounds["upper"] or 0) < 1e10, bounds
    for kind in ("categorical", "numeric"):
        release = Release.objects.get(dataset=dataset, params__kind=kind)
        assert_person_level(dataset, release, kind)


def test_a_confirmed_schema_is_used_when_the_post_carries_no_person_question(owner, tmp_path):
    dataset = person_dataset(owner, tmp_path, confirmed=True)
    found = estimate(client_for(owner), dataset, 2, "categorical").json()
    assert found["ok"] and RARE not in found["categories"]
    assert_person_level(dataset, Release.objects.get(dataset=dataset), "categorical")


def test_the_person_column_is_never_estimated(owner, tmp_path):
    dataset = person_dataset(owner, tmp_path, confirmed=False)
    answer = estimate(client_for(owner), dataset, 0, "categorical", person_column="pid", **{
        "max_rows_per_person": 2})  # fmt: skip
    assert answer.status_code == 400 and "identifies a person" in answer.json()["error"]
    assert not Release.objects.exists()


def test_a_bad_k_on_the_page_gets_a_clear_message_and_spends_nothing(owner, tmp_path):
    dataset = person_dataset(owner, tmp_path, confirmed=False)
    answer = estimate(client_for(owner), dataset, 1, "numeric", person_column="pid")
    assert answer.status_code == 400 and "most rows one person" in answer.json()["error"]
    assert not Release.objects.exists() and not BudgetLedgerEntry.objects.exists()


def test_the_person_column_cannot_change_after_an_estimate(owner, tmp_path):
    """Safe rule: the spent budget protected people identified by pid; a later estimate or a
    confirmed schema with another answer is refused (nothing spent), k may change."""
    dataset = person_dataset(owner, tmp_path, confirmed=False)
    client = client_for(owner)
    assert estimate(client, dataset, 1, "numeric", person_column="pid", max_rows_per_person=2)
    row_level = estimate(client, dataset, 2, "categorical", person_column="")
    assert row_level.status_code == 400
    assert "identified by the column 'pid'" in row_level.json()["error"]
    assert Release.objects.count() == 1
    with pytest.raises(services.ServiceError, match="identify people the same way"):
        services.dataset_confirm_schema(dataset=dataset, user=owner, schema=schema(None, 0))
    confirmed = services.dataset_confirm_schema(
        dataset=dataset, user=owner, schema=schema("pid", 3)
    )
    assert confirmed.schema["max_rows_per_person"] == 3
    with_k3 = estimate(
        client, dataset, 2, "categorical", person_column="pid", max_rows_per_person=3
    )
    assert with_k3.json()["ok"]


def test_the_schema_page_posts_its_person_question_with_every_estimate(owner, tmp_path):
    dataset = person_dataset(owner, tmp_path, confirmed=False)
    client = client_for(owner)
    url = reverse("dataset_schema", args=[dataset.pk])
    text = client.get(url).content.decode()
    action = reverse("dataset_dp_estimate", args=[dataset.pk])
    assert f'formaction="{action}"' in text and 'id="estimate-form"' not in text
    # Without the script the button submits the schema form itself, person question included.
    rows = [{"type": "ignored"}, {"type": "numeric"}, {"type": "categorical"}]
    posted = schema_post(rows) | {"person_column": "pid", "max_rows_per_person": "2"}
    posted["spend_numeric"] = "10"  # the spend chosen on the page goes with it too
    answer = client.post(action, posted | {"estimate": "1:numeric"})
    assert answer.status_code == 302
    assert_person_level(dataset, Release.objects.get(dataset=dataset), "numeric")
    shown = client.get(url).content.decode()  # the page keeps the answer the estimate used
    assert '<option value="pid" selected>' in shown


def test_after_a_release_read_the_data_the_person_column_stays(owner, tmp_path):
    """The same rule for releases: one that read the data protected people as the confirmed
    schema identified them, so re-confirming with another person column (or none) is refused;
    the same column with another k is accepted."""
    dataset = person_dataset(owner, tmp_path, confirmed=True)
    release = make_release(owner, dataset, columns=["group"], params={})
    release.data_was_read = True
    release.save(update_fields=["data_was_read"])
    with pytest.raises(services.ServiceError, match="A release or estimate of this dataset"):
        services.dataset_confirm_schema(dataset=dataset, user=owner, schema=schema(None, 0))
    again = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=schema("pid", 5))
    assert again.schema["max_rows_per_person"] == 5
