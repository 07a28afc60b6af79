"""The statistics preview (issue 43 item 5): each statistic's expected interval by group size,
how often a group of each size is published at all (a group whose noisy count does not show
rows is withheld: `mechanisms.statistics.support`), the missing values the upload counted
(owner-only) and what a per-row ε means at person level."""

import re

import pandas as pd
from django.urls import reverse

from tests.helpers import (
    DEMO_SCHEMA,
    SMALL_ADULT,
    client_for,
    make_dataset,
    make_user,
    make_visits_dataset,
)

POST = {
    "mechanism": "statistics",
    "columns": ["age", "hours-per-week", "sex"],
    "epsilon": "0.8",
    "stats_kinds": ["count", "mean", "median"],
    "stats_quantiles": "",
}


def _estimate(client, dataset, post=POST):
    result = client.get(reverse("release_preview", args=[dataset.pk]), post).json()
    assert result["ok"], result
    return result["accuracy"], result["accuracy_table"]["rows"]


def _number(text):
    return float(re.search(r"±([\d,.]+)", text).group(1).replace(",", ""))


def test_the_preview_gives_each_interval_by_group_size_and_which_groups_are_withheld(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    lines, rows = _estimate(client_for(owner), dataset)
    rule = next(line for line in lines if "too few rows to publish" in line)
    assert "mean of age, mean of hours-per-week: above 155 (its own noisy count)" in rule
    assert "median of age, median of hours-per-week: above 78 (the noisy count of rows" in rule
    mean_age = [r for r in rows if r["output"].startswith("mean of age, a group of ")]
    sizes = [int(r["output"].rsplit(" ", 2)[1].replace(",", "")) for r in mean_age]
    assert sizes == sorted(sizes) and 667 in sizes and min(sizes) <= 30
    half = {
        s: _number(r["within"]) for s, r in zip(sizes, mean_age, strict=True) if "±" in r["within"]
    }
    assert half[667] == _number(next(line for line in lines if line.startswith("mean of age")))
    assert half[300] > 2 * half[667]  # small groups: wider, as 1 / size
    notes = {s: r["note"] for s, r in zip(sizes, mean_age, strict=True)}
    assert notes[min(sizes)] == "withheld: too few rows to publish"
    assert notes[667] == "published"
    assert "published in about" in notes[100]
    median = next(r for r in rows if r["output"].startswith("median of age, a group of 667"))
    assert median["within"] == "interval: the whole declared range"  # at this ε: say so


def test_the_preview_counts_the_missing_values_it_leaves_out(db, tmp_path):
    """hours-per-week with every 10th value blank: the owner's preview names the 200 blanks the
    upload counted and widens that mean's interval by 2,000 / 1,800 (a group of the average
    size holds 10% fewer values)."""
    table = pd.read_csv(SMALL_ADULT)
    table["hours-per-week"] = table["hours-per-week"].astype("Int64")
    table.loc[table.index % 10 == 0, "hours-per-week"] = pd.NA
    path = tmp_path / "adult_missing.csv"
    table.to_csv(path, index=False)
    columns = [
        {**c, "missing": "cell"} if c["name"] == "hours-per-week" else c
        for c in DEMO_SCHEMA["columns"]
    ]
    owner = make_user("owner")
    client = client_for(owner)
    complete = make_dataset(owner)
    blanks = make_dataset(owner, schema={**DEMO_SCHEMA, "columns": columns}, path=path)
    lines, _ = _estimate(client, blanks)
    assert any("Your upload had 200 in hours-per-week (of 2,000 rows" in line for line in lines)
    mean = next(line for line in lines if line.startswith("mean of hours-per-week"))
    plain = next(
        line for line in _estimate(client, complete)[0] if line.startswith("mean of hours-")
    )
    assert _number(mean) / _number(plain) > 1.1  # 2,000 / 1,800 rows, and the missing cell


def test_person_level_says_what_the_small_epsilon_per_statistic_is(db, tmp_path):
    owner = make_user("owner")
    visits = make_visits_dataset(owner, tmp_path, k=2)
    lines, _ = _estimate(client_for(owner), visits)
    # 0.8 / 5 / (2 × 2) per row, beside what a person's rows get together, and the reason
    # straight after the statistics' lines (a newcomer read the per-row ε alone as unexplained)
    count = next(i for i, line in enumerate(lines) if line.startswith("count: ε = 0.04 per row"))
    assert lines[count].startswith("count: ε = 0.04 per row (0.16 per person),")
    person = next(line for line in lines if line.startswith("Each ε above is per row"))
    assert lines.index(person) == count + sum(1 for line in lines if ": ε = " in line)
    assert "up to 2 rows, so replacing one person changes up to 4 rows" in person
    assert "count gets 4 × 0.04 = 0.16 for a person's rows together" in person


def test_the_preview_skips_a_quantiles_interval_where_the_release_does(monkeypatch):
    """The preview of a median of ages at ε = 1 under add/remove (no count asked: its
    selections get 75% of it after its own count; the ends' margin M about 97 rows of rank)
    for groups of 10 to 3,000 values: "the whole declared range", and the estimate's noise
    scale at the selections' whole ε, exactly for the sizes where the release skips the
    interval's pick given that many rows (`quantiles.ends_skipped`: up to about 390 values),
    the rank margin as percentile points and the scale at 75% of that above them. Twin: the
    preview's rule before (the whole range only where M reaches past both ends, share >= 1/2),
    which promised an interval to groups of 195 to 390 values that get the declared range."""
    from dpportal.releases.kinds.statistics import portal
    from mechanisms.release_request import PlanInputs
    from mechanisms.schema import Schema
    from mechanisms.statistics import quantiles, statistics_plan

    schema = Schema.from_dict(DEMO_SCHEMA)
    inputs = PlanInputs(schema=schema, columns=["age"], params={"stat": ["median:age"]},
                        epsilon=1.0, delta=0.0, neighbouring="add-remove", n=2_000)  # fmt: skip
    record = statistics_plan(inputs).details["statistics"][0]
    piece, spec = record["by_size"][0]["epsilon"], schema.column("age")
    assert piece == 0.75

    def preview(size):
        return portal.within(record, size) == "interval: the whole declared range"

    sizes = [10, 100, 300, 380, 400, 1_000, 3_000]
    release = [quantiles.ends_skipped(spec, 0.5, piece, "add-remove", s) for s in sizes]
    assert release == [True] * 4 + [False] * 3
    assert [preview(s) for s in sizes] == release
    whole = quantiles.rank_scale(0.5, piece, "add-remove")
    for entry in record["by_size"]:
        skipped = quantiles.ends_skipped(spec, 0.5, piece, "add-remove", entry["size"])
        assert (entry["noise_scale"] == whole) is skipped, entry

    def past_both_ends(alpha, half, values):
        return half / values >= max(alpha, 1 - alpha)

    monkeypatch.setattr(portal.mechanisms.statistics, "margin_reaches", past_both_ends)
    assert [preview(s) for s in sizes] != release
