"""The audit events a user may see, as the audit log page, its CSV export and the API show them.

Owners see their datasets' events at once and every detail; auditors see events on the minute
(T10: polling the log must not time a release to the second) and no raw-data fact the access
rules keep from them (`dpportal.access.rules.facts_visible_to`). Everyone sees their own
sign-in events, which belong to no dataset.
"""

from typing import Any

from django.db.models import Q, QuerySet
from django.http import HttpRequest

from dpportal.access import timing
from dpportal.access.rules import datasets_visible_to, facts_visible_to
from dpportal.audit.forms import AuditFilterForm
from dpportal.core.users import AnyUser
from dpportal.models import AuditEvent

# Event details that are raw-data facts (facts_visible_to decides who sees each); every other
# detail is public to whoever may see the event.
DETAIL_FACTS = {
    "sha256": "sha256",
    "rows": "row_count",
    "row_count": "row_count",
    "size_bytes": "size_bytes",
    "reason": "failure_reason",
}
UPLOAD_DETAIL_FACTS = {**DETAIL_FACTS, "file": "original_filename"}  # elsewhere: a package file


def events_visible_to(user: AnyUser) -> QuerySet[AuditEvent]:
    """Events of the user's datasets (of datasets they only audit: up to the last whole
    minute) and their own sign-ins."""
    visible = datasets_visible_to(user).values("pk")
    on_the_minute = Q(dataset__owner=user) | Q(created_at__lt=timing.last_whole_minute())
    return AuditEvent.objects.filter(
        (Q(dataset__in=visible) & on_the_minute) | Q(actor=user, dataset__isnull=True)
    ).select_related("dataset")


def filtered_events(request: HttpRequest) -> tuple[AuditFilterForm, QuerySet[AuditEvent]]:
    """The filter form bound to the request's query, and the events it keeps, newest first
    (all visible events when the form is not valid: the caller decides whether to refuse)."""
    form = AuditFilterForm(request.GET or None, datasets=datasets_visible_to(request.user))
    return form, form.apply(events_visible_to(request.user)).order_by("-pk")


def shown_details(
    event: AuditEvent, user: AnyUser, visible: dict[int, frozenset[str]] | None = None
) -> dict[str, Any]:
    """The event's details without the raw-data facts the user may not see. `visible` caches
    facts_visible_to per dataset over one page or export."""
    dataset = event.dataset
    if dataset is None:
        return event.details
    visible = {} if visible is None else visible
    if dataset.pk not in visible:
        visible[dataset.pk] = facts_visible_to(user, dataset)
    facts = UPLOAD_DETAIL_FACTS if event.action == AuditEvent.Action.UPLOAD else DETAIL_FACTS
    return {
        k: v for k, v in event.details.items() if k not in facts or facts[k] in visible[dataset.pk]
    }
