"""Login rate limiting: too many failed logins for one user name, or from one address, block
further attempts for a while (HTTP 429) without checking the password.

Guarantees:
- The user-name counter is keyed on the name exactly as Django's sign-in looks it up (the
  login form strips it and NFKC-normalises it), so `ｖｉｃ`, `ⅴic` and `𝐯𝐢𝐜` share the counter
  of `vic`. Case is kept: Django's user names are case-sensitive (`Vic` and `vic` are two
  accounts, and `VIC` never signs in as `vic`), so they have separate counters.
- Each attempt is counted (an atomic increment) *before* its password is checked, and is
  refused if that count passes the limit: however many requests arrive at once, at most
  DPPORTAL_LOGIN_MAX_FAILURES passwords are checked per name per lockout period.
- If the counters cannot be reached (the cache's Redis is down), logins are refused with a
  clear message (HTTP 503); the rest of the site keeps working.

Counters live in the cache: DPPORTAL_CACHE_URL must be a Redis URL so that every web process
shares them (`check --deploy` reports an error otherwise, dpportal/checks.py). Limits:
DPPORTAL_LOGIN_MAX_FAILURES per user name and DPPORTAL_LOGIN_MAX_FAILURES_PER_ADDRESS per
client address, within DPPORTAL_LOGIN_LOCKOUT_SECONDS of the first failure.
"""

import functools
import hashlib
import ipaddress
import logging

import redis
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.forms import AuthenticationForm, UsernameField
from django.core.cache import cache
from django.shortcuts import render

logger = logging.getLogger(__name__)

# What a cache backend raises when its server cannot be reached.
CACHE_ERRORS = (redis.RedisError, OSError)


def client_address(request) -> str:
    """The client's IP address, for the login limit and the audit log's "From".

    REMOTE_ADDR, unless it is one of DPPORTAL_TRUSTED_PROXIES: then the right-most entry of
    X-Forwarded-For that is not itself a trusted proxy (entries further left were written by
    the client and may be forged). With no trusted proxy configured the header is ignored.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = trusted_proxies()
    if not _within(remote, proxies):
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [h for h in hops if h]
    for hop in reversed(hops):
        if not _within(hop, proxies):
            return hop
    return hops[0] if hops else remote


def trusted_proxies() -> tuple:
    return _parse_networks(tuple(settings.DPPORTAL_TRUSTED_PROXIES))


@functools.lru_cache(maxsize=8)
def _parse_networks(entries: tuple[str, ...]) -> tuple:
    """IP networks of the setting; entries that are not addresses are skipped (the system
    check dpportal.E002 reports them)."""
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue
    return tuple(networks)


def _within(address: str, networks) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip.version == net.version and ip in net for net in networks)


def login_name(raw: str) -> str:
    """The user name as Django's sign-in looks it up: AuthenticationForm's UsernameField strips
    it and NFKC-normalises it, and ModelBackend then matches it exactly (case-sensitively)."""
    return UsernameField().to_python(raw) or ""


def _keys(username: str, address: str) -> dict[str, str]:
    digest = hashlib.sha256(login_name(username).encode()).hexdigest()
    return {"user": f"login-failures:user:{digest}", "address": f"login-failures:addr:{address}"}


def _limits() -> dict[str, int]:
    return {"user": settings.LOGIN_MAX_FAILURES, "address": settings.LOGIN_MAX_FAILURES_PER_ADDRESS}


def _increment(key: str) -> int:
    """Add one to a counter that expires LOGIN_LOCKOUT_SECONDS after it was created (Redis
    INCR: atomic across processes)."""
    timeout = settings.LOGIN_LOCKOUT_SECONDS
    cache.add(key, 0, timeout=timeout)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr: this is a first failure again
        cache.set(key, 1, timeout=timeout)
        return 1
    if count == 1:  # first failure, or INCR re-created an expired key without a timeout
        cache.touch(key, timeout)
    return count


def _decrement(key: str) -> None:
    try:
        cache.decr(key)
    except ValueError:  # already expired
        pass


def reserve_attempt(username: str, address: str) -> bool:
    """Count this attempt as a failure before its password is checked. False (and nothing
    counted) when a counter had already reached its limit: the password must not be checked."""
    counted = []
    for kind, key in _keys(username, address).items():
        counted.append(key)
        if _increment(key) > _limits()[kind]:
            for taken in counted:
                _decrement(taken)
            return False
    return True


def reserve_address_attempt(address: str) -> bool:
    """The same per-address counter for a credential without a user name (an API token):
    counted before the token is looked up; False (nothing counted) once the limit is reached."""
    key = _keys("", address)["address"]
    if _increment(key) > _limits()["address"]:
        _decrement(key)
        return False
    return True


def forget_address_attempt(address: str) -> None:
    """After a valid API token: take back the address's count (as after a good sign-in)."""
    _decrement(_keys("", address)["address"])


def forget_attempt(username: str, address: str) -> None:
    """After a successful login: clear the name's failures and take back the address's count."""
    keys = _keys(username, address)
    cache.delete(keys["user"])
    _decrement(keys["address"])


def rate_limited(login_view):
    """Wrap a login view (the portal's or the admin's): refuse to check passwords once the
    failure limit is reached, count failed attempts, and forget them after a success."""

    @functools.wraps(login_view)
    def view(request, *args, **kwargs):
        if request.method != "POST":
            return login_view(request, *args, **kwargs)
        username, address = request.POST.get("username", ""), client_address(request)
        try:
            allowed = reserve_attempt(username, address)
        except CACHE_ERRORS:
            logger.exception("Login refused: the login-failure counters cannot be reached")
            return _refusal(request, status=503)
        if not allowed:
            logger.warning("Login blocked after repeated failures from %s", address)
            return _refusal(request, status=429)
        response = login_view(request, *args, **kwargs)
        if request.user.is_authenticated:
            try:
                forget_attempt(username, address)
            except CACHE_ERRORS:
                logger.exception("Could not clear the login-failure counters after a login")
        return response

    return view


def _refusal(request, status: int):
    if status == 429:
        minutes = max(1, settings.LOGIN_LOCKOUT_SECONDS // 60)
        text = (
            f"Too many failed login attempts. Wait {minutes} minutes and try again, "
            "or ask your administrator to reset your password."
        )
    else:
        text = (
            "Signing in is unavailable right now: the server cannot reach the store that "
            "counts failed logins. Nothing was checked. Try again in a few minutes; if it "
            "persists, tell your administrator (the cache's Redis is down)."
        )
    messages.error(request, text)
    context = {"form": AuthenticationForm(request), "next": request.POST.get("next", "")}
    response = render(request, "registration/login.html", context, status=status)
    if status == 503:
        response["Retry-After"] = "60"
    return response
