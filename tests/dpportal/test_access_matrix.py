"""T20: the cross-tenant access matrix over every URL pattern in the URLconf, and the same for
every API endpoint with a token (owner, auditor, stranger, revoked, none).

Routes are enumerated from the URLconf, so views added later are covered automatically. For each
route × {anonymous, other custodian, auditor, invited auditor, owner} × {GET, POST, DELETE}:
- anonymous users are sent to the login page;
- another custodian gets exactly what a non-existent object gives (404, or 405 for a method
  the view never accepts) and never sees the owner's dataset name;
- auditors read only the views in AUDITOR_READABLE, never see a custodian-only section,
  everything else (and any POST or DELETE to an object) answers 403/404/405, and nothing
  an auditor does (GET or POST, to any route) changes a dataset, release or ledger row;
- the invited auditor (an account made from an invitation, not a custodian: issue 41, item 13)
  is held to the auditor's rules and also gets 403 from every custodian-only route
  (CUSTODIAN_ROUTES: upload, register a source, create a token, upload by API);
- the second approver (a custodian named by the owner: issue 46), an analyst (an account made
  from an invitation with an allotment, with an approved request whose release is done) and
  another analyst of the same dataset read only the routes of MEMBER_READABLE and post only to
  those of MEMBER_WRITABLE (changing nothing with an empty form); every other object route
  answers them exactly as a missing object does, without the dataset's name; the analysts get
  403 from the custodian-only routes but the token page; the other analyst never reaches the
  analyst's request;
- a valid invitation link for another address (erin's) refuses every signed-in role (403) and
  grants nothing;
- neither sees a value planted in the owner's raw file (RAW_CANARIES);
- the owner gets no 404;
- nobody ever gets a server error (a view exception is recorded as a failure, named).
"""

import re
from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver, path, reverse

from dpportal.access.rules import dataset_for_reader, datasets_visible_to
from dpportal.api.auth import api_endpoint
from dpportal.models import (
    Analyst,
    BudgetLedgerEntry,
    Dataset,
    Release,
    ReleaseRequest,
    RequestDecision,
)
from tests.conftest import CANARY, RAW_CANARIES
from tests.helpers import (
    client_for,
    enumerate_routes,
    make_analyst,
    make_request,
    make_user,
    object_kwargs,
    run_now,
)

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
    "dataset_ledger_csv",
    "dataset_detail",
    "release_detail",
    "release_progress",
    "release_download_zip",
    "release_download_file",
    "dataset_requests",
    "request_detail",
    "request_download_zip",
    "request_download_file",
}
# Object routes the approver and the analysts may read (GET) and post to (an empty form: any
# answer but a server error, and nothing changes). Every other object route answers them as a
# missing object does. The analyst's request is the world's `request`; the other analyst's
# requests are its own.
ANALYST_PAGES = {"analyst_workspace", "request_new", "request_preview", "request_plan"}
MEMBER_READABLE = {
    "approver": {
        "dataset_requests",
        "request_detail",
        "request_download_zip",
        "request_download_file",
    },
    "analyst": ANALYST_PAGES
    | {"dataset_requests", "request_detail", "request_download_zip", "request_download_file"},
    "other analyst": ANALYST_PAGES | {"dataset_requests"},
}
MEMBER_WRITABLE = {
    "approver": {"request_decide"},
    "analyst": {"request_new", "request_withdraw"},
    "other analyst": {"request_new"},
}
MEMBERS = tuple(MEMBER_READABLE)
# Custodian-only routes an analyst may use anyway: it creates API tokens for its requests.
ANALYST_MAY = {"token_list"}
# Routes anyone may reach without logging in (an invitation link is its own credential).
PUBLIC = {"login", "healthz", "invitation_accept", "api_openapi"}
# A release's public page and files (public_views): the same answer for every role, signed in
# or not; the world's release was never published, so that answer is 404, as for no release.
# A dataset's public record (dpportal/records) likewise: the world's is off, so 404 for all; the
# page of the portal's signing key answers 200 to everyone.
PUBLIC_PAGES = {
    "public_release",
    "public_release_file",
    "public_report_css",
    "public_record_zip",
    "public_record_json",
    "public_record_sig",
    "public_record_key",
}
REFUSED = {403, 404, 405}
# Routes only custodians may reach, with the methods that are custodian-only (GET of the token
# page lists one's tokens, for anyone; POST creates one). Everyone else: 403 with words.
CUSTODIAN_ROUTES = {
    "dataset_upload": {"GET", "POST", "DELETE"},
    "dataset_register_source": {"GET", "POST", "DELETE"},
    "token_list": {"POST"},
    "api_dataset_list": {"POST"},
}
NOT_A_CUSTODIAN = b"Only custodians"
# How pages mark what is computed from the raw data (never shown to auditors).
CUSTODIAN_ONLY = re.compile(rb'class="custodian-only"|Custodian-only: not part of the release')


