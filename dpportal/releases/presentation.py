"""A release as its reader may see it: the one source for the release pages and the API.

Owners see everything, live. Auditors see the release as it was at the last whole minute, no
step counts, elapsed time in whole minutes and no failure reason (T10 and
dpportal/access/timing.py). Everyone else gets 404, never 403.
"""

from typing import Any

from django.http import Http404
from django.utils import timezone

from dpportal.access.rules import releases_visible_to
from dpportal.access.timing import shown_duration_text, shown_status
from dpportal.core.users import AnyUser
from dpportal.models import Release
from dpportal.releases import catalogue

GENERIC_FAILURE = "The release failed; the custodian can see why."


def release_for_reader(user: AnyUser, pk: int) -> Release:
    """The release if the user owns or audits its dataset; otherwise 404."""
    release = (
        releases_visible_to(user).filter(pk=pk).select_related("dataset", "requested_by").first()
    )
    if release is None:
        raise Http404("No such release.")
    return release


def release_for_owner(user: AnyUser, pk: int) -> Release:
    """The release if the user owns its dataset; otherwise 404 (auditors included)."""
    release = release_for_reader(user, pk)
    if release.dataset.owner_id != user.pk:
        raise Http404("No such release.")
    return release


def release_as_seen(user: AnyUser, pk: int) -> tuple[Release, bool]:
    """The release and whether the user owns it. Auditors get it as it was at the last whole
    minute (this copy is for display only and never saved): watching the job page or its
    progress endpoint must not time a run to the second (T10)."""
    release = release_for_reader(user, pk)
    is_owner = release.dataset.owner_id == user.pk
    status = shown_status(release, exact=is_owner)
    if status != release.status:
        release.status = status
        release.finished_at = None
        if status == Release.Status.QUEUED:
            release.started_at = None
    return release, is_owner


def progress_payload(release: Release, is_owner: bool) -> dict[str, Any]:
    """Status and progress for the job page. Auditors get only coarse state: the status as of
    the last whole minute (see release_as_seen), no step counts (each step's moment would time
    the run) and the elapsed time in whole minutes. Owners, who can see the data anyway, get
    live steps and exact times."""
    done, total = release.progress_done, release.progress_total
    if not is_owner:
        done = total = 0
    return {
        "status": release.status,
        "status_label": release.get_status_display(),
        "stage": _stage_label(release) if is_owner else release.get_status_display(),
        "done": done,
        "total": total,
        "percent": _percent(release) if is_owner else _percent_coarse(release),
        "elapsed": _elapsed_text(release, is_owner),
        "terminal": release.is_terminal,
    }


def _percent(release: Release) -> int:
    if release.status == Release.Status.DONE:
        return 100
    if release.progress_total:
        return min(99, round(100 * release.progress_done / release.progress_total))
    return 0


def _percent_coarse(release: Release) -> int:
    return 100 if release.status == Release.Status.DONE else 0


def _stage_label(release: Release) -> str:
    if release.status == Release.Status.QUEUED:
        return "Waiting for a worker"
    if release.status != Release.Status.RUNNING:
        return release.get_status_display()
    return catalogue.stage_label(
        release.mechanism, release.progress_stage, release.progress_done, release.progress_total
    )


def _elapsed_text(release: Release, is_owner: bool) -> str:
    if release.started_at is None:
        return ""
    end = release.finished_at or timezone.now()
    seconds = max(0, (end - release.started_at).total_seconds())
    return shown_duration_text(seconds, exact=is_owner)
