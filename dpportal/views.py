"""Thin views: check permission, validate a form, call one service, render or redirect."""

from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .access import datasets_visible_to, releases_visible_to


def home(request):
    datasets = datasets_visible_to(request.user).filter(deleted_at__isnull=True)
    releases = releases_visible_to(request.user).select_related("dataset")[:10]
    return render(
        request,
        "dpportal/home.html",
        {"datasets": datasets, "releases": releases, "nav": "datasets"},
    )


@login_not_required
@require_GET
def healthz(request):
    """Liveness for load balancers and compose: the database answers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
