"""Tables in the Spark catalog as portal sources (issue 45 item 2): `spark-table:db.table`.

The Spark cluster reads its catalog with its own credentials, so the operator's list
(DPPORTAL_SPARK_TABLES, `dpportal.sources.reach.listed_spark_table`) is what stands between a
custodian and every other table the cluster can read. Here, on the real cluster ./test.sh starts
(DPPORTAL_SPARK_REMOTE; without it the tests that need it are skipped, saying so):
- only the custodian a table is listed for registers it; another custodian, and hostile names,
  are refused in words before Spark is asked anything (a twin without the list is caught);
- a range count, summary statistics and a person-level histogram run on the catalog table,
  each from the counts Spark makes, equal to the in-process counts of the same files;
- a table taken off the list or dropped from the catalog fails the release with its budget
  returned, nothing read (a twin without the check keeps the ε).
"""

import os
import uuid
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.checks import run_checks
from django.urls import reverse

import mechanisms
from dpportal import services
from dpportal.models import Dataset, Release
from dpportal.sources import reach as source_reach
from dpportal.sources import tables as source_tables
from dpportal.sources.tables import table_source
from mechanisms.counting import TableSource, spark_engine, tally_table
from mechanisms.counting.bounding import BoundedTally
from mechanisms.counting.spark_engine import REMOTE_VARIABLE
from mechanisms.counting.tally import CellTally
from mechanisms.range_count.api import support_from_schema
from mechanisms.range_count.grid_tally import grid_tally
from mechanisms.statistics.aggregates import tallies
from tests.helpers import client_for, make_user, post_new_release, run_now

# One cluster: under pytest-xdist every Spark test runs on one worker.
pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.django_db]

REMOTE = os.environ.get(REMOTE_VARIABLE, "")
needs_spark = pytest.mark.skipif(
    not REMOTE, reason=f"no Spark cluster: {REMOTE_VARIABLE} is unset (./test.sh starts one)"
)
SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"], "unknown": "other"},
        {"name": "city", "type": "ignored"},
    ]
}
PERSON_SCHEMA = {
    "columns": [*SCHEMA["columns"][:2], {"name": "city", "role": "person_id"}],
    "max_rows_per_person": 2,
}
HOSTILE_NAMES = (
    "{db}.people; DROP TABLE {db}.people",
    "`{db}`.`people`",
    "parquet.`/etc`",
    "{db}.people.extra.part",
    "{db}",
    "",
    " {db} . people ",
    "{db}.people--",
    "{db}.pe\u200bople",
)


def people_columns(n=600):
    """Ages with gaps (None and NaN) and values outside the bounds, a sex outside the declared
    categories, and 20 cities (the persons, up to 30 rows each)."""
    ages = [
        None if i % 37 == 0 else float("nan") if i % 41 == 0 else (i * 7) % 113 - 5.0
        for i in range(n)
    ]
    sexes = ["X" if i % 53 == 0 else ("F" if i % 3 else "M") for i in range(n)]
    return {"age": ages, "sex": sexes, "city": [f"Town {i % 20}" for i in range(n)]}


@pytest.fixture
def catalog(tmp_path, settings):
    """A database of the Spark catalog holding `people`: a table over a Parquet folder of three
    files this test wrote (so the in-process engine can count the same files), listed for the
    custodian "owner" alone; dropped afterwards. Yields (database name, the folder's source)."""
    from pyspark.sql.connect.session import SparkSession

    folder = tmp_path / "people"
    folder.mkdir()
    columns = people_columns()
    for part in range(3):
        pq.write_table(
            pa.table({k: v[part * 200 : (part + 1) * 200] for k, v in columns.items()}),
            folder / f"part-{part}.parquet",
        )
    database = f"dp_portal_{uuid.uuid4().hex[:12]}"
    spark = SparkSession.builder.remote(REMOTE).create()
    spark.sql(f"CREATE DATABASE {database}")
    spark.catalog.createTable(f"{database}.people", path=str(folder), source="parquet")
    settings.DPPORTAL_SPARK_TABLES = [f"owner={database}.people", f"other={database}.visits"]
    try:
        yield database, TableSource(str(folder))
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


@pytest.fixture
def asked(monkeypatch):
    """The names Spark is asked to describe (the real call, recorded)."""
    names = []
    real = spark_engine.describe_table

    def describe(name, **kwargs):
        names.append(name)
        return real(name, **kwargs)

    monkeypatch.setattr(spark_engine, "describe_table", describe)
    return names