def state_snapshot():
    return (
        list(Dataset.objects.order_by("pk").values()),
        list(Release.objects.order_by("pk").values()),
        list(BudgetLedgerEntry.objects.order_by("pk").values()),
        list(Analyst.objects.order_by("pk").values()),
        list(ReleaseRequest.objects.order_by("pk").values()),
        list(RequestDecision.objects.order_by("pk").values()),
    )


def check_matrix(world, routes):
    """Run the matrix; return (failures, number of requests)."""
    failures, requests = [], 0
    users = {
        "anonymous": None,
        "other custodian": world.bob,
        "auditor": world.carol,
        "invited auditor": world.dave,
        "approver": world.paul,
        "analyst": world.ann,
        "other analyst": world.zed,
        "owner": world.alice,
    }
    clients = {
        role: SimpleNamespace(client=client_for(user), user=user) for role, user in users.items()
    }

    def fail(role, method, name, response, why):
        failures.append(f"{role} {method} {name}: {response.status_code} ({why})")

    before = state_snapshot()
    for role in users:
        methods = ("GET", "POST", "DELETE") if role != "owner" else ("GET", "DELETE")
        for method in methods:
            for name, _route, kwarg_names in routes:
                requests += 1
                url = reverse(name, kwargs=object_kwargs(name, kwarg_names, world))
                response = send(clients[role], method, url)
                judge(role, method, name, kwarg_names, response, world, clients, fail)
        if role != "owner" and state_snapshot() != before:
            failures.append(f"{role} requests changed a dataset, release or ledger row")
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

    A streamed download is read whole, so its bytes are judged like any page's.
    Signed-in roles are signed in again if a previous request (a POST to logout) ended the
    session, so every request is judged for the role it claims to be.
    """
    client = actor.client
    if actor.user is not None and "_auth_user_id" not in client.session:
        client.force_login(actor.user)
    try:
        if method == "DELETE":
            return client.delete(url)
        response = client.get(url) if method == "GET" else client.post(url, {})
        if response.streaming:  # a streamed download (the package zip), judged on its bytes
            streamed = HttpResponse(response.getvalue(), status=response.status_code)
            for header, value in response.items():
                streamed[header] = value
            return streamed
        return response
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
    if is_api(name):  # a browser session (or none) never drives the API: tokens only
        if status != 401:
            fail(role, method, name, response, "the API must refuse a request without a token")
        return None
    if name in PUBLIC and role != "anonymous":
        if CANARY.encode() in response.content:
            fail(role, method, name, response, "a public page shows a dataset name")
        if name == "invitation_accept" and method != "DELETE" and status != 403:
            fail(role, method, name, response, "an invitation is bound to its address")
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
    if role != "owner" and CUSTODIAN_ONLY.search(response.content):
        fail(role, method, name, response, "shows a custodian-only section")
    if role == "invited auditor" and method in CUSTODIAN_ROUTES.get(name, ()):
        return judge_custodian_route(role, method, name, response, fail)
    if role in MEMBERS:
        missing = lambda: send(  # noqa: E731  (the baseline, only when needed)
            clients[role],
            method,
            reverse(name, kwargs=object_kwargs(name, kwarg_names, world, missing=True)),
        )
        return judge_member(role, method, name, kwarg_names, response, missing, fail)
    auditing = role in ("auditor", "invited auditor")  # both are held to the auditor's rules
    if auditing and kwarg_names:
        readable = name in AUDITOR_READABLE
        if readable and method == "GET" and status != 200:
            fail(role, method, name, response, "auditors may read this view")
        if not readable and status not in REFUSED:
            fail(role, method, name, response, "auditors must be refused")
        if readable and method != "GET" and status not in REFUSED:
            fail(role, method, name, response, "auditors may only read (GET) this view")
        return None
    if role == "owner" and status == 404 and name not in ANALYST_PAGES:
        fail(role, method, name, response, "the owner must reach their own objects")
    return None


def judge_member(role, method, name, kwarg_names, response, missing, fail, *, rules=None):
    """The approver's and the analysts' rules (MEMBER_READABLE, MEMBER_WRITABLE; `rules`: the
    API's), for one response; `missing()` answers the same request for a missing object."""
    readable, writable = rules or (MEMBER_READABLE, MEMBER_WRITABLE)
    status = response.status_code
    is_analyst = role != "approver"
    if is_analyst and method in CUSTODIAN_ROUTES.get(name, ()) and name not in ANALYST_MAY:
        return judge_custodian_route(role, method, name, response, fail)
    if not kwarg_names:
        return None
    if name in writable[role] and method == "POST":
        return None  # any answer but a server error; the snapshot shows nothing changed
    if name in readable[role]:
        if method == "GET" and status != 200 and not (name in NEEDS_QUERY and status == 400):
            fail(role, method, name, response, f"the {role} may read this view")
        if method != "GET" and status not in REFUSED:
            fail(role, method, name, response, f"the {role} may only read (GET) this view")
        return None
    if CANARY.encode() in response.content:
        fail(role, method, name, response, "shows the dataset's name where it must not")
    baseline = missing().status_code
    if status not in (404, 405) or status != baseline:
        fail(role, method, name, response, f"a missing object gives {baseline}")
    return None


def judge_custodian_route(role, method, name, response, fail):
    """A custodian-only route must refuse a non-custodian with 403 and say why."""
    if response.status_code != 403 or NOT_A_CUSTODIAN not in response.content:
        fail(role, method, name, response, "only custodians may do this (403 with words)")


def is_api(name) -> bool:
    """Token-authenticated API routes (the OpenAPI description is public)."""
    return name.startswith("api_") and name not in PUBLIC


@pytest.fixture
def invited(world):
    """The world plus Dave, who joined Alice's dataset through an invitation and holds no
    custodian grant (an auditor-only account)."""
    from dpportal import services

    services.invitation_send(
        dataset=world.dataset,
        user=world.alice,
        email="dave@example.org",
        link_for=lambda secret: world.__dict__.setdefault("secret", secret),
    )
    client = Client()
    client.post(
        reverse("invitation_accept", args=[world.secret]),
        {
            "username": "dave",
            "password1": "a long passphrase 41",
            "password2": "a long passphrase 41",
        },
    )
    world.dave = get_user_model().objects.get(username="dave")
    assert not world.dave.has_perm("dpportal.custodian")
    services.invitation_send(  # pending, for an address none of the matrix's accounts has
        dataset=world.dataset,
        user=world.alice,
        email="erin@example.org",
        link_for=lambda secret: world.__dict__.setdefault("pending_secret", secret),
    )
    return with_analysts(world)


def with_analysts(world):
    """Paul (a custodian) is the dataset's second approver; Ann and Zed are its analysts
    (accounts made from invitations with allotments). Zed's request waits; Ann's was approved
    by both and its release is done: the world's `request`."""
    from dpportal import services

    world.paul = make_user("paul", "pw-unused-1")
    services.second_approver_set(dataset=world.dataset, user=world.alice, username="paul")
    world.ann, ann = make_analyst(world.dataset, "ann", epsilon="0.6")
    world.zed, zed = make_analyst(world.dataset, "zed", epsilon="0.2")
    make_request(world.zed, zed)
    request = make_request(world.ann, ann, epsilon="0.3", columns=["age", "workclass"])
    for decider in (world.alice, world.paul):
        services.request_decide(release_request=request, user=decider, approve=True)
    request.refresh_from_db()
    run_now(request.release)
    world.request = request
    return world


def test_the_access_matrix_has_no_failures(world, invited, a_minute_later):
    from dpportal import services

    routes = enumerate_routes()
    object_routes = [r for r in routes if r[2]]
    failures, requests = check_matrix(world, routes)
    print(
        f"\nT20 access matrix: {len(routes)} routes ({len(object_routes)} object-bearing) × "
        f"8 roles × GET/POST/DELETE = {requests} requests; {len(failures)} failures; "
        f"0 server errors allowed, 0 cross-tenant reads allowed"
    )
    print("object-bearing routes: " + ", ".join(sorted(r[0] for r in object_routes)))
    assert failures == [], "\n".join(failures)
    assert services.pending_invitations(world.dataset).count() == 1  # erin's, still usable
    assert set(world.dataset.auditors.all()) == {world.carol, world.dave}
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


def test_the_invited_auditor_reads_only_the_dataset_it_was_invited_to(invited, a_minute_later):
    world = invited
    others = Dataset.objects.exclude(pk=world.dataset.pk)
    assert list(datasets_visible_to(world.dave)) == [world.dataset] and others.exists()
    client = client_for(world.dave)
    for other in others:
        for name in ("dataset_detail", "dataset_ledger"):
            assert client.get(reverse(name, kwargs={"pk": other.pk})).status_code == 404
    assert client.get(reverse("dataset_detail", kwargs={"pk": world.dataset.pk})).status_code == 200


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
    from dpportal.releases.engine import load_columns

    dataset = Dataset.objects.filter(pk=pk).first()
    return HttpResponse(load_columns(dataset, ["workclass"]).iloc[0, 0] if dataset else "none")


def auditor_writable_view(request, pk):
    if request.method == "POST":
        Dataset.objects.filter(pk=pk).update(description="changed")
    return HttpResponse("ok")


def any_request_view(request, pk):
    """Any request to any signed-in user: another analyst's included."""
    found = ReleaseRequest.objects.filter(pk=pk).first()
    return HttpResponse(f"request {found.pk}" if found else "none", status=200 if found else 404)


def analyst_writable_view(request, pk):
    if request.method == "POST":
        ReleaseRequest.objects.filter(pk=pk).update(status="withdrawn")
    return HttpResponse("ok")


urlpatterns = [
    path("twin/datasets/<int:pk>/leak/", leaky_dataset_view, name="dataset_leak"),
    path("twin/requests/<int:pk>/", any_request_view, name="request_detail"),
    path("twin/requests/<int:pk>/withdraw/", analyst_writable_view, name="request_withdraw"),
    path(
        "twin/datasets/<int:dataset_pk>/workspace/",
        lambda request, dataset_pk: custodian_only_view(request, dataset_pk),
        name="analyst_workspace",
    ),
    path("twin/datasets/<int:pk>/write/", auditor_writable_view, name="dataset_write"),
    path("twin/datasets/<int:pk>/detail/", custodian_only_view, name="dataset_detail"),
    path("twin/datasets/<int:pk>/raw/", raw_peek_view, name="dataset_ledger"),
    path("accounts/login/", lambda request: HttpResponse("login"), name="login"),
    # An upload page without the custodian check (an invited auditor could upload).
    path("twin/datasets/new/", lambda request: HttpResponse("upload"), name="dataset_upload"),
]


@override_settings(ROOT_URLCONF=__name__)
def test_the_matrix_catches_a_leaky_view_and_an_auditor_write(invited):
    world = invited
    failures, _ = check_matrix(world, enumerate_routes(get_resolver(__name__)))
    text = "\n".join(failures)
    assert "other custodian GET dataset_leak" in text
    assert "shows the other tenant's dataset name" in text
    assert "auditor POST dataset_write: 200 (auditors must be refused)" in text
    assert "auditor requests changed a dataset, release or ledger row" in text
    assert "auditor GET dataset_detail: 200 (shows a custodian-only section)" in text
    assert "auditor POST dataset_detail: 200 (auditors may only read (GET) this view)" in text
    assert "auditor GET dataset_ledger: 200 (shows a value from the raw file)" in text
    assert "invited auditor GET dataset_upload: 200 (only custodians may do this" in text
    assert "invited auditor POST dataset_write: 200 (auditors must be refused)" in text
    # issue 46: another analyst's request, a custodian-only section on the analyst's page, an
    # analyst's write, and a dataset page (with a raw value) an analyst must not reach
    assert "other analyst GET request_detail: 200 (a missing object gives 404)" in text
    assert "analyst GET analyst_workspace: 200 (shows a custodian-only section)" in text
    assert "analyst requests changed a dataset, release or ledger row" in text
    assert "analyst GET dataset_ledger: 200 (shows a value from the raw file)" in text
    assert "approver GET dataset_leak: 200 (shows the dataset's name where it must not)" in text


# ---------------------------------------------------------------- the API, with tokens

# API routes an auditor's token may read (GET). Every other API route must refuse auditors.
API_AUDITOR_READABLE = {
    "api_dataset_list",
    "api_dataset_detail",
    "api_dataset_ledger",
    "api_dataset_releases",
    "api_release_detail",
    "api_release_file",
    "api_release_package",
    "api_audit_log",
    "api_dataset_requests",
    "api_request_detail",
    "api_request_package",
    "api_request_file",
}
API_MEMBER_READABLE = {
    "approver": {
        "api_dataset_requests",
        "api_request_detail",
        "api_request_package",
        "api_request_file",
    },
    "analyst": {
        "api_analyst_workspace",
        "api_dataset_requests",
        "api_request_estimate",
        "api_request_detail",
        "api_request_package",
        "api_request_file",
    },
    "other analyst": {"api_analyst_workspace", "api_dataset_requests", "api_request_estimate"},
}
API_MEMBER_WRITABLE = {
    "approver": {"api_request_decide"},
    "analyst": {"api_dataset_requests", "api_request_withdraw"},
    "other analyst": {"api_dataset_requests"},
}
API_ANALYST_ONLY = {"api_analyst_workspace", "api_request_estimate"}  # the owner: 404 there
NEEDS_QUERY = {"api_request_estimate"}  # without its parameters: 400, saying which
TOKEN_ROLES = (
    "no token",
    "revoked token",
    "stranger",
    "auditor",
    "invited auditor",
    *MEMBERS,
    "owner",
)


def api_tokens(world) -> dict:
    """A token per role: Alice's (owner), Carol's (auditor), Bob's (stranger), Dave's (invited
    auditor: the page would not let him make one, the service is called directly, as for a
    custodian whose grant was taken back), and one of Alice's that she revoked."""
    from dpportal import services

    secrets = {
        role: services.token_create(user=user, name=role)[1]
        for role, user in (
            ("owner", world.alice),
            ("auditor", world.carol),
            ("stranger", world.bob),
            ("invited auditor", world.dave),
            ("approver", world.paul),
            ("analyst", world.ann),
            ("other analyst", world.zed),
        )
    }
    revoked, secrets["revoked token"] = services.token_create(user=world.alice, name="old")
    services.token_revoke(user=world.alice, token_pk=revoked.pk)
    return secrets


def send_api(secret, method, url):
    """Like `send`, with a session-less client that sends the token (if any)."""
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}") if secret else Client()
    return send(SimpleNamespace(client=client, user=None), method, url)


