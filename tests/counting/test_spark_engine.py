"""The spark counting engine on a real Spark cluster (issue 45 item 2).

The cluster is the one DPPORTAL_SPARK_REMOTE names: ./test.sh starts a standalone master, two
workers and a Spark Connect server on 127.0.0.1 (scripts/common.sh ensure_spark_cluster); run
directly without it, the tests that need a cluster are skipped, saying so. Every kind on every
engine, the hostile tables and the edge values run on Spark through the shared
parametrisations (tests/counting/test_counting_engines.py PARQUET_ENGINES); here: what only
Spark has (file names it reads as URIs and patterns, its catalog, its URL, its S3 settings).
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mechanisms import Schema
from mechanisms.counting import TableSource, check_tally, count_cells, table_source, tally_table
from mechanisms.counting.bounding import BoundedTally
from mechanisms.counting.spark_engine import (
    GLOB,
    INSTALL_HINT,
    REMOTE_VARIABLE,
    s3a_options,
    tally_on_spark,
)
from mechanisms.counting.tally import CellTally
from mechanisms.errors import MechanismError
from tests.counting.engine_tables import write_parquet

# One cluster for the module: under pytest-xdist all its tests run on one worker.
pytestmark = pytest.mark.xdist_group("spark")

REMOTE = os.environ.get(REMOTE_VARIABLE, "")
needs_spark = pytest.mark.skipif(
    not REMOTE, reason=f"no Spark cluster: {REMOTE_VARIABLE} is unset (./test.sh starts one)"
)
SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 10, "bins": 5},
            {"name": "c", "type": "categorical", "categories": ["a", "b"]},
            {"name": "person", "type": "categorical", "categories": ["1"]},
        ]
    }
)
# a folder and files whose names Spark reads as a URI (%, +, spaces) and as a glob pattern
HOSTILE_FOLDER = 'tä"ble [1]{a,b} 50%+ *?'
HOSTILE_FILES = ("p 1.parquet", "p%2B+[x].parquet", "p{q}.parquet")


def people(rows: int = 900) -> pd.DataFrame:
    """Rows of 60 persons (up to 25 rows each), values outside the bounds and missing."""
    draw = np.random.default_rng(3)  # test data only
    x = draw.uniform(-2, 12, rows)
    x[draw.random(rows) < 0.1] = np.nan
    return pd.DataFrame(
        {
            "x": x,
            "c": pd.Series(draw.choice(["a", "b", "zz", None], rows), dtype="str"),
            "person": draw.integers(0, 60, rows),
        }
    )


@pytest.fixture(scope="module")
def hostile_folder(tmp_path_factory) -> TableSource:
    """The people table in three files under hostile names."""
    folder = tmp_path_factory.mktemp("spark") / HOSTILE_FOLDER
    folder.mkdir()
    frame = people()
    for i, name in enumerate(HOSTILE_FILES):
        write_parquet(frame.iloc[i * 300 : (i + 1) * 300], folder / name)
    return TableSource(str(folder))


@needs_spark
def test_files_named_like_uris_and_patterns_are_read_and_positioned_as_in_process(
    hostile_folder,
):
    """Spark reads paths as glob patterns and reports them percent-encoded: the engine escapes
    the one and decodes the other, so it reads exactly the in-process engine's files and names
    each row "file#row" as it does, and bounding keeps the same rows (k = 1, 2, 5)."""
    cells = CellTally(SCHEMA.accepting(), ("x", "c"))
    reference = tally_table(hostile_folder, cells, "inprocess")
    assert reference.sum() == 900
    assert np.array_equal(tally_table(hostile_folder, cells, "spark"), reference)
    for k in (1, 2, 5):
        bounded = BoundedTally(cells, "person", k, "4f" * 16)
        expected = tally_table(hostile_folder, bounded, "inprocess")
        assert expected.sum() < 900
        assert np.array_equal(tally_table(hostile_folder, bounded, "spark"), expected), k


@needs_spark
def test_a_table_in_the_spark_catalog_is_counted_there(hostile_folder):
    """`spark-table:NAME` (here a global temporary view over the same files) is counted by Spark
    alone: the same counts; every other engine refuses it in words."""
    from pyspark.sql.connect.session import SparkSession

    files = sorted(str(p) for p in Path(hostile_folder.location).iterdir())
    escaped = [f.translate(GLOB) for f in files]  # as the engine names them
    spark = SparkSession.builder.remote(REMOTE).create()
    try:
        spark.read.parquet(*escaped).createOrReplaceGlobalTempView("dp_portal_people")
        source = table_source("spark-table:global_temp.dp_portal_people")
        expected = count_cells(hostile_folder, SCHEMA, ["x", "c"], "inprocess")
        assert np.array_equal(count_cells(source, SCHEMA, ["x", "c"], "spark"), expected)
        for engine in ("inprocess", "duckdb"):
            with pytest.raises(MechanismError, match="counted by Spark only"):
                count_cells(source, SCHEMA, ["x"], engine)
        # hostile names are a table name to Spark, never SQL: refused in words, nothing dropped
        for name in ("x; DROP VIEW global_temp.dp_portal_people", "`a`.`b", "no_such.table"):
            with pytest.raises(MechanismError, match="the Spark engine failed"):
                count_cells(table_source(f"spark-table:{name}"), SCHEMA, ["x"], "spark")
        assert np.array_equal(count_cells(source, SCHEMA, ["x", "c"], "spark"), expected)
    finally:
        spark.catalog.dropGlobalTempView("dp_portal_people")
        spark.stop()


@needs_spark
def test_a_missing_column_and_a_metadata_column_are_refused_in_words(tmp_path):
    path = write_parquet(pd.DataFrame({"x": [1.0], "_metadata": ["m"]}), tmp_path / "m.parquet")
    with pytest.raises(MechanismError, match=r"column \('c'\) is in the schema but not in"):
        count_cells(TableSource(str(path)), SCHEMA, ["c"], "spark")
    bounded = BoundedTally(CellTally(SCHEMA.accepting(), ("x",)), "x", 1, "0" * 32)
    with pytest.raises(MechanismError, match="named _metadata"):
        tally_table(TableSource(str(path)), bounded, "spark")


@needs_spark
def test_a_session_the_server_closed_is_replaced_by_the_check_before_reading(hostile_folder):
    """Spark Connect closes a session after an idle hour (and forgets all on a restart): the
    portal's check before a release reads the data replaces it, so the release runs."""
    from mechanisms.counting import check_reachable, spark_engine

    cells = CellTally(SCHEMA.accepting(), ("c",))
    expected = tally_table(hostile_folder, cells, "inprocess")
    assert np.array_equal(tally_table(hostile_folder, cells, "spark"), expected)
    spark_engine._sessions[REMOTE].stop()  # as the server's idle timeout does
    check_reachable("spark")
    assert np.array_equal(tally_table(hostile_folder, cells, "spark"), expected)


