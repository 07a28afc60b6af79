"""Audit pages: the releases list and each dataset's budget ledger (both with CSV export), the
audit log.

Owners and auditors of a dataset may read all of these; nobody else sees its rows (the ledger
answers 404). Everything here is read-only.
"""

import csv
from datetime import date
from decimal import Decimal

from django.core.paginator import Paginator
from django.http import HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from dpportal.access import timing
from dpportal.access.rules import (
    dataset_for_reader,
    datasets_visible_to,
    is_owner,
    releases_visible_to,
)
from dpportal.access.timing import shown_time, shown_time_text
from dpportal.audit.events import filtered_events, shown_details
from dpportal.audit.forms import ReleaseFilterForm, method_title
from dpportal.core.downloads import attachment
from dpportal.core.formatting import plain_number
from dpportal.models import Release
from mechanisms.csv_safety import escape_cell

RELEASE_COLUMNS = [
    ("id", "#"),
    ("dataset", "Dataset"),
    ("mechanism", "Method"),
    ("epsilon", "ε"),
    ("status", "Status"),
    ("user", "Requested by"),
    ("created", "Requested"),
]


def _release_filter(request):
    visible = releases_visible_to(request.user).annotate(
        shown_status=timing.shown_status_field(request.user)
    )
    form = ReleaseFilterForm(
        request.GET or None, releases=visible, datasets=datasets_visible_to(request.user)
    )
    return form, form.apply(visible.select_related("dataset", "requested_by"))


@require_GET
def release_list(request):
    form, releases = _release_filter(request)
    page = Paginator(releases, 50).get_page(request.GET.get("page"))
    for release in page.object_list:
        release.method_title = method_title(release.mechanism)
        release.shown_status_label = Release.Status(release.shown_status).label
    return render(
        request,
        "dpportal/releases/list.html",
        {
            "form": form,
            "page": page,
            "nav": "releases",
            "columns": _sort_links(request, form),
            "query": _query_without(request, "page"),
        },
    )


def _sort_links(request, form):
    """Column headers: label, link that sorts by it (toggling direction), and aria-sort state."""
    current = (form.cleaned_data.get("sort") if form.is_valid() else "") or "-created"
    links = []
    for key, label in RELEASE_COLUMNS:
        state = "none"
        if current.lstrip("-") == key:
            state = "descending" if current.startswith("-") else "ascending"
        next_sort = key if state == "descending" else f"-{key}"
        query = request.GET.copy()
        query["sort"] = next_sort
        query.pop("page", None)
        links.append({"label": label, "href": f"?{query.urlencode()}", "aria_sort": state})
    return links


def _query_without(request, name):
    query = request.GET.copy()
    query.pop(name, None)
    return query.urlencode()


@require_GET
def release_list_csv(request):
    form, releases = _release_filter(request)
    if form.is_bound and not form.is_valid():
        return _invalid_filters(form, "release_list")
    header = [
        "release",
        "dataset",
        "method",
        "status",
        "epsilon",
        "delta",
        "neighbouring",
        "requested_by",
        "requested_at",
        "finished_at",
    ]
    rows = (_release_row(r, exact=is_owner(request.user, r.dataset)) for r in releases)
    return _csv_download(f"releases-{date.today():%Y%m%d}.csv", header, rows)


def _release_row(release, *, exact) -> list:
    status = release.shown_status
    finished = shown_time(release.finished_at, exact=exact) if status == release.status else None
    return [
        release.pk,
        release.dataset.name,
        release.mechanism,
        status,
        plain_number(release.epsilon),
        plain_number(release.delta),
        release.neighbouring,
        release.requested_by.username,
        shown_time(release.created_at, exact=exact).isoformat(),
        finished.isoformat() if finished else "",
    ]


def _invalid_filters(form, page_name):
    """A CSV export never silently ignores a filter: say which one is wrong instead."""
    problems = "; ".join(
        f"{form.fields[name].label if name in form.fields else 'Dates'}: {' '.join(errors)}"
        for name, errors in form.errors.items()
    )
    return HttpResponseBadRequest(
        f"Nothing was exported because a filter is not valid ({problems}). Go back to "
        f"{reverse(page_name)}, correct it and download again.",
        content_type="text/plain; charset=utf-8",
    )


def _csv_download(filename, header, rows):
    """A CSV attachment with every text cell escaped against spreadsheet formula injection."""
    response = attachment(b"", filename, "text/csv; charset=utf-8")
    writer = csv.writer(response, lineterminator="\r\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(
            [escape_cell(f"{cell:f}" if isinstance(cell, Decimal) else str(cell)) for cell in row]
        )
    return response


LEDGER_HEADER = [
    "when",
    "entry",
    "release",
    "release_status",
    "method",
    "requested_by",
    "epsilon",
    "delta",
    "epsilon_spent_so_far",
    "delta_spent_so_far",
    "allotment_of",
]


