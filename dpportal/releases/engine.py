"""Worker side of a release: read the stored table and run the requested mechanism on it.

The only bridge between the portal and the `mechanisms` package.
"""

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

import mechanisms
import mechanisms.counting
from dpportal.core import object_store
from dpportal.core.files import dataset_path
from dpportal.releases import accuracy_preview
from dpportal.releases.kinds import kind_of
from dpportal.sources.tables import SourceError, table_source
from mechanisms import persons
from mechanisms.accounting import float_at_most
from mechanisms.catalogue import SCHEMA_ESTIMATE
from mechanisms.counting.bounding import BoundedTally
from mechanisms.counting.inprocess import batch_frame
from mechanisms.public_bounds import ESTIMATE_RESULTS
from mechanisms.schema import CHUNK_ROWS, IgnoredColumn


class ReleaseInputError(Exception):
    """The release cannot run on this input; the message is shown to the custodian."""


def _stored_columns(dataset, columns) -> Path:
    """The Parquet copy's path, once it is known to exist and hold `columns`."""
    path = dataset_path(dataset)
    if not dataset.parquet_name or not object_store.exists(path):
        raise ReleaseInputError("The dataset's file is no longer stored, so it cannot be read.")
    missing = [c for c in columns if c not in dataset.columns]
    if missing:
        raise ReleaseInputError(
            f"Column {missing[0]!r} is not in the dataset; choose among "
            f"{', '.join(dataset.columns)}."
        )
    return path


def load_columns(dataset, columns) -> pd.DataFrame:
    """Read only the requested columns of the stored Parquet copy."""
    path = _stored_columns(dataset, columns)
    with object_store.open_input(path) as stored:
        return batch_frame(pq.read_table(stored, columns=list(columns)), columns)


def read_in_chunks(dataset, columns) -> mechanisms.ChunkedTable:
    """The requested columns of the Parquet copy as record batches of CHUNK_ROWS rows, for
    mechanisms that only count: memory holds one batch, whatever the row count."""
    path = _stored_columns(dataset, columns)
    return mechanisms.ChunkedTable(_batches(path, list(columns), CHUNK_ROWS))


def _batches(path, columns, chunk_rows):
    """Record batches read by byte range (from the bucket too): never the whole file at once."""
    with (
        object_store.open_input(path) as stored,
        pq.ParquetFile(stored, pre_buffer=False) as parquet,  # pre-buffering grows with the file
    ):
        for batch in parquet.iter_batches(batch_size=chunk_rows, columns=columns):
            yield batch_frame(batch, columns)


def compute(release, progress):
    """Run the release's mechanism and return its `mechanisms.ReleaseOutput` (public files).

    Counting mechanisms (histograms, range counts) read the data in chunks; others whole."""
    dataset = release.dataset
    progress(0, 1, "reading data")
    chunked = dataset.sha256 and mechanisms.reads_in_chunks(release.mechanism)
    read = read_in_chunks if chunked else load_columns
    try:
        schema = mechanisms.Schema.from_dict(dataset.schema)
        if dataset.is_external:
            data = _where_it_lives(dataset, release)
        else:
            data = read(dataset, [*release.columns, *_person_column(schema)])
        return mechanisms.run_release(
            release.mechanism,
            data,
            schema,
            columns=release.columns,
            params=release.params,
            epsilon=float_at_most(release.epsilon),  # never above the debited budget
            delta=float_at_most(release.delta),
            neighbouring=release.neighbouring,
            rng=None,
            progress=lambda done, total: progress(done, total, "running"),
        )
    except mechanisms.MechanismError as exc:
        raise ReleaseInputError(str(exc)) from exc


def _where_it_lives(dataset, release):
    """The external table as its engine's table: the rows are counted where they live (a
    PostgreSQL engine runs the GROUP BY inside the database; no raw row reaches the portal)."""
    try:
        source = table_source(dataset)
    except SourceError as exc:
        raise ReleaseInputError(str(exc)) from exc
    return mechanisms.counting.engine_table(source, release.engine or dataset.engine)


def engine_refusal(dataset, *, mechanism, columns, params, epsilon, engine) -> str:
    """Why `engine` cannot make this release of a table that stays where it lives ("" when it
    can), from the schema and the settings alone: no row is read and nothing connects, so the
    form, the API and the preview refuse it before any budget is spent
    (`mechanisms.counting.check_tally`). Settings the mechanism itself refuses are left to the
    dry run (`expected_accuracy`), which words them."""
    schema = mechanisms.Schema.from_dict(dataset.schema)
    person = schema.person
    neighbouring = "add-remove" if person is not None else dataset.neighbouring
    try:
        wanted = kind_of(mechanism).engine_tallies(
            schema, list(columns), dict(params), float(epsilon), neighbouring
        )
    except mechanisms.MechanismError:
        return ""
    try:
        for tally in wanted:
            if person is not None:  # bounded inside the engine; the seed does not change the SQL
                tally = BoundedTally(tally, person.column, person.max_rows, "0" * 64)
            mechanisms.counting.check_tally(tally, engine)
    except mechanisms.MechanismError as exc:
        return (
            f"The {engine} engine cannot make this release: {exc}. Change that setting, or "
            "choose another engine in “Engine”; nothing was spent."
        )
    return ""


