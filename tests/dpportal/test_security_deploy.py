"""T19: the deploy gate (`check --deploy` with production settings), security headers and
cookies on real responses, and no debug page on a server error."""

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import path, reverse

from dpportal.core.middleware import CONTENT_SECURITY_POLICY, PERMISSIONS_POLICY
from tests.conftest import REPO_ROOT
from tests.helpers import deploy_check


def test_the_deploy_check_passes_with_production_settings():
    result = deploy_check()
    print(
        f"\nT19 deploy gate: `check --deploy --fail-level WARNING` exit {result.returncode}: "
        f"{result.stdout.strip() or result.stderr.strip()}"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_deploy_check_fails_when_a_protection_is_switched_off():
    result = deploy_check(DJANGO_HSTS_SECONDS="0")
    assert result.returncode != 0
    assert "security.W004" in result.stderr + result.stdout


def test_the_image_and_compose_share_login_counters_and_publish_only_on_loopback():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "ENV DPPORTAL_CACHE_URL=redis://" in dockerfile  # the image's own CMD is covered
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    web = compose["services"]["web"]
    assert web["environment"]["DPPORTAL_CACHE_URL"].startswith("redis://")
    assert web["ports"] == ["127.0.0.1:8000:8000"]  # the proxy is the only way in
    assert "DPPORTAL_TRUSTED_PROXIES" in (REPO_ROOT / "docker-compose.yml").read_text()


@pytest.fixture
def alice(db):
    return get_user_model().objects.create_user(username="alice", password="pw-unused-1")


def test_responses_carry_the_security_headers(alice):
    client = Client()
    client.force_login(alice)
    for name in ("login", "home", "release_list_csv"):
        response = client.get(reverse(name), secure=True)
        assert response.status_code == 200, name
        assert response["Strict-Transport-Security"] == (
            "max-age=31536000; includeSubDomains; preload"
        )
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["X-Frame-Options"] == "DENY"
        assert response["Referrer-Policy"] == "same-origin"
        assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert response["Permissions-Policy"] == PERMISSIONS_POLICY
        assert "no-store" in response["Cache-Control"]  # signed in: never cached
    policy = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert "unsafe-eval" not in CONTENT_SECURITY_POLICY
    assert policy["script-src"] == policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'" and policy["object-src"] == "'none'"
    print(
        f"\nT19 headers: HSTS 1 year + preload, nosniff, X-Frame-Options DENY, CSP: "
        f"{CONTENT_SECURITY_POLICY}"
    )


def test_pages_for_anonymous_users_may_be_cached_normally(db):
    response = Client().get(reverse("healthz"), secure=True)
    assert response.status_code == 200 and not response.has_header("Cache-Control")


def test_http_requests_are_sent_to_https_in_production(settings, db):
    settings.SECURE_SSL_REDIRECT = True  # the production default (tests turn it off)
    response = Client().get(reverse("login"))
    assert response.status_code == 301
    assert response["Location"].startswith("https://")


def test_session_and_csrf_cookies_are_secure_and_http_only(alice):
    client = Client()
    page = client.get(reverse("login"), secure=True)
    csrf_cookie = page.cookies["csrftoken"]
    token = page.context["csrf_token"]
    response = client.post(
        reverse("login"),
        secure=True,
        data={"username": "alice", "password": "pw-unused-1", "csrfmiddlewaretoken": str(token)},
    )
    assert response.status_code == 302
    session_cookie = response.cookies["sessionid"]
    for cookie in (csrf_cookie, session_cookie):
        assert cookie["secure"] is True
        assert cookie["httponly"] is True
        assert cookie["samesite"] == "Lax"
    print("\nT19 cookies: sessionid and csrftoken are Secure, HttpOnly, SameSite=Lax")


def failing_view(request):
    raise RuntimeError("secret-internal-detail-42")


urlpatterns = [
    path("boom/", failing_view),
    path("accounts/login/", lambda request: HttpResponse("login"), name="login"),
]


@override_settings(ROOT_URLCONF=__name__)
def test_a_server_error_shows_no_debug_page(alice):
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.get("/boom/")
    assert response.status_code == 500
    body = response.content.decode()
    assert "secret-internal-detail-42" not in body
    assert "Traceback" not in body and "DEBUG = True" not in body
    missing = client.get("/no-such-page/")
    assert missing.status_code == 404
    assert "URLconf" not in missing.content.decode()  # the debug 404 lists the URL patterns
