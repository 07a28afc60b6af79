"""Limits on guessing passwords and API tokens: per account, and per client address.

Guarantees:
- Per account: at most DPPORTAL_LOGIN_MAX_FAILURES passwords are checked per user name per
  lockout period, at the sign-in page, the admin's sign-in and the password-change form (its
  old password) alike: one counter per account. Each attempt is counted (an atomic increment)
  *before* its password is checked and refused (HTTP 429) if that count passes the limit, so
  however many requests arrive at once, no more are checked.
- The counter is keyed on the name exactly as Django's sign-in looks it up (the login form
  strips it and NFKC-normalises it), so `ｖｉｃ`, `ⅴic` and `𝐯𝐢𝐜` share the counter of `vic`.
  Case is kept: Django's user names are case-sensitive (`Vic` and `vic` are two accounts).
- Per address: failed attempts from one client address (wrong passwords, refused API tokens)
  are counted too. Past DPPORTAL_LOGIN_MAX_FAILURES_PER_ADDRESS, that address may still try
  the password of an account with no failed attempt of its own in the period (one check), but
  no other account, and its refused tokens get 429. So a correct password of an account that is
  not itself under attack is never refused because of other people's failures (behind a proxy
  every client may share one address), while spraying one address's guesses over many
  accounts gets one guess per account once the address is over its limit.
- A valid API token is always accepted: it is looked up first and never counted, so neither
  other people's failures nor a cache that is down refuse it.
- If the counters cannot be reached (the cache's Redis is down), passwords are not checked: the
  sign-in and the password change answer 503 with a clear message; the rest of the site, and
  valid API tokens, keep working.

Counters live in the cache: DPPORTAL_CACHE_URL must be a Redis URL so that every web process
shares them (`check --deploy` reports an error otherwise, dpportal/checks.py). Each counter
lasts DPPORTAL_LOGIN_LOCKOUT_SECONDS from its first failure.
"""

import functools
import hashlib
import ipaddress
import logging

import redis
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.forms import AuthenticationForm, UsernameField
from django.contrib.auth.views import PasswordChangeView
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
    """Count this password attempt as a failure of its account and of its address before the
    password is checked. False (and nothing counted) when it must not be checked: the account
    has used up its guesses, or the address is over its limit and this account already has a
    failed attempt of its own."""
    keys, limits = _keys(username, address), _limits()
    account_count = _increment(keys["user"])
    if account_count > limits["user"]:
        _decrement(keys["user"])
        return False
    if _increment(keys["address"]) > limits["address"] and account_count > 1:
        _decrement(keys["user"])
        _decrement(keys["address"])
        return False
    return True


def forget_attempt(username: str, address: str) -> None:
    """After a correct password: clear the account's failures and take back the address's
    count of this attempt."""
    keys = _keys(username, address)
    cache.delete(keys["user"])
    _decrement(keys["address"])


def count_refused_token(address: str) -> bool:
    """Count a refused API token against its address; True once the address is past its limit.
    Raises CACHE_ERRORS when the counter cannot be reached."""
    return _increment(_keys("", address)["address"]) > _limits()["address"]


def rate_limited(login_view):
    """Wrap a login view (the portal's or the admin's): refuse to check passwords once the
    failure limit is reached, count failed attempts, and forget them after a success."""

    @functools.wraps(login_view)
    def view(request, *args, **kwargs):
        if request.method != "POST":
            return login_view(request, *args, **kwargs)
        username, address = request.POST.get("username", ""), client_address(request)
        refusal = _reserve_or_refuse(request, username, address, _login_page)
        if refusal is not None:
            return refusal
        response = login_view(request, *args, **kwargs)
        if request.user.is_authenticated:
            _forget_quietly(username, address)
        return response

    return view


class LimitedPasswordChangeView(PasswordChangeView):
    """Django's password change, with the old password limited as a sign-in is: one counter per
    account (shared with the sign-in page), counted before the old password is checked."""

    def post(self, request, *args, **kwargs):
        username, address = request.user.get_username(), client_address(request)
        refusal = _reserve_or_refuse(request, username, address, self._form_page)
        if refusal is not None:
            return refusal
        response = super().post(request, *args, **kwargs)
        form = response.context_data["form"] if hasattr(response, "context_data") else None
        if form is None or not form.has_error("old_password", "password_incorrect"):
            _forget_quietly(username, address)  # the old password was right
        return response

    def _form_page(self, request, status):
        context = self.get_context_data(form=self.get_form_class()(user=request.user))
        return render(request, self.get_template_names(), context, status=status)


def _reserve_or_refuse(request, username, address, page):
    """None if the password may be checked (the attempt is counted); else the refusal."""
    try:
        allowed = reserve_attempt(username, address)
    except CACHE_ERRORS:
        logger.exception("Password not checked: the failure counters cannot be reached")
        return _refusal(request, page, status=503)
    if not allowed:
        logger.warning("Password attempt blocked after repeated failures from %s", address)
        return _refusal(request, page, status=429)
    return None


def _forget_quietly(username, address):
    try:
        forget_attempt(username, address)
    except CACHE_ERRORS:
        logger.exception("Could not clear the failure counters after a correct password")


def _login_page(request, status):
    context = {"form": AuthenticationForm(request), "next": request.POST.get("next", "")}
    return render(request, "registration/login.html", context, status=status)


def _refusal(request, page, status: int):
    if status == 429:
        minutes = max(1, settings.LOGIN_LOCKOUT_SECONDS // 60)
        text = (
            f"Too many failed password attempts. Wait {minutes} minutes and try again, "
            "or ask your administrator to reset your password."
        )
    else:
        text = (
            "Passwords cannot be checked right now: the server cannot reach the store that "
            "counts failed attempts. Nothing was checked. Try again in a few minutes; if it "
            "persists, tell your administrator (the cache's Redis is down)."
        )
    messages.error(request, text)
    response = page(request, status)
    if status == 503:
        response["Retry-After"] = "60"
    return response