def refusal_before_reading(release) -> str:
    """`engine_refusal` of a queued release on a source, checked again by the worker before
    the data is marked read, then whether the source and its engine can be reached: a release
    admitted before a limit was checked, whose schema changed since, whose source is down, or
    whose engine's cluster does not answer (Spark: `mechanisms.counting.check_reachable`), fails
    with a full refund (no row read, no noise drawn) instead of losing its budget ("" when the
    engine can make it, and for uploads)."""
    dataset = release.dataset
    if not dataset.is_external or not dataset.schema:
        return ""
    engine = release.engine or dataset.engine
    refusal = engine_refusal(
        dataset,
        mechanism=release.mechanism,
        columns=release.columns,
        params=release.params,
        epsilon=release.epsilon,
        engine=engine,
    )
    return refusal or _unreachable(dataset, engine)


def _unreachable(dataset, engine: str) -> str:
    """Why the source or its engine cannot be reached now ("" when both can): the source checked
    as at registration (`table_source`: a connection and the table's name, or the files' names;
    never a row), the engine's cluster asked whether it answers; either way nothing is read, so
    a release that fails here is refunded."""
    try:
        table_source(dataset)
    except SourceError as exc:
        return (
            f"The source could not be reached when this release started: {exc} Nothing was "
            "read and the budget was returned; start the release again once it can be reached."
        )
    try:
        mechanisms.counting.check_reachable(engine)
    except mechanisms.MechanismError as exc:
        return f"The {engine} engine cannot be reached: {exc}. Nothing was read or spent."
    return ""


def _person_column(schema) -> list[str]:
    """The person column, read so run_release can bound rows per person (it is never released)."""
    return [schema.person.column] if schema.person is not None else []


# ---------------------------------------------------------------- release pages: expected accuracy


def expected_accuracy(dataset, *, mechanism, columns, params, epsilon, delta=0.0) -> dict:
    """{"lines": plain sentences, "table": the 95% table (`accuracy_preview.table`),
    "warnings": what the preview warns against (`Kind.preview_warnings`)}: the release's
    accuracy predicted from the mechanism's public plan (`noise_plan`).

    The plan reads the schema, the settings and the stored row count (public under
    replace-one; under add-remove this preview is the custodian's own page): never the raw
    file; the kind may add owner-only facts from the upload's profile (`Kind.preview_facts`,
    such as the count of empty cells the statistics leave out), shown to the owner alone.
    Raises MechanismError for settings the mechanism would refuse (such as an epsilon whose
    noise 64-bit counts cannot carry), so the form shows them before any budget is spent.
    """
    schema = mechanisms.Schema.from_dict(dataset.schema)
    plan = noise_plan(dataset, schema, mechanism, columns, params, epsilon, delta)
    kind = kind_of(mechanism)
    plan.details["owner_facts"] = kind.preview_facts(dataset, list(columns), epsilon)
    return {
        "lines": kind.accuracy_lines(plan, schema, columns, dataset.row_count),
        "table": accuracy_preview.table(kind, plan, schema, columns, dataset.row_count),
        "warnings": kind.preview_warnings(plan, schema, list(columns), dataset.row_count),
    }


def noise_plan(dataset, schema, mechanism, columns, params, epsilon, delta):
    """The mechanism's public noise plan for this dataset (schema, relation, stored row count).

    Person level: refused here for a mechanism without a person-level form (before any budget
    is spent), else planned at the row-level share of the request (`persons.mechanism_budget`).
    """
    if schema.person is not None:
        persons.check_person_level(mechanism, float(delta), dict(params or {}))
    budget = persons.mechanism_budget(
        schema.person, float_at_most(epsilon), float_at_most(delta), dataset.neighbouring
    )
    return mechanisms.catalogue.spec(mechanism).plan(
        mechanisms.PlanInputs(
            schema=schema,
            columns=list(columns),
            params=params,
            epsilon=budget[0],
            delta=budget[1],
            neighbouring=budget[2],
            n=dataset.row_count,
        )
    )


# ---------------------------------------------------------------- schema page: DP estimates


def estimate_column(dataset, column, kind, *, epsilon, delta, person) -> dict:
    """A DP estimate of `column`'s bounds (kind "numeric") or categories ("categorical"), read
    from the stored copy and run as the catalogue row SCHEMA_ESTIMATE (`run_release`):
    {"result": ..., "guarantee": ..., "accounting": ...}. With `person` (the person column and
    k the estimate protects) `run_release` bounds the rows per person exactly as a release
    does; the guarantee is the row's (`mechanisms.public_bounds.run_estimate`)."""
    if dataset.is_external:
        raise ReleaseInputError(
            "This table stays where it lives and is only counted there, so no column can be read "
            "for an estimate: type its bounds or categories from public knowledge."
        )
    frame = load_columns(dataset, [column, *([person.column] if person else [])])
    try:
        output = mechanisms.run_release(
            SCHEMA_ESTIMATE,
            frame,
            mechanisms.Schema([IgnoredColumn(column)], person),
            epsilon=float_at_most(epsilon),  # never above the debited budget
            delta=float_at_most(delta),
            neighbouring=dataset.neighbouring,
            columns=[column],
            params={"kind": kind},
        )
    except mechanisms.MechanismError as exc:
        raise ReleaseInputError(str(exc)) from exc
    result = json.loads(output.files[ESTIMATE_RESULTS])[column]
    return {"result": result} | {k: output.manifest[k] for k in ("guarantee", "accounting")}
