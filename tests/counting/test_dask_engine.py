"""The dask counting engine counts a Parquet folder on a Dask cluster exactly as the in-process
engine does (issue 19: tables beyond one machine).

The cluster is the one DPPORTAL_DASK_SCHEDULER names (./test.sh starts one with two worker
processes, scripts/common.sh ensure_dask_cluster); run directly without it, the module starts a
LocalCluster of two worker processes itself.
"""

import os
import socket
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client

from mechanisms import Schema, counting
from mechanisms.counting import TableSource, count_cells, dask_engine
from mechanisms.counting.bounding import KEY, PERSON_ID, BoundedTally, row_key
from mechanisms.counting.dask_engine import (
    SCHEDULER_VARIABLE,
    add_counts,
    count_on_dask,
    plan_pieces,
    tally_piece,
)
from mechanisms.counting.tally import CellTally
from mechanisms.errors import MechanismError
from mechanisms.noise import seeded_source
from mechanisms.schema import CHUNK_ROWS

# One cluster per module: under pytest-xdist all its tests run on one worker.
pytestmark = pytest.mark.xdist_group("dask")

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 10, "bins": 5},
            {"name": "y", "type": "numeric", "lower": -1, "upper": 1, "bins": [-1, -0.5, 0, 1]},
            {"name": "c", "type": "categorical", "categories": ["a", "b", "7"]},
            {"name": "k", "type": "categorical", "categories": ["1", "2", "3"]},
            {"name": "n", "type": "numeric", "lower": 0, "upper": 100, "bins": 4},
        ]
    }
)
COLUMN_SETS = [["x", "c"], ["x", "y", "c", "k", "n"]]
BIG_ROWS = CHUNK_ROWS + 150_000  # one file of several pieces (row groups of 300,000 rows)


