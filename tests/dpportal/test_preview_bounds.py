"""Red team issue 13, item 8: one accuracy estimate must not hold a web worker for minutes.

The work of a range-count preview is counted (point x range evaluations of the incidence, the
step that grows with support and workload, and which plans are built), not timed; timing is in
benchmarks/preview_latency.py. The worst setting the form accepts (2 columns, 256 x 256 grid,
2,000 halfspaces, auto, delta > 0) must stay within mechanisms.plans.PREVIEW_WORK and
never build the halfspace decomposition; a release whose workload exceeds the job limit is
refused by the form. The broken twin (no cap) is caught by the same counter.
"""

import pytest
from django.urls import reverse

from dpportal.models import Release
from mechanisms import plans
from mechanisms.range_count import api, inputs
from tests.helpers import client_for, make_dataset, post_new_release

WORST = {
    "mechanism": "range_count",
    "columns": ["age", "hours-per-week"],
    "epsilon": "1",
    "delta": "0.000001",
    "range_workload": "halfspaces",
    "range_grid": "256",
    "range_queries": "2000",
    "range_method": "auto",
}


class TooMuchWork(Exception):
    pass


@pytest.fixture
def work(monkeypatch):
    """Counts incidence evaluations and plan builds; stops the preview once past the cap."""
    counted, cap = {"pairs": 0, "plans": []}, getattr(plans, "PREVIEW_WORK", 2**21)  # as shipped
    incidence, build_plan = inputs.incidence, api.build_plan

    def counting_incidence(support, queries, *args, **kwargs):
        counted["pairs"] += support.n * len(queries)
        if counted["pairs"] > cap:
            raise TooMuchWork(f"{counted['pairs']:,} point x range evaluations")
        return incidence(support, queries, *args, **kwargs)

    def counting_build(name, *args, **kwargs):
        counted["plans"].append(name)
        return build_plan(name, *args, **kwargs)

    monkeypatch.setattr(inputs, "incidence", counting_incidence)
    monkeypatch.setattr(api, "build_plan", counting_build)
    return counted


@pytest.fixture
def range_dataset(owner):
    return make_dataset(owner, delta_total="0.0001")


def test_the_worst_preview_the_form_accepts_does_bounded_work(owner, range_dataset, work):
    url = reverse("release_preview", args=[range_dataset.pk])
    result = client_for(owner).get(url, WORST).json()
    print(f"\nWorst preview: {work['pairs']:,} point x range evaluations, plans {work['plans']}")
    assert result["ok"], result
    assert 0 < work["pairs"] <= plans.PREVIEW_WORK
    assert "mn12" not in work["plans"]
    assert "an estimate, from 32 of the ranges drawn at random" in result["accuracy"][0]
    assert "at least this accurate" in result["accuracy"][0]


def test_a_small_preview_is_still_the_planners_exact_figure(owner, range_dataset, work):
    small = {**WORST, "range_grid": "16", "range_queries": "200"}
    result = client_for(owner).get(reverse("release_preview", args=[range_dataset.pk]), small)
    assert result.json()["ok"]
    assert work["pairs"] == 16 * 16 * 200  # the whole workload, once
    assert "mn12" in work["plans"]  # auto compared every candidate, as the release will
    assert "estimate" not in result.json()["accuracy"][0]


def test_a_named_method_too_large_to_preview_says_so(owner, range_dataset, work):
    named = {**WORST, "range_method": "mn12"}
    result = client_for(owner).get(reverse("release_preview", args=[range_dataset.pk]), named)
    assert "too large to preview" in " ".join(result.json()["accuracy"])
    assert work["plans"] == []


def test_the_form_refuses_a_workload_beyond_the_job_limit(owner, range_dataset):
    prefixes = {**WORST, "range_workload": "prefixes", "delta": ""}
    response = post_new_release(client_for(owner), range_dataset.pk, prefixes)
    assert "Intervals up to every grid point are 65,536 ranges here; at most 4,096" in (
        response.content.decode()
    )
    assert not Release.objects.exists()


def test_broken_twin_without_the_cap_is_caught(range_dataset, work, monkeypatch):
    import mechanisms

    monkeypatch.setattr(plans, "PREVIEW_WORK", 10**12)  # plan everything exactly
    schema = mechanisms.Schema.from_dict(range_dataset.schema)
    params = {"grid": [256, 256], "random_halfspaces": 2000, "mechanism": "auto"}
    with pytest.raises(TooMuchWork):
        plans.range_count_plan(
            mechanisms.PlanInputs(
                schema=schema,
                columns=["age", "hours-per-week"],
                params=params,
                epsilon=1.0,
                delta=1e-6,
                neighbouring="replace-one",
                n=range_dataset.row_count,
            )
        )
