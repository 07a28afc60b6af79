"""System checks of the deployment (`manage.py check --deploy`), beyond Django's own.

- dpportal.E001: production (DEBUG off) keeps login-failure counters in a per-process memory
  cache. Each web process would then count on its own (gunicorn runs several), multiplying the
  number of guesses allowed; set DPPORTAL_CACHE_URL to a Redis URL shared by all processes, or
  DPPORTAL_ALLOW_LOCAL_CACHE=1 for a single-process deployment.
- dpportal.E002: an entry of DPPORTAL_TRUSTED_PROXIES is not an IP address or network.
- dpportal.E003: behind a TLS proxy with no trusted proxy configured, every client appears to
  come from the proxy's address, so they all share one per-address limit of failed attempts
  (one client's failures block the others' tokens and slow their passwords) and the audit
  log's "From" shows the proxy. docker-compose.yml trusts its own network by default.
"""

import ipaddress

from django.conf import settings
from django.core.checks import Error, Tags, register

from dpportal.records import signing  # noqa: F401  (registers dpportal.E020, W020: the record's key)
from dpportal.sources import paths as source_paths  # noqa: F401  (registers dpportal.W010, on DPPORTAL_SOURCE_ROOTS)

PROCESS_LOCAL_CACHES = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
)


@register(Tags.security, deploy=True)
def check_login_counters_are_shared(app_configs=None, **kwargs):
    backend = settings.CACHES["default"]["BACKEND"]
    if settings.DEBUG or settings.DPPORTAL_ALLOW_LOCAL_CACHE or backend not in PROCESS_LOCAL_CACHES:
        return []
    return [
        Error(
            "Login-failure counters are kept in each process's memory, so every web process "
            "allows its own DPPORTAL_LOGIN_MAX_FAILURES guesses.",
            hint="Set DPPORTAL_CACHE_URL to a Redis URL shared by all web processes (e.g. "
            "redis://redis:6379/1), or DPPORTAL_ALLOW_LOCAL_CACHE=1 if exactly one web "
            "process runs.",
            id="dpportal.E001",
        )
    ]


@register(Tags.security, deploy=True)
def check_trusted_proxies(app_configs=None, **kwargs):
    problems = []
    for entry in settings.DPPORTAL_TRUSTED_PROXIES:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            problems.append(
                Error(
                    f"DPPORTAL_TRUSTED_PROXIES holds {entry!r}, which is not an IP address or "
                    "network.",
                    hint="List the proxy's addresses, e.g. 10.0.0.2,172.18.0.0/16.",
                    id="dpportal.E002",
                )
            )
    if settings.SECURE_PROXY_SSL_HEADER and not settings.DPPORTAL_TRUSTED_PROXIES:
        problems.append(
            Error(
                "DJANGO_BEHIND_TLS_PROXY is on but DPPORTAL_TRUSTED_PROXIES is empty: every client "
                "appears to come from the proxy's address, so all share one per-address limit of "
                "failed attempts, and the audit log shows the proxy.",
                hint="Set DPPORTAL_TRUSTED_PROXIES to the proxy's address as the portal sees it "
                "(docker-compose.yml: its network, 172.30.83.0/24 by default).",
                id="dpportal.E003",
            )
        )
    return problems
