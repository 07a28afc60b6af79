"""Red-team findings on the login limit (issue 13): Unicode spellings of a locked name, the
check-then-increment race, a Redis that is down, and X-Forwarded-For from anyone."""

import threading
import time
import unicodedata

import pytest
from django.contrib.auth import get_user_model
from django.core import checks
from django.core.cache import cache
from django.db import connection
from django.test import Client, RequestFactory
from django.urls import reverse

from dpportal import services
from dpportal.access.login_limit import client_address
from dpportal.checks import check_trusted_proxies
from dpportal.models import AuditEvent
from tests.helpers import deploy_check

# Its tests empty Redis db 14 (cache.clear()), so under pytest-xdist they all run on one worker.
pytestmark = pytest.mark.xdist_group("redis-db-14")

PASSWORD = "correct horse battery"
TEST_REDIS = "redis://127.0.0.1:6379/14"
REDIS_CACHE = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": TEST_REDIS}
}


@pytest.fixture(autouse=True)
def fresh_counters():
    cache.clear()
    yield
    cache.clear()


def make_user(name):
    return get_user_model().objects.create_user(username=name, password=PASSWORD)


def attempt(username, password, address="192.0.2.1", **extra):
    client = Client(REMOTE_ADDR=address, raise_request_exception=False, **extra)
    response = client.post(reverse("login"), {"username": username, "password": password})
    return response, "_auth_user_id" in client.session


# ---------------------------------------------------------------- Unicode spellings


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", ["ｖｉｃ", "ⅴic", "𝐯𝐢𝐜", " vic "])
def test_another_spelling_of_a_locked_name_is_locked_too(settings, spelling):
    settings.LOGIN_MAX_FAILURES = 5
    make_user("vic")
    for i in range(5):
        attempt("vic", f"guess-{i}")
    # Django's login form strips and NFKC-normalises the name, so it signs this in as vic ...
    assert unicodedata.normalize("NFKC", spelling.strip()) == "vic"
    response, logged_in = attempt(spelling, PASSWORD, address="198.51.100.9")
    assert response.status_code == 429 and not logged_in  # ... so it is locked with vic


@pytest.mark.django_db
def test_spellings_share_one_budget_of_guesses(settings):
    settings.LOGIN_MAX_FAILURES = 5
    make_user("vic")
    for spelling in ("vic", "ｖｉｃ", "ⅴic", "𝐯𝐢𝐜", "ｖic"):  # 5 failures, 5 spellings
        assert attempt(spelling, "wrong")[0].status_code == 200
    response, logged_in = attempt("vic", PASSWORD)
    assert response.status_code == 429 and not logged_in


@pytest.mark.django_db
def test_names_differing_in_case_are_different_accounts_with_their_own_counters(settings):
    """Django's user names are case-sensitive: `VIC` never signs in as `vic`, so locking `vic`
    must not lock the real user `Vic` (and gives no way around vic's lock)."""
    settings.LOGIN_MAX_FAILURES = 5
    make_user("vic")
    make_user("Vic")
    for i in range(5):
        attempt("vic", f"guess-{i}")
    assert attempt("vic", PASSWORD)[0].status_code == 429
    response, logged_in = attempt("VIC", PASSWORD)
    assert response.status_code == 200 and not logged_in  # no such account: no bypass
    response, logged_in = attempt("Vic", PASSWORD)
    assert response.status_code == 302 and logged_in


# ---------------------------------------------------------------- concurrency (real Redis)


