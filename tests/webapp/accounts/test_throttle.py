"""Login throttling: per username and per client address, on the login page and the admin's, with a
message saying when to try again; the counts live in the shared cache (real Redis in the last tests)."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD, Personas
from tests.webapp.pages.html import text

pytestmark = pytest.mark.django_db(transaction=True)

LOGIN = reverse("accounts:login")
HOME = reverse("dashboards:home")


def attempt(password: str, username: str = "alice", address: str = "10.0.0.1", path: str = LOGIN):
    client = Client(REMOTE_ADDR=address)
    response = client.post(path, {"username": username, "password": password})
    return response, client


def test_thirty_wrong_passwords_lock_the_account_and_the_right_one_is_refused(personas: Personas) -> None:
    codes = [attempt("wrong")[0].status_code for _ in range(30)]
    assert codes == [200] * settings.LOGIN_MAX_FAILURES_PER_USER + [429] * (
        30 - settings.LOGIN_MAX_FAILURES_PER_USER
    )
    response, client = attempt(PASSWORD)
    assert response.status_code == 429
    assert "Too many failed log-ins for this account or from your address. Try again in 15 minutes." in text(
        response
    )
    assert client.get(HOME).status_code == 302  # not logged in
    # The same account from elsewhere is locked too (the count is the username's), "ALICE" as well;
    # another account from this address is not.
    assert attempt(PASSWORD, address="10.0.0.2")[0].status_code == 429
    assert attempt(PASSWORD, username="ALICE", address="10.0.0.2")[0].status_code == 429
    assert attempt(PASSWORD, username="bob")[0].status_code == 302


def test_the_lock_lifts_when_its_window_closes(personas: Personas, settings) -> None:
    settings.LOGIN_LOCKOUT_SECONDS = 60
    for _ in range(settings.LOGIN_MAX_FAILURES_PER_USER):
        attempt("wrong")
    assert attempt(PASSWORD)[0].status_code == 429
    later = time.time() + 61
    with (
        mock.patch("django.core.cache.backends.locmem.time.time", return_value=later),
        mock.patch("webapp.accounts.throttle.time.time", return_value=later),
    ):
        assert attempt(PASSWORD)[0].status_code == 302


def test_a_successful_login_clears_its_username_count(personas: Personas) -> None:
    for _ in range(2):
        for _ in range(settings.LOGIN_MAX_FAILURES_PER_USER - 1):
            assert attempt("wrong")[0].status_code == 200
        assert attempt(PASSWORD)[0].status_code == 302


def test_many_accounts_guessed_from_one_address_lock_that_address(personas: Personas, settings) -> None:
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 6
    for name in ("alice", "bob", "carol"):
        attempt("wrong", username=name)
        attempt("wrong", username=name)
    response = attempt(PASSWORD, username="dave")[0]
    assert response.status_code == 429 and "from your address" in text(response)
    assert attempt(PASSWORD, username="dave", address="10.0.0.9")[0].status_code == 302


def test_successful_logins_do_not_use_up_their_address(personas: Personas, settings) -> None:
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    for _ in range(10):  # a lab behind one address logs in all day
        assert attempt(PASSWORD, username="bob")[0].status_code == 302


def test_the_admin_login_is_throttled_too(personas: Personas) -> None:
    admin_login = reverse("admin:login")
    for _ in range(settings.LOGIN_MAX_FAILURES_PER_USER):
        attempt("wrong", username="dave", path=admin_login)
    response, client = attempt(PASSWORD, username="dave", path=admin_login)
    assert response.status_code == 200 and "Too many failed log-ins" in text(response)
    assert client.get(reverse("admin:index")).status_code == 302  # not logged in


# --- the real shared cache ------------------------------------------------------------------------------


@pytest.fixture
def redis_cache(settings):
    """The production cache backend on the real Redis, under a prefix of this test's own."""
    prefix = f"test-{uuid.uuid4().hex}"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.REDIS_URL,
            "KEY_PREFIX": prefix,
        }
    }
    yield
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)


@pytest.mark.slow
def test_parallel_guesses_are_each_counted_on_the_real_cache(personas: Personas, redis_cache) -> None:
    # Counting before the password is checked: 30 guesses at once cannot all slip under the limit.
    def guess(_: int) -> int:
        try:
            return attempt("wrong")[0].status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=10) as pool:
        codes = list(pool.map(guess, range(30)))
    assert sorted(codes) == [200] * settings.LOGIN_MAX_FAILURES_PER_USER + [429] * (
        30 - settings.LOGIN_MAX_FAILURES_PER_USER
    )
    assert attempt(PASSWORD)[0].status_code == 429
    assert attempt(PASSWORD, username="bob")[0].status_code == 302