def _ledger(request, pk):
    """The dataset (404 unless the user owns or audits it), its ledger entries as the user may
    see them, and whether times are shown exactly (owners) or to the minute (auditors)."""
    dataset = dataset_for_reader(request.user, pk)
    exact = is_owner(request.user, dataset)
    entries = dataset.ledger.select_related(
        "release", "release__requested_by", "analyst__user", "analyst__invitation"
    )
    if not exact:  # auditors see entries (e.g. a refund when a release fails) on the minute
        entries = entries.filter(created_at__lt=timing.last_whole_minute())
    entries = list(entries)
    for entry in entries:
        entry.shown_when = shown_time_text(entry.created_at, exact=exact)
    return dataset, entries, exact


def _ledger_row(entry) -> list:
    """One ledger entry as the ledger page shows it (LEDGER_HEADER; a refund's or a return's
    ε and δ with -). An allotment's reservation or return names no release unless a release
    was its reason (an approved request, a refund back into the allotment)."""
    sign = "-" if entry.sign < 0 else ""
    release = entry.release
    return [
        entry.shown_when,
        entry.get_kind_display(),
        entry.release_id or "",
        release.get_status_display() if release else "",
        method_title(release.mechanism) if release else "",
        release.requested_by.username if release else "",
        sign + plain_number(entry.epsilon),
        (sign if entry.delta else "") + plain_number(entry.delta),
        plain_number(entry.epsilon_spent_after),
        plain_number(entry.delta_spent_after),
        entry.analyst.name if entry.analyst_id else "",
    ]


@require_GET
def dataset_ledger_csv(request, pk):
    """The ledger page's table as CSV: the same readers, entries and cells (spreadsheet-safe)."""
    dataset, entries, _ = _ledger(request, pk)
    rows = (_ledger_row(entry) for entry in entries)
    return _csv_download(
        f"ledger-dataset-{dataset.pk}-{date.today():%Y%m%d}.csv", LEDGER_HEADER, rows
    )


@require_GET
def dataset_ledger(request, pk):
    dataset, entries, exact = _ledger(request, pk)
    return render(
        request,
        "dpportal/audit/ledger.html",
        {
            "dataset": dataset,
            "entries": entries,
            "figure": ledger_figure(dataset, entries, exact=exact),
            "nav": "releases",
        },
    )


def ledger_figure(dataset, entries, *, exact) -> dict:
    """A plotly figure (as JSON data) of ε spent over time, stepping at each ledger entry and
    ending now at the spend after the last entry; times to the minute unless `exact`."""
    times = [dataset.created_at] + [e.created_at for e in entries] + [timezone.now()]
    spent = [0.0] + [float(e.epsilon_spent_after) for e in entries]
    spent.append(spent[-1])
    times = [shown_time(t, exact=exact).isoformat() for t in times]
    total = float(dataset.epsilon_total)
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "Spent",
                "x": times,
                "y": spent,
                "line": {"shape": "hv", "color": "#0b5cad"},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "Total budget",
                "x": [times[0], times[-1]],
                "y": [total, total],
                "line": {"dash": "dash", "color": "#a4121c"},
            },
        ],
        "layout": {
            "xaxis": {"title": {"text": "When"}},
            "yaxis": {
                "title": {"text": "Privacy budget spent (ε)"},
                "range": [0, max([total, *spent]) * 1.1 or 1],
            },
            "margin": {"t": 40, "r": 20},
            "legend": {"orientation": "h", "x": 0, "y": 1.12},
        },
    }


@require_GET
def audit_log(request):
    form, events = filtered_events(request)
    page = Paginator(events, 100).get_page(request.GET.get("page"))
    visible: dict[int, frozenset[str]] = {}
    rows = [
        (
            event,
            shown_time_text(event.created_at, exact=is_owner(request.user, event.dataset)),
            shown_details(event, request.user, visible),
        )
        for event in page.object_list
    ]
    return render(
        request,
        "dpportal/audit/log.html",
        {
            "form": form,
            "page": page,
            "rows": rows,
            "nav": "audit",
            "query": _query_without(request, "page"),
        },
    )


@require_GET
def audit_log_csv(request):
    form, events = filtered_events(request)
    if form.is_bound and not form.is_valid():
        return _invalid_filters(form, "audit_log")
    header = [
        "event",
        "when",
        "who",
        "action",
        "dataset",
        "release",
        "from",
        "details",
        "previous_hash",
        "hash",
    ]
    visible: dict[int, frozenset[str]] = {}
    rows = (
        [
            e.pk,
            shown_time(e.created_at, exact=is_owner(request.user, e.dataset)).isoformat(),
            e.actor_name or "system",
            e.action,
            e.dataset.name if e.dataset else "",
            e.release_id or "",
            e.remote_addr or "",
            "; ".join(
                f"{k}={v}" for k, v in sorted(shown_details(e, request.user, visible).items())
            ),
            e.previous_hash,
            e.hash,
        ]
        for e in events.iterator()
    )
    return _csv_download(f"audit-log-{date.today():%Y%m%d}.csv", header, rows)
