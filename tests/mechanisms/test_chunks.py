"""Counting mechanisms read a ChunkedTable with the same counts, noise calls and output as a
DataFrame (issue 8: releases encode in chunks, so memory does not grow with the row count)."""

import numpy as np
import pandas as pd
import pytest

from mechanisms import ChunkedTable, Schema, run_release
from mechanisms.errors import MechanismError
from mechanisms.noise import RecordingSource, seeded_source
from mechanisms.range_count.api import support_counts, support_from_schema

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {
                "name": "x",
                "type": "numeric",
                "lower": 0,
                "upper": 10,
                "bins": 5,
                "missing": "reject",
            },
            {"name": "y", "type": "numeric", "lower": -1, "upper": 1, "bins": [-1, -0.5, 0, 1]},
            {"name": "c", "type": "categorical", "categories": ["a", "b", "7"]},
            {"name": "k", "type": "categorical", "categories": ["1", "2"], "unknown": "reject"},
        ]
    }
)
ROWS = 2_000


def table(rows=ROWS, seed=3) -> pd.DataFrame:
    """Values outside the bounds (clamped), undeclared categories and missing ones ("(other)")."""
    draw = np.random.default_rng(seed)  # test data only; mechanisms never see this generator
    return pd.DataFrame(
        {
            "x": draw.uniform(-3, 13, rows),
            "y": draw.uniform(-1.5, 1.5, rows),
            "c": pd.Series(draw.choice(["a", "b", "7", "zz", None], rows), dtype="str"),
            "k": draw.integers(1, 3, rows),
        }
    )


def pieces(frame: pd.DataFrame, sizes) -> ChunkedTable:
    """The frame cut into consecutive chunks of the given sizes (0 allowed), then the rest."""
    bounds = np.cumsum([0, *sizes])
    cuts = [frame.iloc[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    return ChunkedTable([*cuts, frame.iloc[bounds[-1] :]])


SPLITS = [[1], [0, 7, 0, 500], [999, 1, 1000], [ROWS]]
RELEASES = [
    ("perturbed_histogram", ["x", "c"], {}, 0.0, "replace-one"),
    ("perturbed_histogram", ["x", "y", "c", "k"], {"rows": 300}, 0.0, "add-remove"),
    ("smoothed_histogram", ["y", "c"], {"rows": 200}, 0.0, "replace-one"),
    ("range_count", ["x", "y"], {"mechanism": "tree", "prefixes": True}, 0.0, "replace-one"),
    ("range_count", ["x", "y"], {"mechanism": "identity", "random_boxes": 5}, 1e-6, "add-remove"),
]


@pytest.mark.parametrize("sizes", SPLITS)
def test_cell_counts_from_chunks_equal_the_whole_table(sizes):
    frame = table()
    whole = SCHEMA.cell_counts(frame, ["x", "y", "c", "k"])
    chunked = SCHEMA.cell_counts(pieces(frame, sizes), ["x", "y", "c", "k"])
    assert whole.sum() == ROWS and np.array_equal(whole, chunked)
    support = support_from_schema(SCHEMA, ["x", "y"], {"grid": "4x3"})
    assert np.array_equal(
        support_counts(support, frame, ["x", "y"], SCHEMA),
        support_counts(support, pieces(frame, sizes), ["x", "y"], SCHEMA),
    )


def test_a_reader_that_loses_a_chunk_is_caught():
    """Twin: chunks whose last piece goes missing no longer match the whole table."""
    frame = table()
    lossy = ChunkedTable(list(pieces(frame, [999, 1]))[:-1])
    assert not np.array_equal(
        SCHEMA.cell_counts(frame, ["x", "c"]), SCHEMA.cell_counts(lossy, ["x", "c"])
    )


def recorded_run(spec, data):
    name, columns, params, delta, neighbouring = spec
    source = RecordingSource(seeded_source(11))
    output = run_release(
        name,
        data,
        SCHEMA,
        columns=columns,
        params=params,
        epsilon=0.7,
        delta=delta,
        neighbouring=neighbouring,
        rng=source,
    )
    return source.calls, output


@pytest.mark.parametrize("spec", RELEASES, ids=lambda s: f"{s[0]}-{'-'.join(s[1])}")
def test_chunked_releases_replay_the_same_noise_calls_and_output(spec):
    """Same seed: identical sequence of random draws (primitive, scale, size) and identical
    public files, so the same noise lands on the same counts."""
    frame = table()
    calls, output = recorded_run(spec, frame)
    assert calls, "every release draws from its random source"
    for sizes in SPLITS:
        chunked_calls, chunked = recorded_run(spec, pieces(frame, sizes))
        assert chunked_calls == calls
        assert chunked.files == output.files and chunked.manifest == output.manifest


def test_a_whole_table_mechanism_refuses_chunks():
    with pytest.raises(MechanismError, match=r"counting mechanism .* not 'mwem'"):
        run_release(
            "mwem",
            pieces(table(), [10]),
            SCHEMA,
            columns=["x", "c"],
            epsilon=1,
            params={"workload": "all-1way"},
        )


def test_a_chunked_table_is_read_once():
    data = pieces(table(), [10])
    SCHEMA.cell_counts(data, ["x"])
    with pytest.raises(RuntimeError, match="only once"):
        SCHEMA.cell_counts(data, ["x"])


def test_errors_name_the_row_in_the_whole_table():
    frame = table()
    frame.loc[1_500, "k"] = 5  # an undeclared value in a "reject" column, in the third chunk
    frame.loc[1_700, "x"] = np.nan
    for data in (frame, pieces(frame, [999, 1])):
        with pytest.raises(MechanismError, match=r"'k' has 1 values .*first on data row 1501"):
            SCHEMA.cell_counts(data, ["k"])
    with pytest.raises(MechanismError, match=r"'x' has 1 missing .*first on data row 1701"):
        SCHEMA.cell_counts(pieces(frame, [1_600]), ["x"])


@pytest.mark.parametrize(
    "values",
    [
        pd.Series(["a", None, "7", "A", " a", "b"], dtype="str"),
        pd.Series([7, 1, 7, -7], dtype="int64"),
        pd.Series([7.0, -0.0, float("nan"), 7.5]),
        pd.Series(["a", 7, 7.0, True, None], dtype=object),
    ],
    ids=["text", "integers", "floats", "mixed"],
)
def test_categories_match_each_value_as_text(values):
    """Text and integer columns are compared once per distinct value; the result equals
    comparing every value's text."""
    column = SCHEMA.column("c")
    expected = [
        ["a", "b", "7"].index(str(v)) if str(v) in ("a", "b", "7") else 3 if str(v) != "<NA>" else 4
        for v in values.astype("string").fillna("<NA>")  # 3: "(other)", 4: "(missing)"
    ]
    assert column.encode(values).tolist() == expected