def register(owner, location, epsilon_total=3):
    return services.dataset_register_source(
        owner=owner, name="People", location=location, epsilon_total=epsilon_total
    )


@needs_spark
def test_a_catalog_table_is_registered_only_by_the_custodian_it_is_listed_for(catalog, asked):
    database, _folder = catalog
    owner, other = make_user("owner"), make_user("other")
    dataset = register(owner, f"spark-table:{database}.people")
    assert dataset.engine == "spark" and dataset.row_count == 600
    assert dataset.columns == ["age", "sex", "city"]
    assert dataset.profile["types"] == ["number", "text", "text"]
    assert dataset.source_key == f"spark-table:{database}.people"
    assert asked == [f"{database}.people"]
    again = register(owner, f"spark-table:{database.upper()}.People")  # capitals aside: the same
    assert again.budget_id == dataset.budget_id
    with pytest.raises(services.ServiceError, match="not one the administrator lists for you"):
        register(other, f"spark-table:{database}.people")
    for hostile in HOSTILE_NAMES:
        with pytest.raises(services.ServiceError, match="lists for you") as refused:
            register(owner, "spark-table:" + hostile.format(db=database))
        assert f"spark-table:{database}.people" in str(refused.value)  # what they may register
    assert asked == [f"{database}.people"] * 2  # nothing refused ever reached Spark
    assert Dataset.objects.filter(owner=other).count() == 0


@needs_spark
def test_without_the_list_another_custodian_reads_any_table(catalog, monkeypatch):
    """Twin of the test above: with the list's check made a pass-through, the other custodian
    registers the owner's table, which the refusal above catches."""
    database, _folder = catalog
    monkeypatch.setattr(source_tables, "listed_spark_table", lambda _user, name: name.strip())
    stolen = register(make_user("other"), f"spark-table:{database}.people")
    assert stolen.row_count == 600


def test_the_register_page_names_only_the_custodian_s_own_tables(settings):
    settings.DPPORTAL_SPARK_TABLES = ["owner=census.people", "other=health.visits"]
    page = client_for(make_user("owner")).get(reverse("dataset_register_source"))
    text = page.content.decode()
    assert page.status_code == 200 and "spark-table:census.people" in text
    assert "health.visits" not in text
    stranger = client_for(make_user("third")).get(reverse("dataset_register_source"))
    assert "census.people" not in stranger.content.decode()


def test_without_a_spark_cluster_a_listed_table_is_refused_in_words(settings, monkeypatch):
    settings.DPPORTAL_SPARK_TABLES = ["owner=census.people"]
    monkeypatch.delenv(REMOTE_VARIABLE, raising=False)
    with pytest.raises(services.ServiceError, match="no Spark cluster.*Nothing was registered"):
        register(make_user("owner"), "spark-table:census.people")


def test_entries_nobody_can_register_are_reported_by_the_checks(settings):
    settings.DPPORTAL_SPARK_TABLES = [
        "owner=census.people",
        "census.people",
        "owner=people",
        "owner=census.`people`",
        "=census.people",
    ]
    warned = [w.msg for w in run_checks() if w.id == "dpportal.W011"]
    assert len(warned) == 4 and not any("'owner=census.people'" in w for w in warned)
    assert source_reach.spark_tables_of("owner") == ["census.people"]


def spark_release(client, dataset, ask):
    """Post a release of `dataset` counted by Spark through the form; run it here."""
    ask = ask | {"engine": "spark", "confirm": "on"}
    assert client.get(reverse("release_preview", args=[dataset.pk]), ask).json()["ok"]
    response = post_new_release(client, dataset.pk, ask)
    assert response.status_code == 302, response.content.decode()[:3000]
    done = run_now(Release.objects.filter(dataset=dataset).latest("pk"))
    assert done.engine == "spark" and done.data_was_read
    return done


