"""Thin views: check permission, validate a form, call one service, render or redirect."""

import threading
import time

import redis
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dpportal.access.rules import (
    active_analysts,
    datasets_visible_to,
    releases_visible_to,
    requests_visible_to,
    requests_waiting_for,
)
from dpportal.core import heartbeats
from dpportal.services.errors import ServiceError

HEALTH_CACHE_SECONDS = 2.0  # one database and one broker round trip per web process at most


def home(request):
    user = request.user
    datasets = datasets_visible_to(user).filter(deleted_at__isnull=True)
    releases = releases_visible_to(user).select_related("dataset")[:10]
    context = {
        "datasets": datasets,
        "releases": releases,
        "nav": "datasets",
        "waiting_requests": requests_waiting_for(user),
        "analyst_memberships": active_analysts(user).filter(dataset__deleted_at__isnull=True),
        "my_requests": requests_visible_to(user)
        .filter(requested_by=user)
        .select_related("dataset")[:10],
    }
    return render(request, "dpportal/core/home.html", context)


def owner_switch(request, switch, *, on: str, off: str) -> None:
    """Switch something public on or off as the owner's POST asks ("public" = "1": on) by calling
    the service `switch(public)`; a message says what now holds, or why the service refused."""
    public = request.POST.get("public") == "1"
    try:
        switch(public)
    except ServiceError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, on if public else off)


@login_not_required
@require_GET
def healthz(request):
    """Health for load balancers, compose and monitoring. 200 while this web process can serve
    (its database answers), else 503. The body also says whether the reaper and each queue's
    workers beat on time ("status": "degraded" when one stopped; dpportal/core/heartbeats.py).
    Checked at most once per HEALTH_CACHE_SECONDS per process, so that many probes at once
    cost no more than one."""
    status, body = _health.get()
    return JsonResponse(body, status=status)


class _CachedHealth:
    def __init__(self):
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._answer: tuple[int, dict] = (503, {})

    def get(self) -> tuple[int, dict]:
        with self._lock:  # the others wait for one check instead of each making their own
            if time.monotonic() - self._checked_at >= HEALTH_CACHE_SECONDS:
                self._answer = _check_health()
                self._checked_at = time.monotonic()
            return self._answer


_health = _CachedHealth()


def _check_health() -> tuple[int, dict]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return 503, {"status": "unavailable", "database": "unreachable"}
    try:
        processes = heartbeats.summary()
    except redis.RedisError:
        return 200, {"status": "degraded", "database": "ok", "broker": "unreachable"}
    stopped = [
        p for p in [processes["reaper"], *processes["workers"].values()] if p["state"] != "ok"
    ]
    return 200, {
        "status": "degraded" if stopped else "ok",
        "database": "ok",
        "broker": "ok",
        **processes,
    }