def check_api_matrix(world, routes):
    """Every API route × TOKEN_ROLES × GET/POST/DELETE; return (failures, requests)."""
    tokens, failures, requests = api_tokens(world), [], 0
    api_routes = [r for r in routes if is_api(r[0])]

    def fail(role, method, name, response, why):
        failures.append(f"{role}: {method} {name}: {response.status_code} ({why})")

    before = state_snapshot()
    for role in TOKEN_ROLES:
        for method in ("GET", "POST", "DELETE") if role != "owner" else ("GET", "DELETE"):
            for name, _route, kwarg_names in api_routes:
                requests += 1
                url = reverse(name, kwargs=object_kwargs(name, kwarg_names, world))
                response = send_api(tokens.get(role), method, url)
                judge_api(role, method, name, kwarg_names, response, world, tokens, fail)
        if role != "owner" and state_snapshot() != before:
            failures.append(f"{role}: requests changed a dataset, release or ledger row")
    for name, _route, kwarg_names in api_routes:  # owner POSTs last: they may change state
        requests += 1
        url = reverse(name, kwargs=object_kwargs(name, kwarg_names, world))
        response = send_api(tokens["owner"], "POST", url)
        if response.status_code >= 500:
            fail("owner", "POST", name, response, getattr(response, "exception_text", "500"))
    return failures, requests