@pytest.mark.django_db(transaction=True)
def test_concurrent_wrong_passwords_check_at_most_the_limit(settings, monkeypatch):
    """40 threads post a wrong password for one name at the same moment, against a Redis cache
    shared as in production; each password check takes 50 ms so that the requests overlap."""
    settings.CACHES = REDIS_CACHE
    settings.LOGIN_MAX_FAILURES = 5
    cache.clear()
    make_user("vic")
    user_model = get_user_model()
    real_check = user_model.check_password
    checked, lock = [], threading.Lock()

    def slow_check(self, raw_password):
        with lock:
            checked.append(raw_password)
        time.sleep(0.05)
        return real_check(self, raw_password)

    monkeypatch.setattr(user_model, "check_password", slow_check)
    barrier, statuses = threading.Barrier(40), []

    def guess(i):
        try:
            barrier.wait()
            statuses.append(
                attempt("vic", f"guess-{i}", address=f"198.51.100.{i + 1}")[0].status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    print(
        f"\nLogin race: 40 concurrent wrong passwords, {len(checked)} checked (limit 5); "
        f"statuses {sorted(set(statuses))}"
    )
    assert len(statuses) == 40
    assert len(checked) <= 5
    assert statuses.count(429) >= 35
    cache.clear()


# ---------------------------------------------------------------- Redis down


@pytest.mark.django_db
def test_with_the_cache_down_login_is_refused_with_words_and_the_site_works(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        }
    }  # nothing listens
    make_user("vic")
    response, logged_in = attempt("vic", PASSWORD)
    assert response.status_code == 503 and not logged_in
    body = response.content.decode()
    assert "Passwords cannot be checked right now" in body and "Try again in a few minutes" in body
    assert Client().get(reverse("login")).status_code == 200  # the page itself still works
    assert Client().get(reverse("healthz")).status_code == 200


# ---------------------------------------------------------------- X-Forwarded-For


def request_from(remote, forwarded=None):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    return RequestFactory().get("/", REMOTE_ADDR=remote, **extra)


def test_the_header_is_ignored_without_a_trusted_proxy_even_behind_tls(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.DPPORTAL_TRUSTED_PROXIES = []
    assert client_address(request_from("203.0.113.9", "10.9.9.9")) == "203.0.113.9"


def test_the_header_is_read_only_on_requests_from_a_trusted_proxy(settings):
    settings.DPPORTAL_TRUSTED_PROXIES = ["10.0.0.2", "172.18.0.0/16"]
    assert client_address(request_from("10.0.0.2", "6.6.6.6, 198.51.100.4")) == "198.51.100.4"
    # a chain of trusted proxies: the right-most address that is not one of them
    assert (
        client_address(request_from("172.18.0.5", "6.6.6.6, 198.51.100.4, 10.0.0.2"))
        == "198.51.100.4"
    )
    # a client that talks to the published port directly cannot choose its address
    assert client_address(request_from("203.0.113.9", "10.0.0.2, 1.2.3.4")) == "203.0.113.9"
    assert client_address(request_from("10.0.0.2")) == "10.0.0.2"  # no header: the proxy


@pytest.mark.django_db
def test_a_forged_header_changes_neither_the_limit_nor_the_audit_log(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")  # compose default
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 2
    make_user("vic")
    for i in range(2):
        attempt(f"user{i}", "wrong", address="203.0.113.7", HTTP_X_FORWARDED_FOR=f"10.0.0.{i}")
    response, _ = attempt("user0", "again", address="203.0.113.7", HTTP_X_FORWARDED_FOR="10.9.9.9")
    assert response.status_code == 429  # past the address's limit: no second guess at user0
    failures = AuditEvent.objects.filter(action=AuditEvent.Action.LOGIN_FAILED)
    assert {e.remote_addr for e in failures} == {"203.0.113.7"}


# ---------------------------------------------------------------- per-process counters


def test_production_without_a_shared_cache_fails_the_deploy_check():
    result = deploy_check(DPPORTAL_CACHE_URL="")  # the Dockerfile's old CMD: no shared cache
    assert result.returncode != 0
    assert "dpportal.E001" in result.stdout + result.stderr
    allowed = deploy_check(DPPORTAL_CACHE_URL="", DPPORTAL_ALLOW_LOCAL_CACHE="1")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr  # one process, said so


def test_a_bad_trusted_proxy_entry_fails_the_deploy_check():
    result = deploy_check(DPPORTAL_TRUSTED_PROXIES="10.0.0.2,proxy")
    assert result.returncode != 0 and "dpportal.E002" in result.stdout + result.stderr


# ---------------------------------------------------------------- issue 41: other people's failures

DOWN_CACHE = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens
    }
}


def token_client(secret, address="192.0.2.1"):
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=address)


