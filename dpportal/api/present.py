"""The JSON shape of what the API returns, under the same visibility rules as the pages.

Owners see everything; auditors see what the dataset and release pages show them: raw-file
facts only as `access.facts_visible_to` allows, times cut to the minute and release states as
of the last whole minute (`timing`, T10), no failure reasons, no mechanism parameters (some
are derived from the number of rows), no raw column header before a schema is confirmed.
"""

from django.urls import reverse

from dpportal.access.rules import is_owner, raw_facts
from dpportal.access.timing import shown_time
from dpportal.core.formatting import plain_number
from dpportal.releases import packaging
from dpportal.releases.presentation import GENERIC_FAILURE, progress_payload, release_as_seen
from dpportal.releases.risk_words import release_risk


def when(moment, *, exact: bool) -> str | None:
    shown = shown_time(moment, exact=exact)
    return shown.isoformat() if shown else None


def budget_json(dataset) -> dict:
    """ε and δ as exact decimal strings (never floats)."""
    return {
        name: plain_number(getattr(dataset, name))
        for name in (
            "epsilon_total",
            "epsilon_spent",
            "epsilon_remaining",
            "delta_total",
            "delta_spent",
            "delta_remaining",
        )
    }


def dataset_json(dataset, user) -> dict:
    owner = is_owner(user, dataset)
    data = {
        "id": dataset.pk,
        "name": dataset.name,
        "description": dataset.description,
        "owner": dataset.owner.get_username(),
        "you_own_it": owner,
        "created_at": when(dataset.created_at, exact=owner),
        "deleted": dataset.is_deleted,
        "neighbouring": dataset.neighbouring,
        "budget": budget_json(dataset),
        "schema_confirmed": dataset.schema_confirmed,
        "schema": dataset.schema if dataset.schema_confirmed else None,
        "raw_facts": raw_facts(user, dataset),
        "url": reverse("api_dataset_detail", args=[dataset.pk]),
    }
    if owner:
        data["columns"] = list(dataset.columns)
    return data


def release_json(user, pk) -> dict:
    """A release as the user may see it (404 for others), with its progress."""
    release, owner = release_as_seen(user, pk)
    error = release.error_message if owner else GENERIC_FAILURE
    data = {
        "id": release.pk,
        "dataset": release.dataset_id,
        "mechanism": release.mechanism,
        "columns": release.columns,
        "epsilon": plain_number(release.epsilon),
        "delta": plain_number(release.delta),
        "neighbouring": release.neighbouring,
        "requested_by": release.requested_by.get_username(),
        "created_at": when(release.created_at, exact=owner),
        "status": release.status,
        "progress": progress_payload(release, owner),
        "error": error if release.status == release.Status.FAILED else "",
        "files": [],
        "url": reverse("api_release_detail", args=[release.pk]),
        "risk": release_risk(release),
    }
    if owner:
        data["params"] = release.params
    if release.status == release.Status.DONE:
        data["files"] = [
            {"name": name, "url": reverse("api_release_file", args=[release.pk, name])}
            for name in packaging.package_names(release)
        ]
        data["package_url"] = reverse("api_release_package", args=[release.pk])
    return data


def ledger_json(entry, *, exact: bool) -> dict:
    return {
        "id": entry.pk,
        "release": entry.release_id,
        "kind": entry.kind,
        "epsilon": plain_number(entry.epsilon),
        "delta": plain_number(entry.delta),
        "epsilon_spent_after": plain_number(entry.epsilon_spent_after),
        "delta_spent_after": plain_number(entry.delta_spent_after),
        "created_at": when(entry.created_at, exact=exact),
        "allotment_of": entry.analyst.name if entry.analyst_id else None,
    }