def judge_api(role, method, name, kwarg_names, response, world, tokens, fail):
    status, content = response.status_code, response.content
    if status >= 500:
        return fail(role, method, name, response, getattr(response, "exception_text", "500"))
    if not response["Content-Type"].startswith("application/json") and status >= 400:
        fail(role, method, name, response, "a refusal must be JSON")
    if role in ("no token", "revoked token"):
        if status != 401:
            fail(role, method, name, response, "a request without a valid token must get 401")
        return None
    if role != "owner" and any(c.encode() in content for c in RAW_CANARIES.values()):
        fail(role, method, name, response, "shows a value from the raw file")
    if role == "stranger":
        if CANARY.encode() in content:
            fail(role, method, name, response, "shows the other tenant's dataset name")
        if kwarg_names:
            missing = reverse(name, kwargs=object_kwargs(name, kwarg_names, world, missing=True))
            baseline = send_api(tokens[role], method, missing).status_code
            if status not in (404, 405) or status != baseline:
                fail(role, method, name, response, f"a missing object gives {baseline}")
        return None
    if role == "invited auditor" and method in CUSTODIAN_ROUTES.get(name, ()):
        return judge_custodian_route(role, method, name, response, fail)
    if role in MEMBERS:
        path = reverse(name, kwargs=object_kwargs(name, kwarg_names, world, missing=True))
        rules = (API_MEMBER_READABLE, API_MEMBER_WRITABLE)
        missing = lambda: send_api(tokens[role], method, path)  # noqa: E731
        return judge_member(role, method, name, kwarg_names, response, missing, fail, rules=rules)
    if role in ("auditor", "invited auditor") and kwarg_names:
        readable = name in API_AUDITOR_READABLE
        if readable and method == "GET" and status != 200:
            fail(role, method, name, response, "auditors may read this endpoint")
        if (not readable or method != "GET") and status not in REFUSED:
            fail(role, method, name, response, "auditors must be refused")
        return None
    if role == "owner" and status in (401, 404) and name not in API_ANALYST_ONLY:
        fail(role, method, name, response, "the owner must reach their own objects")
    return None