@pytest.mark.parametrize("listening", [False, True], ids=["closed port", "silent server"])
def test_a_server_that_does_not_answer_is_a_clear_error(tmp_path, listening):
    """Refused within seconds (Spark Connect's own retries would wait about 10 minutes; a server
    that accepts and never answers, 21 s at gRPC's default connect timeout, about 4 s with
    CONNECT_OPTIONS), naming host and port, never the URL's token."""
    pytest.importorskip("pyspark")
    path = write_parquet(people(10), tmp_path / "p.parquet")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    if listening:
        closed.listen(4)  # the kernel accepts connections; nobody ever answers
    port = closed.getsockname()[1]
    with pytest.raises(MechanismError) as refused:
        tally_on_spark(
            TableSource(str(path)),
            CellTally(SCHEMA.accepting(), ("x",)),
            remote=f"sc://127.0.0.1:{port}/;token=hunter2",
        )
    closed.close()
    words = str(refused.value)
    assert f"cannot reach the Spark Connect server at 127.0.0.1:{port}" in words
    assert "hunter2" not in words and REMOTE_VARIABLE in words


@pytest.mark.parametrize(
    ("remote", "words"),
    [("", f"needs a Spark Connect server.*{REMOTE_VARIABLE}=sc://"), ("http://x:1", "sc://")],
)
def test_no_server_or_another_kind_of_url_is_refused(tmp_path, monkeypatch, remote, words):
    monkeypatch.setenv(REMOTE_VARIABLE, remote)
    with pytest.raises(MechanismError, match=words):
        count_cells(TableSource(str(tmp_path)), SCHEMA, ["x"], "spark")