@needs_spark
def test_range_counts_statistics_and_persons_on_a_catalog_table_equal_in_process(catalog):
    """Done-when of issue 45 for Spark's catalog: each release runs on the table, from counts
    Spark makes, equal to the in-process engine's counts of the same files."""
    database, folder = catalog
    owner = make_user("owner")
    client = client_for(owner)
    dataset = register(owner, f"spark-table:{database}.people")
    services.dataset_confirm_schema(dataset=dataset, user=owner, schema=SCHEMA)
    source = table_source(Dataset.objects.get(pk=dataset.pk))
    assert source == TableSource(f"spark-table:{database}.people", table=f"{database}.people")
    schema = mechanisms.Schema.from_dict(SCHEMA).accepting()

    ranges = {"mechanism": "range_count", "columns": ["age"], "epsilon": "0.5"}
    spark_release(client, dataset, ranges | {"range_workload": "boxes", "range_grid": "20"})
    grid = grid_tally(support_from_schema(schema, ["age"], {"grid": [20]}), schema)
    counted = tally_table(source, grid, "spark")
    assert np.array_equal(counted, tally_table(folder, grid, "inprocess"))
    assert 0 < counted.sum() < 600  # the gaps (None and NaN) are left out

    stats = {"mechanism": "statistics", "columns": ["age", "sex"], "epsilon": "1"}
    done = spark_release(client, dataset, stats | {"stats_kinds": ["count", "mean", "median"]})
    request = mechanisms.statistics.parse_request(
        schema, done.params, epsilon=1.0, neighbouring="replace-one"
    )
    group, ranks = tallies(schema, request)
    for tally in (group, *ranks):
        assert np.array_equal(
            tally_table(source, tally, "spark"), tally_table(folder, tally, "inprocess")
        )

    persons = register(owner, f"spark-table:{database}.people")
    services.dataset_confirm_schema(dataset=persons, user=owner, schema=PERSON_SCHEMA)
    hist = {"mechanism": "perturbed_histogram", "columns": ["sex"], "epsilon": "1", "rows": "20"}
    done = spark_release(client, persons, hist)
    assert done.manifest["guarantee"]["max_rows_per_person"] == 2
    person_schema = mechanisms.Schema.from_dict(PERSON_SCHEMA).accepting()
    bounded = BoundedTally(CellTally(person_schema, ("sex",)), "city", 2, "5e" * 32)
    kept = tally_table(source, bounded, "spark")
    assert np.array_equal(kept, tally_table(folder, bounded, "inprocess"))
    assert kept.sum() == 2 * 20
    assert Dataset.objects.get(pk=dataset.pk).epsilon_spent == Decimal("2.5")


def queued_histogram(database):
    """The owner's catalog table registered and a histogram queued on it at ε 0.5 (debited)."""
    owner = make_user("owner")
    dataset = register(owner, f"spark-table:{database}.people", epsilon_total=1)
    dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=SCHEMA)
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age", "sex"],
        params={"rows": 600},
        epsilon="0.5",
        engine="spark",
    )
    assert Dataset.objects.get(pk=dataset.pk).epsilon_spent == Decimal("0.5")
    return dataset, release


def run_here(dataset, release):
    services.release_run(release_id=release.pk)
    release.refresh_from_db()
    return release, Dataset.objects.get(pk=dataset.pk).epsilon_spent


@needs_spark
@pytest.mark.parametrize("change", ["taken off the list", "dropped"])
def test_a_table_taken_off_the_list_or_dropped_fails_with_its_budget_returned(
    catalog, settings, change
):
    database, _folder = catalog
    dataset, release = queued_histogram(database)
    if change == "dropped":
        from pyspark.sql.connect.session import SparkSession

        SparkSession.builder.remote(REMOTE).create().sql(f"DROP TABLE {database}.people")
    else:
        settings.DPPORTAL_SPARK_TABLES = []
    done, spent = run_here(dataset, release)
    assert done.status == Release.Status.FAILED and not done.data_was_read
    assert spent == 0 and "budget was returned" in done.error_message
    words = "has no table" if change == "dropped" else "not one the administrator lists"
    assert words in done.error_message


@needs_spark
def test_without_the_check_a_dropped_table_keeps_the_epsilon(catalog, monkeypatch):
    """Twin of the test above: with the worker's check of the catalog made a no-op, the same
    release is marked read, fails in the engine and keeps its ε, which the checks above catch."""
    database, _folder = catalog

    def unchecked(_user, name):
        return TableSource(f"spark-table:{name}", table=name)

    monkeypatch.setattr(source_tables, "_reached_spark_table", unchecked)
    dataset, release = queued_histogram(database)
    from pyspark.sql.connect.session import SparkSession

    SparkSession.builder.remote(REMOTE).create().sql(f"DROP TABLE {database}.people")
    done, spent = run_here(dataset, release)
    assert done.status == Release.Status.FAILED and done.data_was_read
    assert spent == Decimal("0.5")
