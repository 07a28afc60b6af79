"""The custodian-only utility report: how close a release is to the raw data.

Computed by the worker right after a release is published, against the raw table, and stored
apart from the public package (DATA_DIR/custodian/, owner-only file modes). It is shown only to
the dataset's owner and is never part of a public package. What it compares is the release
kind's (`Kind.custodian_report`, `Kind.assess`; the pieces: `dpportal.releases.comparisons`).
"""

import json

import mechanisms
from dpportal.core import files, object_store
from dpportal.releases import engine as release_engine
from dpportal.releases import packaging, promise_check
from dpportal.releases.kinds import kind_of
from dpportal.releases.packaging import with_numbers
from mechanisms import persons, validation


def load_report(release) -> dict | None:
    """The stored report, or None if it has not been computed (yet)."""
    path = files.utility_report_path(release)
    if not object_store.exists(path):
        return None
    return json.loads(object_store.read_bytes(path))


def compute(release) -> bytes:
    """Compare the published files with the raw data: the report, as JSON to store privately
    (`services.publishing` stores it, ordered with the dataset's deletion)."""
    schema = mechanisms.Schema.from_dict(release.dataset.schema)
    frame = release_engine.load_columns(release.dataset, release.columns)
    stored = packaging.stored_files(release)
    kind = kind_of(release.mechanism)
    report = build_report(kind, schema, release.columns, frame, stored)
    report["verdict"] = kind.assess(
        schema,
        release.columns,
        frame,
        stored,
        epsilon=float(release.epsilon),
        neighbouring=release.neighbouring,
        **judged(release, schema),
    )
    return json.dumps(report).encode()


def build_report(kind, schema, columns, frame, files) -> dict:
    """What every report holds (rows, clamping) and the kind's own comparisons."""
    report = {"rows": len(frame), "columns": [], "pairs": [], "ranges": [], "cells": None}
    report["clamping"] = [
        c.to_dict() for c in validation.clamping_report(frame, schema, columns) if c.moved
    ]
    report.update(kind.custodian_report(schema, columns, with_numbers(frame, schema), files))
    return report


def judged(release, schema) -> dict:
    """What a kind's `assess` judges a release by, besides its files and the raw rows: the
    planner's promise at its ε, the rows bounding dropped, the release's parameters."""
    return {
        "promises": promise_check.promised(release),
        "dropped": rows_dropped(release.dataset, schema),
        "params": dict(release.params or {}),
    }


def rows_dropped(dataset, schema) -> int:
    """Rows a person-level release dropped by bounding (custodian only; 0 at row level)."""
    if schema.person is None:
        return 0
    ids = release_engine.load_columns(dataset, [schema.person.column])[schema.person.column]
    return persons.rows_over_bound(ids, schema.person.max_rows)
