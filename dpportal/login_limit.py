"""Login rate limiting: too many failed logins for one user name, or from one address, block
further attempts for a while (HTTP 429) without checking the password.

Counters live in the cache (set DPPORTAL_CACHE_URL to a Redis URL so that every web process
shares them). Limits: DPPORTAL_LOGIN_MAX_FAILURES per user name and
DPPORTAL_LOGIN_MAX_FAILURES_PER_ADDRESS per client address, within
DPPORTAL_LOGIN_LOCKOUT_SECONDS of the first failure.
"""

import functools
import hashlib
import logging

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.shortcuts import render

logger = logging.getLogger(__name__)


def client_address(request) -> str:
    """The client's IP: behind the TLS proxy, the address the proxy appended last."""
    if settings.SECURE_PROXY_SSL_HEADER and request.META.get("HTTP_X_FORWARDED_FOR"):
        return request.META["HTTP_X_FORWARDED_FOR"].split(",")[-1].strip()
    return request.META.get("REMOTE_ADDR", "")


def _keys(username: str, address: str) -> dict[str, str]:
    digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()
    return {"user": f"login-failures:user:{digest}", "address": f"login-failures:addr:{address}"}


def _limits() -> dict[str, int]:
    return {"user": settings.LOGIN_MAX_FAILURES,
            "address": settings.LOGIN_MAX_FAILURES_PER_ADDRESS}


def login_blocked(username: str, address: str) -> bool:
    counts = cache.get_many(list(_keys(username, address).values()))
    return any(
        counts.get(key, 0) >= _limits()[kind] for kind, key in _keys(username, address).items()
    )


def record_failure(username: str, address: str) -> None:
    for key in _keys(username, address).values():
        cache.add(key, 0, timeout=settings.LOGIN_LOCKOUT_SECONDS)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=settings.LOGIN_LOCKOUT_SECONDS)


def clear_user_failures(username: str) -> None:
    cache.delete(_keys(username, "")["user"])


def rate_limited(login_view):
    """Wrap a login view (the portal's or the admin's): refuse to check passwords once the
    failure limit is reached, count failed attempts, and forget them after a success."""

    @functools.wraps(login_view)
    def view(request, *args, **kwargs):
        if request.method != "POST":
            return login_view(request, *args, **kwargs)
        username, address = request.POST.get("username", ""), client_address(request)
        if login_blocked(username, address):
            return _refusal(request)
        response = login_view(request, *args, **kwargs)
        if request.user.is_authenticated:
            clear_user_failures(username)
        else:
            record_failure(username, address)
        return response

    return view


def _refusal(request):
    logger.warning("Login blocked after repeated failures from %s", client_address(request))
    minutes = max(1, settings.LOGIN_LOCKOUT_SECONDS // 60)
    messages.error(request, (
        f"Too many failed login attempts. Wait {minutes} minutes and try again, "
        "or ask your administrator to reset your password."
    ))
    context = {"form": AuthenticationForm(request), "next": request.POST.get("next", "")}
    return render(request, "registration/login.html", context, status=429)