def test_without_pyspark_the_engine_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark raises ImportError
    monkeypatch.setitem(sys.modules, "pyspark.errors", None)
    monkeypatch.setenv(REMOTE_VARIABLE, "sc://127.0.0.1:15002")
    with pytest.raises(
        MechanismError, match="Spark is not installed: pip install -r requirements-spark"
    ):
        count_cells(TableSource(str(tmp_path)), SCHEMA, ["x"], "spark")
    assert INSTALL_HINT.endswith("requirements-spark.txt")


@pytest.fixture
def s3_people(tmp_path):
    """The people table in three files of a new bucket on moto's S3 server, behind a proxy
    that records who asked with whose key: (the proxy's URL, the bucket, the records)."""
    from tests.object_storage import bucket_with, recording_proxy, s3_server

    frame = people()
    files = {
        f"table/p {i}.parquet": write_parquet(
            frame.iloc[i * 300 : (i + 1) * 300], tmp_path / f"p{i}.parquet"
        )
        for i in range(3)
    }
    with s3_server() as endpoint, recording_proxy(endpoint) as (url, seen):
        bucket = f"spark-{uuid.uuid4().hex[:12]}"
        bucket_with(endpoint, bucket, files)
        open_to_all(endpoint, bucket)
        yield url, bucket, seen


def open_to_all(endpoint: str, bucket: str) -> None:
    """Let anyone list and read the bucket, as an open-data bucket does (anonymous sources)."""
    import json

    import boto3

    from tests.object_storage import AWS_ENV, REGION

    anyone = {"Effect": "Allow", "Principal": "*"}
    policy = [
        anyone | {"Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}"},
        # moto checks a HEAD as s3:HeadObject (AWS: s3:GetObject)
        anyone
        | {"Action": ["s3:GetObject", "s3:HeadObject"], "Resource": f"arn:aws:s3:::{bucket}/*"},
    ]
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    ).put_bucket_policy(
        Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": policy})
    )


def s3_source(url: str, bucket: str, **keys: str) -> TableSource:
    """The bucket's table as a source read through `url`, with `keys` (none: anonymous)."""
    return TableSource(
        f"s3://{bucket}/table", storage_options={"endpoint_url": url, "region": "us-east-1"} | keys
    )


def cluster_asked(seen: list[tuple[str, str]]) -> list[str]:
    """The Authorization of each request the cluster made (S3A's Java SDK, not the portal)."""
    return [key for agent, key in seen if "aws-sdk-java" in agent]


@needs_spark
def test_an_s3_folder_is_counted_by_the_cluster_as_in_process(s3_people):
    """An s3:// source: listed here with the source's keys, then read by the executors through
    Hadoop's S3A connector (./test.sh gives the cluster one: scripts/common.sh s3a_classpath).
    Cells, and person-level cells (k = 1, 2: the rows kept are chosen by each row's file and
    number, which Spark must name as the in-process engine does), equal the in-process counts
    of the same files."""
    url, bucket, seen = s3_people
    source = s3_source(url, bucket, access_key="custodian-41", secret_key="custodian-secret")
    cells = CellTally(SCHEMA.accepting(), ("x", "c"))
    reference = tally_table(source, cells, "inprocess")
    assert reference.sum() == 900
    assert np.array_equal(tally_table(source, cells, "spark"), reference)
    for k in (1, 2):
        bounded = BoundedTally(cells, "person", k, "5e" * 16)
        expected = tally_table(source, bounded, "inprocess")
        assert expected.sum() < 900
        assert np.array_equal(tally_table(source, bounded, "spark"), expected), k
    assert cluster_asked(seen), "the cluster never read the bucket"


