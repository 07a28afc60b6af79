"""What times non-owners may see (T10): run times can hint at the noise drawn, so every
timestamp and duration shown to someone who does not own the dataset (an auditor) is cut to
the whole minute, and a release's state is shown to them as it was at the last whole minute.
Owners see exact values."""

from datetime import datetime
from typing import overload

from django.db.models import Case, CharField, F, Value, When
from django.utils import timezone
from django.utils.dateformat import format as format_date

from dpportal.models import Release


@overload
def shown_time(moment: datetime, *, exact: bool) -> datetime: ...
@overload
def shown_time(moment: None, *, exact: bool) -> None: ...
def shown_time(moment: datetime | None, *, exact: bool) -> datetime | None:
    """The moment itself for owners; otherwise cut down to the start of its minute."""
    if moment is None or exact:
        return moment
    return moment.replace(second=0, microsecond=0)


def shown_time_text(moment: datetime | None, *, exact: bool) -> str:
    """'Y-m-d H:i:s' (UTC or the site's zone) for owners, 'Y-m-d H:i' for everyone else."""
    if moment is None:
        return ""
    return format_date(timezone.localtime(moment), "Y-m-d H:i:s" if exact else "Y-m-d H:i")


def shown_duration_text(seconds: float, *, exact: bool) -> str:
    """'4.2 s' or '3 min 12 s' for owners; 'about N min' (never under 1) for everyone else."""
    if not exact:
        return f"about {max(1, round(seconds / 60))} min"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def last_whole_minute() -> datetime:
    """The moment non-owners see the world as of: state changes reach them on the minute."""
    return shown_time(timezone.now(), exact=False)


def shown_status(release, *, exact: bool) -> str:
    """The release's status for owners; for everyone else its status at the last whole minute,
    so watching a page does not time when a release started or finished."""
    if exact:
        return release.status
    cutoff = last_whole_minute()
    if release.finished_at is not None and release.finished_at < cutoff:
        return release.status
    if release.started_at is not None and release.started_at < cutoff:
        return Release.Status.RUNNING
    return Release.Status.QUEUED


def shown_status_field(user):
    """shown_status as a database expression, so that filtering and sorting releases by status
    agree with what the user sees (an annotation, e.g. `shown_status=shown_status_field(user)`)."""
    cutoff = last_whole_minute()
    return Case(
        When(dataset__owner=user, then=F("status")),
        When(finished_at__lt=cutoff, then=F("status")),
        When(started_at__lt=cutoff, then=Value(Release.Status.RUNNING)),
        default=Value(Release.Status.QUEUED),
        output_field=CharField(),
    )
