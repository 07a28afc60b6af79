"""Thin views: check permission, validate a form, call one service, render or redirect."""

from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .access import datasets_visible_to, releases_visible_to
from .models import AuditEvent


def home(request):
    datasets = datasets_visible_to(request.user).filter(deleted_at__isnull=True)
    releases = releases_visible_to(request.user).select_related("dataset")[:10]
    return render(request, "dpportal/home.html", {"datasets": datasets, "releases": releases})


def release_list(request):
    releases = releases_visible_to(request.user).select_related("dataset", "requested_by")
    return render(request, "dpportal/release_list.html", {"releases": releases})


def audit_log(request):
    visible = datasets_visible_to(request.user)
    events = AuditEvent.objects.filter(dataset__in=visible).select_related("dataset")
    own = AuditEvent.objects.filter(actor=request.user, dataset__isnull=True)
    events = (events | own).order_by("-pk")[:500]
    return render(request, "dpportal/audit_log.html", {"events": events})


@login_not_required
@require_GET
def healthz(request):
    """Liveness for load balancers and compose: the database answers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