@pytest.fixture
def many_refusals_allowed(settings):
    """The matrix sends many revoked tokens from one address: raise the per-address limit for
    it, and leave no counters behind for the next test."""
    from django.core.cache import cache

    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 10_000
    cache.clear()
    yield
    cache.clear()


def test_the_api_matrix_has_no_failures(invited, a_minute_later, many_refusals_allowed):
    routes = enumerate_routes()
    failures, requests = check_api_matrix(invited, routes)
    api_names = sorted(r[0] for r in routes if is_api(r[0]))
    print(
        f"\nAPI access matrix: {len(api_names)} endpoints × {len(TOKEN_ROLES)} token roles × "
        f"GET/POST/DELETE = {requests} requests; {len(failures)} failures"
    )
    assert len(api_names) >= 11, api_names  # every endpoint of dpportal/api/urls.py
    assert failures == [], "\n".join(failures)


# Broken twins of API endpoints: one that shows any dataset to any token, one that lets an
# auditor's token change state, and one that skips token checks (a revoked token gets in).
@api_endpoint("GET", "POST", "DELETE")
def api_leaky_dataset_view(request, pk):
    dataset = Dataset.objects.filter(pk=pk).first()
    if dataset is None:
        raise Http404("No such dataset.")
    return JsonResponse({"name": dataset.name})


