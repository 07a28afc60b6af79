"""Workloads as JSON: expansion of marginals, datacubes, ranges, boxes and mixes; clear errors."""

import json
import math

import pytest

from mechanisms.errors import MechanismError
from mechanisms.noise import seeded_source
from mechanisms.workload import (
    Query,
    expand_workload,
    load_workload,
    marginals_spec,
    random_boxes_spec,
    random_marginals_spec,
)

COLUMNS = ["age", "sex", "race", "hours"]
SHAPE = (5, 2, 3, 4)
ORDERED = {"age", "hours"}


def expand(spec):
    return expand_workload(spec, COLUMNS, SHAPE, ORDERED)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_it_expands_all_k_way_marginals(k):
    queries = expand(marginals_spec(k))
    assert len(queries) == math.comb(4, k)
    assert all(q.box is None and len(q.attrs) == k for q in queries)


def test_it_expands_chosen_subsets_in_column_order():
    queries = expand({"queries": [{"type": "marginals", "subsets": [["race", "age"], ["sex"]]}]})
    assert queries == [Query((0, 2)), Query((1,))]
    assert queries[0].cells(SHAPE) == 15


def test_a_datacube_holds_every_marginal_up_to_its_size():
    queries = expand({"queries": [{"type": "datacube", "max_size": 2}]})
    assert len(queries) == 4 + 6


def test_ranges_are_every_interval_of_an_ordered_column():
    queries = expand({"queries": [{"type": "ranges", "column": "age"}]})
    assert len(queries) == 5 * 6 // 2
    assert Query((0,), ((1, 3),)) in queries
    assert all(q.cells(SHAPE) == 1 for q in queries)


def test_boxes_and_a_mix_are_deduplicated():
    spec = {
        "queries": [
            {"type": "boxes", "columns": ["hours", "age"], "boxes": [[[0, 1], [2, 4]]]},
            {"type": "marginals", "k": 1},
            {"type": "marginals", "subsets": [["sex"]]},
        ]
    }
    queries = expand(spec)
    assert len(queries) == 1 + 4
    # columns are sorted to schema order; each range stays with its column
    assert queries[0] == Query((0, 3), ((2, 4), (0, 1)))
    assert queries[0].describe(COLUMNS) == {
        "type": "box",
        "columns": ["age", "hours"],
        "bins": [[2, 4], [0, 1]],
    }


@pytest.mark.parametrize(
    "spec, message",
    [
        ({}, r"workload \(\{\}\) must be an object with a non-empty 'queries' list"),
        ({"queries": [{"type": "cubes"}]}, r"workload entry \(\{\"type\": \"cubes\"\}\)"),
        ({"queries": [{"type": "marginals", "k": 5}]}, r"marginals k \(5\) must be an integer"),
        ({"queries": [{"type": "marginals", "subsets": [["zip"]]}]}, r"column \('zip'\) is not"),
        ({"queries": [{"type": "ranges", "column": "sex"}]}, r"column \('sex'\) is not an ordered"),
        (
            {"queries": [{"type": "boxes", "columns": ["age"], "boxes": [[[3, 9]]]}]},
            r"box range \(\[3, 9\]\) must be \[lo, hi\] with 0 <= lo <= hi < 5",
        ),
        ({"queries": [{"type": "marginals", "subsets": [["age", "age"]]}]}, r"repeat a column"),
    ],
)
def test_bad_workloads_get_a_one_line_message_quoting_the_value(spec, message):
    with pytest.raises(MechanismError, match=message):
        expand(spec)


def test_load_workload_reads_json_and_explains_bad_files(tmp_path):
    good = tmp_path / "w.json"
    good.write_text(json.dumps(marginals_spec(2)))
    assert load_workload(good) == marginals_spec(2)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(MechanismError, match=r"workload file \(.*bad.json\) is not valid JSON"):
        load_workload(bad)
    with pytest.raises(MechanismError, match="cannot be read"):
        load_workload(tmp_path / "missing.json")


def test_random_marginals_are_distinct_valid_and_reproducible():
    columns = [f"b{i}" for i in range(30)]
    spec = random_marginals_spec(columns, 3, 200, seeded_source(4))
    assert spec == random_marginals_spec(columns, 3, 200, seeded_source(4))
    queries = expand_workload(spec, columns, (2,) * 30, set())
    assert len(queries) == 200 and all(len(q.attrs) == 3 for q in queries)


def test_random_boxes_lie_inside_the_domain():
    spec = random_boxes_spec(["age", "hours"], [5, 4], 50, seeded_source(1))
    queries = expand(spec)
    assert 1 <= len(queries) <= 50
    for q in queries:
        assert all(0 <= lo <= hi < SHAPE[a] for a, (lo, hi) in zip(q.attrs, q.box, strict=True))