@needs_spark
def test_a_source_is_never_read_with_the_cluster_s_own_keys(s3_people):
    """The cluster holds keys of its own (./test.sh's cluster: SPARK_OWN_KEY in its JVMs'
    environment, found by S3A's default credential chain). A source with keys is read with
    them, one without keys anonymously; neither ever with the cluster's (`s3a_options`). The
    command line's "ambient" input is read with the cluster's keys: the check that the
    cluster's keys are really there to be misused."""
    own = os.environ.get("DPPORTAL_TEST_SPARK_OWN_KEY", "")
    if not own:
        pytest.skip("the cluster's own keys are unknown: DPPORTAL_TEST_SPARK_OWN_KEY is unset")
    url, bucket, seen = s3_people
    cells = CellTally(SCHEMA.accepting(), ("x", "c"))
    tally_table(s3_source(url, bucket, credentials="ambient"), cells, "spark")
    assert any(own in key for key in cluster_asked(seen)), "no ambient read with the own keys"
    for keys in ({"access_key": "custodian-41", "secret_key": "custodian-secret"}, {}):
        seen.clear()
        tally_table(s3_source(url, bucket, **keys), cells, "spark")
        asked = cluster_asked(seen)
        assert asked, "the cluster never read the bucket"
        assert not any(own in key for key in asked), keys
        if keys:
            assert all("custodian-41" in key for key in asked)
        else:
            assert not any(asked), "an anonymous read was signed"


def test_s3_is_read_with_the_source_s_own_keys_for_its_bucket_only():
    """A registered source's keys, or anonymous access, set per bucket for this read alone; the
    cluster's own credential chain is replaced, and no cached filesystem is shared."""
    options = {"endpoint_url": "http://minio:9000", "access_key": "ak", "secret_key": "sk"}
    found = s3a_options("s3://cust-bucket/tables/visits", options)
    prefix = "fs.s3a.bucket.cust-bucket."
    assert found[prefix + "access.key"] == "ak" and found[prefix + "secret.key"] == "sk"
    assert found[prefix + "aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")
    assert found[prefix + "endpoint"] == "http://minio:9000"
    assert found[prefix + "connection.ssl.enabled"] == "false"
    assert found["fs.s3a.impl.disable.cache"] == "true"
    assert all(k.startswith(prefix) for k in found if k != "fs.s3a.impl.disable.cache")
    anonymous = s3a_options("s3://open-bucket/t", {})
    assert anonymous["fs.s3a.bucket.open-bucket.aws.credentials.provider"].endswith(
        "AnonymousAWSCredentialsProvider"
    )
    assert not any(k.endswith(("access.key", "secret.key")) for k in anonymous)
    # the command line's input: the cluster's own credentials (its user runs both)
    ambient = s3a_options("s3://b/t", {"credentials": "ambient"})
    assert not any("credentials.provider" in k for k in ambient)


def test_the_engine_s_limits_are_refused_before_anything_is_read(monkeypatch):
    """`check_tally` (the portal's check before any budget is spent) knows Spark's limits,
    connecting to nothing: more than 4,097 explicit bins, categories matched ignoring capitals.
    """
    monkeypatch.delenv(REMOTE_VARIABLE, raising=False)  # no server: nothing is reached
    edges = [float(e) for e in range(5_001)]
    too_many = {"name": "x", "type": "numeric", "lower": 0, "upper": 5_000, "bins": edges}
    casefold = {"name": "c", "type": "categorical", "categories": ["a"], "match": "casefold"}
    for column, words in (
        (too_many, "the Spark engine compares at most"),
        (casefold, "the Spark engine cannot repeat"),
    ):
        schema = Schema.from_dict({"columns": [column]}).accepting()
        with pytest.raises(MechanismError, match=words):
            check_tally(CellTally(schema, (column["name"],)), "spark")
    fine = Schema.from_dict({"columns": [too_many | {"bins": edges[::2]}]}).accepting()
    check_tally(BoundedTally(CellTally(fine, ("x",)), "x", 2, "0" * 32), "spark")