@pytest.mark.django_db
def test_refused_tokens_never_lock_out_valid_tokens_or_passwords_of_the_same_address(settings):
    """Item 12: behind compose's proxy every client had one address; 30 refused tokens from an
    anonymous client then refused every valid token and password for 15 minutes."""
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 30
    proxy = "172.30.83.1"  # every client, as the portal sees them without a trusted proxy
    vic = make_user("vic")
    _, secret = services.token_create(user=vic, name="script")
    url = reverse("api_dataset_list")
    statuses = [token_client(f"dpp_guess{i}", proxy).get(url).status_code for i in range(31)]
    assert statuses == [401] * 30 + [429]  # the refused ones are still limited
    assert token_client(secret, proxy).get(url).status_code == 200
    response, logged_in = attempt("vic", PASSWORD, address=proxy)
    assert response.status_code == 302 and logged_in


@pytest.mark.django_db
def test_with_the_cache_down_valid_tokens_work_and_refused_ones_say_so(settings):
    """Item 14: with the cache's Redis down every valid token got 503."""
    settings.CACHES = DOWN_CACHE
    _, secret = services.token_create(user=make_user("vic"), name="script")
    url = reverse("api_dataset_list")
    assert token_client(secret).get(url).status_code == 200
    refused = token_client("dpp_wrong").get(url)
    assert refused.status_code == 401 and "not valid or was revoked" in refused.json()["error"]


@pytest.mark.django_db
def test_behind_a_tls_proxy_without_trusted_proxies_the_deploy_check_errs(settings):
    """Item 12: a Warning let `check --deploy` pass (its default fail level is ERROR)."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.DPPORTAL_TRUSTED_PROXIES = []
    problems = check_trusted_proxies()
    assert [(p.id, p.level) for p in problems] == [("dpportal.E003", checks.ERROR)]
    settings.DPPORTAL_TRUSTED_PROXIES = ["172.30.83.0/24"]
    assert check_trusted_proxies() == []


# ---------------------------------------------------------------- password change


def change_password(client, old, new="another horse battery 7", address="192.0.2.1"):
    return client.post(
        reverse("password_change"),
        {"old_password": old, "new_password1": new, "new_password2": new},
        REMOTE_ADDR=address,
    )


@pytest.mark.django_db
def test_the_password_change_form_limits_wrong_old_passwords_per_account(settings):
    """Item 14: a stolen session could guess the password on this form without limit. Wrong
    old passwords share the account's counter with the sign-in page (5 guesses in all)."""
    settings.LOGIN_MAX_FAILURES = 5
    vic = make_user("vic")
    client = Client()
    client.force_login(vic)
    for i in range(3):
        assert change_password(client, f"guess-{i}").status_code == 200
    for i in range(2):
        attempt("vic", f"login-guess-{i}")
    refused = change_password(client, PASSWORD, address="198.51.100.7")
    assert refused.status_code == 429 and "Too many failed password attempts" in (
        refused.content.decode()
    )
    vic.refresh_from_db()
    assert vic.check_password(PASSWORD)  # not changed: the old password was never checked
    assert attempt("vic", PASSWORD, address="198.51.100.8")[0].status_code == 429


@pytest.mark.django_db
def test_a_right_old_password_with_a_mistyped_new_one_is_not_a_failure(settings):
    settings.LOGIN_MAX_FAILURES = 2
    vic = make_user("vic")
    client = Client()
    client.force_login(vic)
    attempt("vic", "wrong")
    mismatch = client.post(
        reverse("password_change"),
        {"old_password": PASSWORD, "new_password1": "new horse 1", "new_password2": "new horse 2"},
    )
    assert mismatch.status_code == 200
    assert change_password(client, "wrong-again").status_code == 200  # 1 of 2 used: checked
    assert change_password(client, PASSWORD).status_code == 302


@pytest.mark.django_db
def test_with_the_cache_down_the_password_change_is_refused_with_words(settings):
    settings.CACHES = DOWN_CACHE
    vic = make_user("vic")
    client = Client(raise_request_exception=False)
    client.force_login(vic)
    response = change_password(client, PASSWORD)
    assert response.status_code == 503 and "Passwords cannot be checked" in (
        response.content.decode()
    )
