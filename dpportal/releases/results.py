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
from dpportal.releases import charts, kinds, packaging, utility
from dpportal.releases import engine as release_engine
from dpportal.releases.kinds import synthetic_verdict
from mechanisms import persons

PREVIEW_ROWS = 25
# recorded settings the Parameters row leaves out: the columns (shown above it) and advice that
# can only be acted on before spending (the accuracy preview gives it: kinds.synthetic.bins_advice)
NOT_SHOWN = frozenset({"columns", "recommended_bins_per_numeric_column"})


def results_context(request, release, is_owner) -> dict:
    """What the page shows of a done release; the owner also gets the comparison report."""
    schema = mechanisms.Schema.from_dict(release.dataset.schema)
    kind = kinds.kind_of(release.mechanism)
    context: dict[str, Any] = {
        "files": packaging.package_names(release),
        "parameters": _parameters(release),
        "preview": _preview(request, release, kind),
        "charts": kinds.public_charts(release, schema),
        "unit": unit_of_privacy(release),
        **kind.results_sections(request, release),
    }
    if is_owner:
        report = utility.load_report(release)
        context["report"] = report
        context["verdict"] = verdict = (report or {}).get("verdict")
        if verdict and verdict.get("tables"):
            context["verdict_scale"] = synthetic_verdict.grade_scale(verdict["grade"])
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
    if release.dataset.is_external:  # bounded inside the engine: the rows are never read here
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
        if key not in NOT_SHOWN
    ]


def _number_charts(chart_list) -> None:
    """Give each chart's JSON element a unique, data-free id."""
    for index, chart in enumerate(chart_list):
        chart["json_id"] = f"chart-data-{index}"


def _preview(request, release, kind) -> dict | None:
    """One page of a public CSV the kind previews, read from the stored file without loading
    all of it, with the kind's notes on it."""
    stored = packaging.stored_names(release)
    names = [name for name in kind.preview_files() if name in stored]
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
        "note": kind.preview_note(name),
        "interval_note": kind.interval_note(name, header),
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
