"""T20: the cross-tenant access matrix over every URL pattern in the URLconf.

Routes are enumerated from the URLconf, so views added later are covered automatically. For each
route × {anonymous, other custodian, auditor, owner} × {GET, POST, DELETE}:
- anonymous users are sent to the login page;
- another custodian gets exactly what a non-existent object gives (404, or 405 for a method
  the view never accepts) and never sees the owner's dataset name;
- auditors read only the views in AUDITOR_READABLE, never see a custodian-only section,
  everything else (and any POST or DELETE to an object) answers 403/404/405, and nothing
  an auditor does (GET or POST, to any route) changes a dataset, release or ledger row;
- neither sees a value planted in the owner's raw file (RAW_CANARIES);
- the owner gets no 404;
- nobody ever gets a server error (a view exception is recorded as a failure, named).
"""

import re
from types import SimpleNamespace

import pytest
from django.http import HttpResponse
from django.test import override_settings
from django.urls import URLPattern, URLResolver, get_resolver, path, reverse

from dpportal.access import dataset_for_reader
from dpportal.models import BudgetLedgerEntry, Dataset, Release
from tests.conftest import CANARY, RAW_CANARIES
from tests.helpers import client_for, enumerate_routes, object_kwargs

pytestmark = pytest.mark.django_db


# URL names an auditor may read (GET). Every other route must refuse auditors.
AUDITOR_READABLE = {
    "home",
    "release_list",
    "release_list_csv",
    "audit_log",
    "audit_log_csv",
    "logout",
    "password_change",
    "password_change_done",
    "dataset_ledger",
    "dataset_detail",
    "release_detail",
    "release_progress",
    "release_download_zip",
    "release_download_file",
}
# Routes anyone may reach without logging in.
PUBLIC = {"login", "healthz"}
# A release's public page and files (public_views): the same answer for every role, signed in
# or not; the world's release was never published, so that answer is 404, as for no release.
PUBLIC_PAGES = {"public_release", "public_release_file", "public_report_css"}
REFUSED = {403, 404, 405}
# How pages mark what is computed from the raw data (never shown to auditors).
CUSTODIAN_ONLY = re.compile(rb'class="custodian-only"|Custodian-only: not part of the release')


def state_snapshot():
    return (
        list(Dataset.objects.order_by("pk").values()),
        list(Release.objects.order_by("pk").values()),
        list(BudgetLedgerEntry.objects.order_by("pk").values()),
    )


def check_matrix(world, routes):
    """Run the matrix; return (failures, number of requests)."""
    failures, requests = [], 0
    users = {
        "anonymous": None,
        "other custodian": world.bob,
        "auditor": world.carol,
        "owner": world.alice,
    }
    clients = {
        role: SimpleNamespace(client=client_for(user), user=user) for role, user in users.items()
    }

    def fail(role, method, name, response, why):
        failures.append(f"{role} {method} {name}: {response.status_code} ({why})")

    before = state_snapshot()
    for role in ("anonymous", "other custodian", "auditor", "owner"):
        methods = ("GET", "POST", "DELETE") if role != "owner" else ("GET", "DELETE")
        for method in methods:
            for name, _route, kwarg_names in routes:
                requests += 1
                url = reverse(name, kwargs=object_kwargs(name, kwarg_names, world))
                response = send(clients[role], method, url)
                judge(role, method, name, kwarg_names, response, world, clients, fail)
        if role == "auditor" and state_snapshot() != before:
            failures.append("auditor requests changed a dataset, release or ledger row")
    for name, _route, kwarg_names in routes:  # owner POSTs last: they may change state
        requests += 1
        url = reverse(name, kwargs=object_kwargs(name, kwarg_names, world))
        response = send(clients["owner"], "POST", url)
        if response.status_code >= 500:
            fail(
                "owner", "POST", name, response, getattr(response, "exception_text", "server error")
            )
    return failures, requests


def send(actor, method, url):
    """The response; a view exception becomes a 500 whose reason names the exception.

    Signed-in roles are signed in again if a previous request (a POST to logout) ended the
    session, so every request is judged for the role it claims to be.
    """
    client = actor.client
    if actor.user is not None and "_auth_user_id" not in client.session:
        client.force_login(actor.user)
    try:
        if method == "DELETE":
            return client.delete(url)
        return client.get(url) if method == "GET" else client.post(url, {})
    except Exception as exc:  # noqa: BLE001  (any exception is a failure to report)
        response = HttpResponse(status=500)
        response.exception_text = f"{type(exc).__name__}: {exc}"
        return response