@api_endpoint("GET", "POST", "DELETE")
def api_auditor_writable_view(request, pk):
    dataset = dataset_for_reader(request.user, pk)
    if request.method == "POST":
        Dataset.objects.filter(pk=dataset.pk).update(description="changed")
    return JsonResponse({"ok": True})


@login_not_required
def api_unchecked_view(request):
    return JsonResponse({"releases": []})


@api_endpoint("GET", "POST")
def api_upload_without_custodian_check(request):
    return JsonResponse({"datasets": []}, status=201 if request.method == "POST" else 200)


urlpatterns += [
    path("twin/api/datasets/<int:pk>/", api_leaky_dataset_view, name="api_dataset_leak"),
    path("twin/api/datasets/<int:pk>/w/", api_auditor_writable_view, name="api_dataset_write"),
    path("twin/api/releases/", api_unchecked_view, name="api_release_list_unchecked"),
    path("twin/api/datasets/", api_upload_without_custodian_check, name="api_dataset_list"),
]


@override_settings(ROOT_URLCONF=__name__)
def test_the_api_matrix_catches_a_leak_an_auditor_write_and_a_skipped_token_check(
    invited, settings
):
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 10_000
    failures, _ = check_api_matrix(invited, enumerate_routes(get_resolver(__name__)))
    text = "\n".join(failures)
    assert "stranger: GET api_dataset_leak: 200 (shows the other tenant's dataset name)" in text
    assert "auditor: POST api_dataset_write: 200 (auditors must be refused)" in text
    assert "auditor: requests changed a dataset, release or ledger row" in text
    assert "revoked token: GET api_release_list_unchecked: 200 (a request without a valid" in text
    assert "invited auditor: POST api_dataset_list: 201 (only custodians may do this" in text
