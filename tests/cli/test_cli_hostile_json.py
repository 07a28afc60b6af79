"""The command line's JSON and workload inputs refuse hostile documents in one line.

Found by a one-off fuzz of `range-query` and the files the command line reads: a bound that
is a word, an object, a ragged list or a whole number past 1.8e308 reached NumPy's float
conversion and ended in a traceback; so did a document nested a few thousand brackets deep
(Python's JSON reader raises RecursionError, not a JSON error) in a query, structure, schema,
workload or public-record file, and in the portal's API (tests/dpportal/test_api.py). true
was read as the bound 1.
"""

import json

import pytest

from mechanisms.__main__ import main
from mechanisms.errors import parsed_json

DEEP = "[" * 100_000 + "]" * 100_000
SCHEMA = {"columns": [{"name": "b", "type": "numeric", "lower": 0, "upper": 10, "bins": 4}]}


def interval(lo, hi) -> dict:
    return {"type": "interval", "lo": lo, "hi": hi}


@pytest.fixture(scope="module")
def structure(tmp_path_factory) -> str:
    """A range-count release's structure.json, made by the command line."""
    folder = tmp_path_factory.mktemp("release")
    (folder / "data.csv").write_text("b\n" + "".join(f"{k % 10}\n" for k in range(40)))
    (folder / "schema.json").write_text(json.dumps(SCHEMA))
    argv = ["range-count", "--input", str(folder / "data.csv"), "--schema"]
    argv += [str(folder / "schema.json"), "--epsilon", "1", "--seed", "1"]
    assert main([*argv, "--random-boxes", "3", "--out", str(folder / "out")]) == 0
    return str(folder / "out" / "structure.json")


QUERIES = {
    "a word": ([interval("a", 5)], "'lo' ('a') must be 1 finite numbers"),
    "true": ([interval(True, 5)], "'lo' (True) must be 1 finite numbers"),
    "an object": ([interval({"x": 1}, 5)], "must be 1 finite numbers"),
    "a ragged list": ([{"type": "box", "lo": [[0], 1], "hi": [5]}], "must be 1 finite numbers"),
    "10^400": ([interval(10**400, 10**401)], "'lo' (1000000"),
    "a halfspace's b of 10^400": (
        [{"type": "halfspace", "a": [1], "b": 10**400}],
        "b (1000000",
    ),
    "a halfspace's b of true": ([{"type": "halfspace", "a": [1], "b": True}], "b (True)"),
    "deep nesting": (DEEP, "nested too deeply"),
}


@pytest.mark.parametrize("case", list(QUERIES))
def test_a_hostile_range_query_exits_2_with_one_line(tmp_path, capsys, structure, case):
    query, message = QUERIES[case]
    path = tmp_path / "query.json"
    path.write_text(query if isinstance(query, str) else json.dumps(query))
    status = main(["range-query", "--structure", structure, "--query", str(path)])
    err = capsys.readouterr().err
    assert status == 2 and message in err and err.count("\n") == 1, err


def test_a_plain_range_query_is_still_answered(tmp_path, capsys, structure):
    path = tmp_path / "query.json"
    path.write_text(json.dumps([interval(0, 5), interval("1", 4)]))  # "1": a number as text
    assert main(["range-query", "--structure", structure, "--query", str(path)]) == 0
    assert capsys.readouterr().out.count("\n") == 3  # the header and two answers


@pytest.mark.parametrize("where", ["--schema", "--workload", "structure", "record"])
def test_deeply_nested_files_are_refused_as_bad_json(tmp_path, capsys, structure, where):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    (tmp_path / "data.csv").write_text("b\n1\n2\n")
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    query = tmp_path / "query.json"
    query.write_text(json.dumps([interval(0, 5)]))
    release = ["mwem", "--input", str(tmp_path / "data.csv"), "--epsilon", "1"]
    release += ["--out", str(tmp_path / "out")]
    schema = str(tmp_path / "schema.json")
    argv = {
        "--schema": [*release, "--schema", str(deep)],
        "--workload": [*release, "--schema", schema, "--workload", str(deep)],
        "structure": ["range-query", "--structure", str(deep), "--query", str(query)],
        "record": ["verify", str(tmp_path)],
    }[where]
    if where == "record":  # a record's two files, record.json the deep one
        (tmp_path / "record.json").write_text(DEEP)
        (tmp_path / "record.sig").write_text("not read before record.json")
    status = main(argv)
    captured = capsys.readouterr()
    err = captured.err + captured.out
    assert status in (1, 2) and "Traceback" not in err and "nested too deeply" in err, err


def test_parsed_json_reads_what_json_reads_and_names_deep_nesting():
    assert parsed_json('{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        parsed_json(DEEP)