def frame(rows: int, seed: int, int_gaps: bool) -> pd.DataFrame:
    """Values outside the bounds (clamped), missing ones, undeclared categories, integers."""
    draw = np.random.default_rng(seed)  # test data only; mechanisms never see this generator
    x = draw.uniform(-3, 13, rows)
    x[draw.random(rows) < 0.05] = np.nan
    k = pd.array(draw.integers(0, 5, rows), dtype="Int64")  # 0 and 4 are not declared
    if int_gaps:
        k[draw.random(rows) < 0.1] = pd.NA
    return pd.DataFrame(
        {
            "x": x,
            "y": draw.uniform(-1.5, 1.5, rows),
            "c": pd.Series(draw.choice(["a", "b", "7", "zz", None], rows), dtype="str"),
            "k": k,
            "n": draw.integers(-20, 130, rows).astype(np.int32),  # integer numeric, clamped
        }
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> TableSource:
    """Five files: small ones with and without integer gaps, an empty one, a big one."""
    root = tmp_path_factory.mktemp("dask_parquet")
    sizes = [(1_000, True), (2_500, False), (0, True), (777, True)]
    for number, (rows, gaps) in enumerate(sizes):
        data = pa.Table.from_pandas(frame(rows, number, gaps), preserve_index=False)
        pq.write_table(data, root / f"part-{number}.parquet", row_group_size=400)
    big = pa.Table.from_pandas(frame(BIG_ROWS, 9, True), preserve_index=False)
    pq.write_table(big, root / "part-9.parquet", row_group_size=300_000)
    return TableSource(str(root))


@pytest.fixture(scope="module")
def scheduler():
    """The address of a running Dask cluster with two worker processes."""
    if os.environ.get(SCHEDULER_VARIABLE):
        yield os.environ[SCHEDULER_VARIABLE]
        return
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


@pytest.mark.parametrize("columns", COLUMN_SETS)
def test_counts_equal_the_in_process_engine(folder, scheduler, columns):
    reference = count_cells(folder, SCHEMA, columns, "inprocess")
    counts = count_on_dask(folder, SCHEMA, columns, scheduler=scheduler)
    assert reference.sum() == 1_000 + 2_500 + 777 + BIG_ROWS
    assert counts.dtype == np.int64 and np.array_equal(counts, reference)


def test_the_registered_engine_reads_the_variable(folder, scheduler, monkeypatch):
    monkeypatch.setenv(SCHEDULER_VARIABLE, scheduler)
    assert np.array_equal(
        count_cells(folder, SCHEMA, ["c", "k"], "dask"),
        count_cells(folder, SCHEMA, ["c", "k"], "inprocess"),
    )


def test_every_piece_matters(folder):
    """Twin: the plan covers the big file in several pieces, and losing any one piece (a
    reader that skips work) changes the counts the equality test compares."""
    columns = ["x", "y", "c", "k", "n"]
    pieces, arrow_schema = plan_pieces(folder, columns)
    tally = CellTally(SCHEMA.accepting(), tuple(columns))
    assert len([p for p in pieces if p.path.endswith("part-9.parquet")]) == 2
    parts = [tally_piece(p, source=folder, tally=tally, arrow_schema=arrow_schema) for p in pieces]
    reference = count_cells(folder, SCHEMA, columns, "inprocess")
    assert np.array_equal(add_counts(*parts), reference)
    for lost in range(len(parts)):
        if parts[lost].sum():
            kept = [p for j, p in enumerate(parts) if j != lost]
            assert not np.array_equal(add_counts(*kept), reference)


def test_a_release_from_counts_the_cluster_made(folder, scheduler, monkeypatch):
    if not hasattr(counting, "engine_table"):
        pytest.skip("mechanisms.counting.engine_table is not on this branch yet")
    from mechanisms import run_release

    monkeypatch.setenv(SCHEDULER_VARIABLE, scheduler)
    table = counting.engine_table(folder, "dask")
    output = run_release(
        "perturbed_histogram",
        table,
        SCHEMA,
        epsilon=1.0,
        columns=["x", "c"],
        params={"rows": 50},
        rng=seeded_source(7),
    )
    assert output.spent["epsilon"] <= 1.0 and output.files


def test_no_scheduler_is_refused_with_how_to_start_one(folder, monkeypatch):
    monkeypatch.delenv(SCHEDULER_VARIABLE, raising=False)
    with pytest.raises(MechanismError, match="dask scheduler.*DPPORTAL_DASK_SCHEDULER"):
        count_cells(folder, SCHEMA, ["x"], "dask")


def test_an_unreachable_scheduler_is_a_clear_error(folder):
    with socket.socket() as free:  # a port nothing listens on once closed
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(MechanismError, match=f"cannot reach the Dask scheduler.*:{port}"):
        count_on_dask(folder, SCHEMA, ["x"], scheduler=f"tcp://127.0.0.1:{port}", timeout=1)


def test_a_column_missing_from_the_files_is_named(folder, scheduler):
    schema = Schema.from_dict(
        {"columns": [{"name": "absent", "type": "categorical", "categories": ["a"]}]}
    )
    with pytest.raises(MechanismError, match="'absent'.*not in Parquet data"):
        count_on_dask(folder, schema, ["absent"], scheduler=scheduler)


def test_an_s3_folder_is_counted_as_in_process(folder, scheduler):
    """The workers read object storage (moto's S3 server) through the source's options."""
    from tests.object_storage import bucket_with, s3_server

    with s3_server() as endpoint:
        bucket = f"dask-{uuid.uuid4().hex[:12]}"
        parts = {
            f"table/part-{n}.parquet": Path(folder.location) / f"part-{n}.parquet"
            for n in (0, 1, 3)
        }
        options = bucket_with(endpoint, bucket, parts)
        source = TableSource(f"s3://{bucket}/table", storage_options=options)
        reference = count_cells(source, SCHEMA, ["x", "c", "k"], "inprocess")
        assert reference.sum() == 1_000 + 2_500 + 777
        counts = count_on_dask(source, SCHEMA, ["x", "c", "k"], scheduler=scheduler)
        assert np.array_equal(counts, reference)


@pytest.fixture
def paused_scheduler():
    """A cluster of one in-process worker that Dask's own memory monitor pauses: its limit
    (40 MB) is below the test process's memory, and nothing it holds can be spilled."""
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        memory_limit="40MB",
        dashboard_address=None,
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            for _ in range(100):
                if dask_engine._all_paused(client):
                    break
                time.sleep(0.1)
            assert dask_engine._all_paused(client), client.scheduler_info()["workers"]
        yield cluster.scheduler_address


def test_a_cluster_paused_for_memory_is_refused_in_words(folder, paused_scheduler, monkeypatch):
    """Every worker paused for PAUSED_SECONDS (1 s here): the count stops with words that say
    why and what to give the workers (before: it waited for the release's time limit)."""
    monkeypatch.setattr(dask_engine, "PAUSED_SECONDS", 1.0)
    monkeypatch.setattr(dask_engine, "POLL_SECONDS", 0.2)
    started = time.monotonic()
    with pytest.raises(MechanismError, match="paused for lack of memory .* more memory"):
        count_on_dask(folder, SCHEMA, ["x", "c"], scheduler=paused_scheduler)
    assert time.monotonic() - started < 30


def test_without_the_watch_a_paused_cluster_holds_the_count(folder, paused_scheduler, monkeypatch):
    """Broken twin: with the workers' pause unseen, the count is still waiting after 5 s (and
    would until the release's time limit); the test above would time out."""
    done = threading.Event()

    def unseen(client) -> bool:
        if done.is_set():  # the test is over: end the count before the cluster closes
            raise InterruptedError
        return False

    monkeypatch.setattr(dask_engine, "_all_paused", unseen)
    monkeypatch.setattr(dask_engine, "POLL_SECONDS", 0.2)
    outcome = []

    def count() -> None:
        try:
            outcome.append(count_on_dask(folder, SCHEMA, ["x", "c"], scheduler=paused_scheduler))
        except InterruptedError as stopped:
            outcome.append(stopped)

    waiting = threading.Thread(target=count)
    waiting.start()
    waiting.join(5)
    still_waiting = waiting.is_alive() and not outcome
    done.set()
    waiting.join(10)
    assert still_waiting, outcome


def person_folders(root: Path, files: int):
    """Three folders of `files` files of interleaved persons (3,000 rows, 400 IDs), one for each
    kind of ID: floats (NaN missing), texts and whole numbers (missing ones): each folder with
    its bounded tally (k = 2) and its rows per person."""
    draw = np.random.default_rng(5)
    rows = 3_000
    ids = draw.integers(0, 400, rows).astype(float)
    ids[draw.random(rows) < 0.05] = np.nan
    texts = pd.Series([None if np.isnan(i) else f"p{i:.0f}é" for i in ids], dtype=object)
    whole = pd.array([None if np.isnan(i) else int(i) for i in ids], dtype="Int64")
    bounded = BoundedTally(CellTally(SCHEMA.accepting(), ("x",)), "who", 2, "ab" * 16)
    for person in (ids, texts, whole):
        folder = root / str(pd.Series(person).dtype)
        folder.mkdir()
        table = pd.DataFrame({"x": draw.uniform(0, 10, rows), "who": person})
        for number, part in enumerate(np.array_split(np.arange(rows), files)):
            pq.write_table(pa.Table.from_pandas(table.iloc[part], preserve_index=False),
                           folder / f"part-{number}.parquet", row_group_size=500)  # fmt: skip
        yield TableSource(str(folder)), bounded, pd.Series(person).dropna().value_counts()


def test_person_ids_of_every_type_keep_the_rows_in_process_keeps(scheduler, tmp_path):
    """Person-level bounding on the cluster reads whole-number and text IDs as Arrow text and
    any other ID (here floats, NaN missing) as the reference writes it; each is equal to the
    in-process engine over three files of interleaved persons, and keeps min(rows, k) each.
    Twin: with the floats' NaN read as an ID ("nan"), the float case keeps too many rows."""
    for source, bounded, per_person in person_folders(tmp_path, 3):
        expected = counting.tally_table(source, bounded, "inprocess")
        assert expected.sum() == np.minimum(per_person, 2).sum()
        got = dask_engine.tally_on_dask(source, bounded, scheduler=scheduler)
        assert np.array_equal(got, expected), source.location


def test_persons_taken_in_rounds_keep_the_rows_in_process_keeps(scheduler, tmp_path, monkeypatch):
    """With rounds of 700 rows (ROUND_ROWS a worker), a table of 3,000 rows in 9 pieces is
    bounded in 5 rounds of 2 buckets, every piece holding rows of every round: for every kind
    of ID the tally is the in-process engine's (the k smallest keys of each person, min(rows,
    k) rows each). Twins caught: a round forgotten, the bits of earlier rounds dropped, k + 1
    rows kept in one round (docs/scale.md, "Person-level bounding on Dask in rounds")."""
    with Client(scheduler) as client:
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
    assert 700 % workers == 0, workers  # ./test.sh's cluster: two workers
    monkeypatch.setattr(dask_engine, "ROUND_ROWS", 700 // workers)
    asked = []
    kept_rows = dask_engine._kept_rows

    def recorded(*arguments):
        asked.append(arguments[-1])
        return kept_rows(*arguments)

    monkeypatch.setattr(dask_engine, "_kept_rows", recorded)
    for source, bounded, per_person in person_folders(tmp_path, 9):
        asked.clear()
        expected = counting.tally_table(source, bounded, "inprocess")
        assert expected.sum() == np.minimum(per_person, 2).sum()
        got = dask_engine.tally_on_dask(source, bounded, scheduler=scheduler)
        assert np.array_equal(got, expected), source.location
        assert asked == [dask_engine.Round(number, 5, 2) for number in range(5)]


def test_an_id_hashes_alike_wherever_it_is():
    """A text ID's hash (which picks its round and bucket) is that of its bytes, whatever its
    place in an array or a slice of one; whole numbers too. Twin: with the slice's offset
    ignored, the slice's hashes are those of the array's first texts."""
    texts = pa.array(["p1", "", "é", "p1", "p22", None, "p1"]).drop_null()
    hashes = dask_engine.id_hashes(texts)
    assert hashes[0] == hashes[3] == hashes[5] and len(set(hashes.tolist())) == 4
    assert np.array_equal(dask_engine.id_hashes(texts.slice(3)), hashes[3:])
    whole = pa.array([7, 12, 7], pa.int32())
    assert np.array_equal(dask_engine.id_hashes(whole.slice(1)), dask_engine.id_hashes(whole)[1:])


def test_keys_sharing_their_first_eight_bytes_are_ordered_by_the_whole_key():
    """A person's rows are sorted by their keys' first 8 bytes, and by the whole keys (of their
    positions) only when two share those: here two rows given the same first bytes keep the
    one whose whole key is smaller, though it comes second. Twin: without the whole-key sort,
    the first of the two is kept."""
    pieces = (
        dask_engine.Piece("f.parquet", (0,), 0, 5),
        dask_engine.Piece("g.parquet", (1,), 7, 5),
    )
    secret = "ef" * 16

    def key(place: tuple[int, int]) -> str:
        piece = pieces[place[0]]
        return row_key(secret, f"{piece.path}#{piece.first_row + place[1]}")

    second, first = sorted([(0, 3), (1, 2)], key=key)  # the smaller whole key second
    table = pa.table(
        {
            PERSON_ID: pa.array(["a", "a", "b"]),
            KEY: pa.array([5, 5, 1], pa.uint64()),
            dask_engine.PIECE: pa.array([first[0], second[0], 0], pa.int32()),
            dask_engine.ROW: pa.array([first[1], second[1], 9], pa.int64()),
        }
    )
    kept = dask_engine.merge_keys(table.slice(0, 1), table.slice(1), k=1, secret=secret,
                                  pieces=pieces)  # fmt: skip
    assert sorted(kept.column(dask_engine.ROW).to_pylist()) == sorted([second[1], 9])


def test_persons_in_a_file_of_several_pieces_keep_the_rows_in_process_keeps(folder, scheduler):
    """A key is that of the row's position in its file, not in its piece: the big file is read
    in several pieces, and the persons (the integer column n, 150 IDs) keep the in-process
    engine's rows. Twin: keys of the rows counted from their piece's first keep other rows."""
    assert len([p for p in plan_pieces(folder, ["n"])[0] if p.first_row]) >= 1
    bounded = BoundedTally(CellTally(SCHEMA.accepting(), ("x", "c")), "n", 3, "cd" * 16)
    expected = counting.tally_table(folder, bounded, "inprocess")
    got = dask_engine.tally_on_dask(folder, bounded, scheduler=scheduler)
    assert np.array_equal(got, expected)