def judge(role, method, name, kwarg_names, response, world, clients, fail):
    status = response.status_code
    if status >= 500:
        why = getattr(response, "exception_text", "server error")
        return fail(role, method, name, response, why)
    if name in PUBLIC_PAGES:
        expected = 405 if method != "GET" else 404 if kwarg_names else 200
        if status != expected:
            fail(role, method, name, response, f"a public route answers {expected} to everyone")
        return None
    if role == "anonymous":
        if name not in PUBLIC and not (
            status == 302 and response["Location"].startswith(reverse("login"))
        ):
            fail(role, method, name, response, "expected a redirect to the login page")
        return None
    if role == "other custodian":
        if CANARY.encode() in response.content:
            fail(role, method, name, response, "shows the other tenant's dataset name")
        if kwarg_names:
            missing = reverse(name, kwargs=object_kwargs(name, kwarg_names, world, missing=True))
            baseline = send(clients[role], method, missing).status_code
            if status not in (404, 405) or status != baseline:
                fail(role, method, name, response, f"a missing object gives {baseline}")
        return None
    if role != "owner" and any(c.encode() in response.content for c in RAW_CANARIES.values()):
        fail(role, method, name, response, "shows a value from the raw file")
    if role == "auditor" and CUSTODIAN_ONLY.search(response.content):
        fail(role, method, name, response, "shows a custodian-only section")
    if role == "auditor" and kwarg_names:
        readable = name in AUDITOR_READABLE
        if readable and method == "GET" and status != 200:
            fail(role, method, name, response, "auditors may read this view")
        if not readable and status not in REFUSED:
            fail(role, method, name, response, "auditors must be refused")
        if readable and method != "GET" and status not in REFUSED:
            fail(role, method, name, response, "auditors may only read (GET) this view")
        return None
    if role == "owner" and status == 404:
        fail(role, method, name, response, "the owner must reach their own objects")
    return None


def test_the_access_matrix_has_no_failures(world, a_minute_later):
    routes = enumerate_routes()
    object_routes = [r for r in routes if r[2]]
    failures, requests = check_matrix(world, routes)
    print(
        f"\nT20 access matrix: {len(routes)} routes ({len(object_routes)} object-bearing) × "
        f"4 roles × GET/POST/DELETE = {requests} requests; {len(failures)} failures; "
        f"0 server errors allowed, 0 cross-tenant reads allowed"
    )
    print("object-bearing routes: " + ", ".join(sorted(r[0] for r in object_routes)))
    assert failures == [], "\n".join(failures)
    owner_page = client_for(world.alice).get(
        reverse("release_detail", kwargs={"pk": world.release.pk})
    )
    assert CUSTODIAN_ONLY.search(owner_page.content)  # the marker the auditor check looks for


def unnamed_routes(resolver=None, prefix=""):
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver) and entry.app_name != "admin":
            yield from unnamed_routes(entry, route)
        elif isinstance(entry, URLPattern) and not entry.name and not route.startswith("admin/"):
            yield route


def test_every_route_has_a_name_so_the_matrix_covers_it():
    assert list(unnamed_routes()) == []


def test_the_enumeration_finds_the_portals_routes():
    names = {name for name, _route, _kwargs in enumerate_routes()}
    assert {"home", "release_list", "audit_log", "dataset_ledger", "login"} <= names
    assert not any(name.startswith("admin") for name in names)


def test_the_ledger_is_readable_by_owner_and_auditor_only(world, a_minute_later):
    assert dataset_for_reader(world.carol, world.dataset.pk) == world.dataset
    url = reverse("dataset_ledger", kwargs={"pk": world.dataset.pk})
    assert client_for(world.alice).get(url).status_code == 200
    assert client_for(world.carol).get(url).status_code == 200
    assert client_for(world.bob).get(url).status_code == 404


# Deliberately broken twins: a view that shows any dataset to any logged-in user, one that
# lets auditors change state, and two under auditor-readable names that show a custodian-only
# section and a raw value. The matrix must catch all four.
def leaky_dataset_view(request, pk):
    dataset = Dataset.objects.filter(pk=pk).first()
    return HttpResponse(dataset.name if dataset else "none")


def custodian_only_view(request, pk):
    return HttpResponse('<section class="custodian-only">true counts</section>')


def raw_peek_view(request, pk):
    from dpportal.release_engine import load_columns

    dataset = Dataset.objects.filter(pk=pk).first()
    return HttpResponse(load_columns(dataset, ["workclass"]).iloc[0, 0] if dataset else "none")


def auditor_writable_view(request, pk):
    if request.method == "POST":
        Dataset.objects.filter(pk=pk).update(description="changed")
    return HttpResponse("ok")


urlpatterns = [
    path("twin/datasets/<int:pk>/leak/", leaky_dataset_view, name="dataset_leak"),
    path("twin/datasets/<int:pk>/write/", auditor_writable_view, name="dataset_write"),
    path("twin/datasets/<int:pk>/detail/", custodian_only_view, name="dataset_detail"),
    path("twin/datasets/<int:pk>/raw/", raw_peek_view, name="dataset_ledger"),
    path("accounts/login/", lambda request: HttpResponse("login"), name="login"),
]


@override_settings(ROOT_URLCONF=__name__)
def test_the_matrix_catches_a_leaky_view_and_an_auditor_write(world):
    failures, _ = check_matrix(world, enumerate_routes(get_resolver(__name__)))
    text = "\n".join(failures)
    assert "other custodian GET dataset_leak" in text
    assert "shows the other tenant's dataset name" in text
    assert "auditor POST dataset_write: 200 (auditors must be refused)" in text
    assert "auditor requests changed a dataset, release or ledger row" in text
    assert "auditor GET dataset_detail: 200 (shows a custodian-only section)" in text
    assert "auditor POST dataset_detail: 200 (auditors may only read (GET) this view)" in text
    assert "auditor GET dataset_ledger: 200 (shows a value from the raw file)" in text
