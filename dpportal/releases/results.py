"""The results part of a finished release's page: parameters, CSV preview, charts, range queries.

Public parts only, except the custodian's comparison with the raw data (`report`), which the
view adds for the owner alone.
"""

import csv
import io
import itertools
import json
import math
from contextlib import contextmanager
from typing import Any

import mechanisms
from dpportal.core import object_store
from dpportal.releases import catalogue, charts, packaging, utility
from dpportal.releases import engine as release_engine
from dpportal.releases.kinds.range_count.forms import RangeQueryForm
from dpportal.releases.kinds.statistics import charts as statistics_charts
from mechanisms import persons

PREVIEW_ROWS = 25
PREVIEW_FILES = ("synthetic.csv", "noisy_counts.csv", "answers.csv", "statistics.csv")


def results_context(request, release, is_owner) -> dict:
    """What the page shows of a done release; the owner also gets the comparison report."""
    schema = mechanisms.Schema.from_dict(release.dataset.schema)
    names = packaging.stored_names(release)
    context: dict[str, Any] = {
        "files": packaging.package_names(release),
        "parameters": _parameters(release),
        "preview": _preview(request, release, names),
        "charts": [
            *charts.release_charts(release, schema),
            *statistics_charts.release_charts(release),
        ],
        "unit": unit_of_privacy(release),
    }
    if "measurements.json" in names:
        context["measurements"] = packaging.cached_json(
            release, "measurements-v1", lambda: _measurements(release)
        )
    if "structure.json" in names:
        structure = packaging.stored_file(release, "structure.json")
        context.update(_range_query(request, release, structure))
    if is_owner:
        report = utility.load_report(release)
        context["report"] = report
        context["verdict"] = (report or {}).get("verdict")
        context["custodian_charts"] = charts.custodian_charts(schema, report)
        context["rows_dropped"] = _rows_dropped(release, schema)
    _number_charts([*context["charts"], *(context.get("custodian_charts") or [])])
    return context


def unit_of_privacy(release) -> str:
    """The unit the release protects, as its (public) manifest states it."""
    guarantee = (release.manifest or {}).get("guarantee") or {}
    return guarantee.get("unit") or mechanisms.catalogue.UNIT


def _rows_dropped(release, schema) -> int | None:
    """Owner only: rows that bounding to k rows per person dropped (from the raw data)."""
    k = ((release.manifest or {}).get("guarantee") or {}).get("max_rows_per_person")
    if schema.person is None or k is None or release.dataset.is_deleted:
        return None
    try:
        ids = release_engine.load_columns(release.dataset, [schema.person.column])
    except release_engine.ReleaseInputError:
        return None
    return persons.rows_over_bound(ids[schema.person.column], k)


def _parameters(release) -> list[tuple[str, str | int | float]]:
    """The settings the mechanism used, as it recorded them (else as requested)."""
    manifest = release.manifest or {}
    # "params": the range-count key of manifests stored before the one manifest shape
    params = manifest.get("parameters") or manifest.get("params") or release.params or {}
    return [
        (key, value if isinstance(value, str | int | float) else json.dumps(value))
        for key, value in params.items()
        if key != "columns"
    ]


def _measurements(release) -> list[dict]:
    """One row per MWEM measurement: the table, when, its counts and their 95% half-width
    (from measurements.json: public, no data)."""
    document = json.loads(packaging.stored_file(release, "measurements.json"))
    start = len(release.columns) if document["budget_split"]["initial_one_way"] else 0
    once = document["budget_split"].get("full_table")  # the one measurement, no selection
    rows = []
    for index, record in enumerate(document["measurements"]):
        query = record["query"]
        lower, noisy = record.get("ci_lower"), record["noisy_answer"]
        half = noisy[0] - lower[0] if lower else None
        rows.append(
            {
                "table": " × ".join(query["columns"])
                + (" (a box)" if query["type"] == "box" else ""),
                "when": "start"
                if index < start
                else ("once, the whole budget" if once else f"round {index - start + 1}"),
                "cells": len(noisy),
                "half_width": "—" if half is None else f"{half:,}",
            }
        )
    return rows


def _number_charts(chart_list) -> None:
    """Give each chart's JSON element a unique, data-free id."""
    for index, chart in enumerate(chart_list):
        chart["json_id"] = f"chart-data-{index}"


def _range_query(request, release, structure_json: bytes) -> dict:
    """Answer a new range from the released structure: post-processing, no budget, no data.

    A box moves to the nearest grid edges (answered exactly); the answer carries its 95%
    interval (noise, plus rounding for a line that cuts cells).
    """
    from mechanisms.range_count import Support, answer_intervals
    from mechanisms.range_count.inputs import snap_box
    from mechanisms.range_count.intervals import describe

    structure = json.loads(structure_json)
    if structure.get("mechanism") in catalogue.NO_NEW_RANGES_METHODS:
        return {"query_form": None, "query_unavailable": True}
    support = Support.from_dict(structure["support"])
    edges = None
    if support.grid_shape is not None:
        edges = list(zip(support.lower, support.upper, support.grid_shape, strict=True))
    asked = "ask" in request.GET
    form = RangeQueryForm(request.GET if asked else None, columns=release.columns, edges=edges)
    if not (asked and form.is_valid()):
        return {"query_form": form}
    query = form.query()
    if query["type"] == "box":
        query = snap_box(support, query["lo"], query["hi"])
    try:
        answer = answer_intervals(structure, [query])
    except mechanisms.MechanismError as exc:
        form.add_error(None, str(exc))
        return {"query_form": form}
    return {
        "query_form": form,
        "range_answer": {
            "answer": float(answer.estimate[0]),
            "std": float(answer.noise_sd[0]),
            "ci_lower": math.floor(answer.ci_lower[0]),
            "ci_upper": math.ceil(answer.ci_upper[0]),
            "region": describe(query, support),
            "exact": bool(answer.exact_region[0]),
        },
    }


def _preview(request, release, names) -> dict | None:
    """One page of a public CSV, read from the stored file without loading all of it."""
    names = [name for name in PREVIEW_FILES if name in names]
    if not names:
        return None
    name = request.GET.get("file") if request.GET.get("file") in names else names[0]
    path = packaging.output_dir(release) / name
    total = packaging.cached_json(release, f"rows-{name}", lambda: _count_rows(path))
    pages = max(1, math.ceil(total / PREVIEW_ROWS))
    page = min(max(_int(request.GET.get("page"), 1), 1), pages)
    with _csv_lines(path) as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        rows = list(itertools.islice(reader, (page - 1) * PREVIEW_ROWS, page * PREVIEW_ROWS))
    first = (page - 1) * PREVIEW_ROWS + 1 if rows else 0
    return {
        "name": name,
        "names": names,
        "header": header,
        "rows": rows,
        "page": page,
        "pages": pages,
        "total": total,
        "first": first,
        "last": first + len(rows) - 1,
    }


def _count_rows(path) -> int:
    with _csv_lines(path) as handle:
        return max(0, sum(1 for _ in csv.reader(handle)) - 1)


@contextmanager
def _csv_lines(path):
    """A stored CSV as text lines, read piece by piece (from the bucket too)."""
    with object_store.open_input(path) as stored:
        yield io.TextIOWrapper(stored, encoding="utf-8", newline="")


def _int(text, default) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default
