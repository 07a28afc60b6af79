"""Login attempts are rate-limited per user name and per client address (login_limit.py)."""

import time

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery"


@pytest.fixture(autouse=True)
def fresh_counters():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def alice():
    return get_user_model().objects.create_user(username="alice", password=PASSWORD)


def attempt(username, password, address="192.0.2.1"):
    client = Client(REMOTE_ADDR=address)
    response = client.post(reverse("login"), {"username": username, "password": password})
    return response, "_auth_user_id" in client.session


def test_it_blocks_a_user_name_after_too_many_failures(alice, settings):
    settings.LOGIN_MAX_FAILURES = 5
    statuses = [attempt("alice", f"guess-{i}")[0].status_code for i in range(5)]
    assert statuses == [200] * 5  # the form again, with an error
    response, logged_in = attempt("alice", PASSWORD)
    assert response.status_code == 429 and not logged_in  # even the right password is refused
    assert "Too many failed password attempts. Wait 15 minutes" in response.content.decode()
    response, logged_in = attempt(" alice ", PASSWORD, address="198.51.100.9")
    assert response.status_code == 429 and not logged_in  # spaces around the name don't help
    response, logged_in = attempt("ALICE", PASSWORD, address="198.51.100.9")
    assert not logged_in  # names are case-sensitive: ALICE is not alice's account
    print(
        f"\nLogin rate limit: after {settings.LOGIN_MAX_FAILURES} failures the next attempt "
        f"is refused (429) for {settings.LOGIN_LOCKOUT_SECONDS // 60} minutes, even with the "
        "right password"
    )


def test_it_lets_the_user_in_again_after_the_lockout(alice, settings):
    settings.LOGIN_MAX_FAILURES = 2
    settings.LOGIN_LOCKOUT_SECONDS = 1
    for _ in range(2):
        attempt("alice", "wrong")
    assert attempt("alice", PASSWORD)[0].status_code == 429
    time.sleep(1.2)
    response, logged_in = attempt("alice", PASSWORD)
    assert response.status_code == 302 and logged_in


def test_a_successful_login_resets_the_user_name_counter(alice, settings):
    settings.LOGIN_MAX_FAILURES = 3
    for _ in range(2):
        attempt("alice", "wrong")
    assert attempt("alice", PASSWORD)[1]
    for _ in range(2):
        attempt("alice", "wrong")
    assert attempt("alice", PASSWORD)[1]


def test_an_address_past_its_limit_gets_one_guess_per_account(alice, settings):
    """Past its limit, an address may no longer guess again at an account it already failed
    on; a correct password of an account with no failures still works from there (every client
    behind one proxy may share that address)."""
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    for name in ("bob", "carol", "dave"):
        attempt(name, "wrong", address="203.0.113.5")
    assert attempt("bob", "wrong-again", address="203.0.113.5")[0].status_code == 429
    assert attempt("erin", "wrong", address="203.0.113.5")[0].status_code == 200  # one check
    assert attempt("erin", "wrong-again", address="203.0.113.5")[0].status_code == 429
    response, logged_in = attempt("alice", PASSWORD, address="203.0.113.5")
    assert response.status_code == 302 and logged_in


def test_blocked_attempts_do_not_check_the_password(alice, settings, django_assert_num_queries):
    settings.LOGIN_MAX_FAILURES = 1
    attempt("alice", "wrong")
    client = Client(REMOTE_ADDR="192.0.2.1")
    with django_assert_num_queries(0):  # no user lookup, no audit write: nothing to time
        response = client.post(reverse("login"), {"username": "alice", "password": PASSWORD})
    assert response.status_code == 429


def test_the_admin_login_is_limited_too(alice, settings):
    settings.LOGIN_MAX_FAILURES = 3
    alice.is_staff = True
    alice.save()
    client = Client(REMOTE_ADDR="192.0.2.1")
    url = reverse("admin:login")
    for _ in range(3):
        assert client.post(url, {"username": "alice", "password": "wrong"}).status_code == 200
    response = client.post(url, {"username": "alice", "password": PASSWORD})
    assert response.status_code == 429 and "_auth_user_id" not in client.session
    assert attempt("alice", PASSWORD)[0].status_code == 429  # one counter for both doors


def test_a_forged_forwarded_for_header_does_not_reset_the_address_limit(alice, settings):
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 2
    for i in range(2):
        Client(REMOTE_ADDR="203.0.113.7", HTTP_X_FORWARDED_FOR=f"10.0.0.{i}").post(
            reverse("login"), {"username": f"user{i}", "password": "wrong"}
        )
    forged = Client(REMOTE_ADDR="203.0.113.7", HTTP_X_FORWARDED_FOR="10.9.9.9")
    again = {"username": "user0", "password": "wrong-again"}  # a second guess at one account
    assert forged.post(reverse("login"), again).status_code == 429


def test_behind_a_trusted_proxy_the_address_is_the_one_the_proxy_appended():
    from django.test import RequestFactory, override_settings

    from dpportal.access.login_limit import client_address

    request = RequestFactory().get(
        "/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.4"
    )
    assert client_address(request) == "10.0.0.2"  # no proxy configured: the header is ignored
    with override_settings(DPPORTAL_TRUSTED_PROXIES=["10.0.0.2"]):
        assert client_address(request) == "198.51.100.4"  # the client's own entry is ignored
