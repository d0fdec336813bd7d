"""Login throttling: too many wrong passwords for one account, or from one address, lock it for a while.

Without it, 30 wrong passwords in 10 s were answered as fast as they came and the right one still
worked. Attempts are counted in the shared cache (Redis: every web process sees the same counts),
per username (case-folded, so "Alice" and "alice" share one count) and per client address, in a
window that opens with the first attempt. Past either limit every attempt is refused, the right
password too, with a message saying when to try again. A successful login clears its username's
count; the address keeps its failures (an account an attacker holds must not reset the count that
guards everyone else's).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.http import HttpRequest

PREFIX = "login-attempts"


def _key(kind: str, value: str) -> str:
    return f"{PREFIX}:{kind}:{hashlib.sha256(value.encode()).hexdigest()[:40]}"


def client_address(request: HttpRequest | None) -> str:
    """The client's address (daphne sets it from X-Forwarded-For with --proxy-headers)."""
    return str((request.META.get("REMOTE_ADDR") if request is not None else "") or "unknown")


def _keys(username: str, address: str) -> list[tuple[str, int]]:
    return [
        (_key("user", username.strip().casefold()), settings.LOGIN_MAX_FAILURES_PER_USER),
        (_key("addr", address), settings.LOGIN_MAX_FAILURES_PER_ADDRESS),
    ]


def _count(key: str, window: int) -> int:
    """Add one to `key`'s count (atomically: parallel attempts each count) and return it."""
    for _ in range(2):
        if cache.add(key, 0, timeout=window):  # the first attempt opens the window
            cache.set(f"{key}:until", time.time() + window, timeout=window)
        try:
            return int(cache.incr(key))
        except ValueError:  # the window closed between add and incr: open a new one
            continue
    return 1


def login_attempt(*, username: str, address: str) -> int:
    """Count an attempt for `username` from `address` before its password is checked.

    Counting first, not after a failure, bounds parallel guesses too: they cannot all pass a check
    made before any of them failed. Returns the seconds to wait when a limit is passed (0: go on).
    """
    window = settings.LOGIN_LOCKOUT_SECONDS
    wait = 0
    for key, limit in _keys(username, address):
        if _count(key, window) > limit:
            until = cache.get(f"{key}:until") or time.time() + window
            wait = max(wait, math.ceil(until - time.time()), 1)
    return wait


def login_succeeded(*, username: str, address: str) -> None:
    """The password was right: forget the username's count, and take this attempt off the address's
    (a lab behind one address logs in all day); the address's failures stay."""
    cache.delete(_key("user", username.strip().casefold()))
    with contextlib.suppress(ValueError):  # its window closed meanwhile
        cache.decr(_key("addr", address))


def locked_message(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return (
        "Too many failed log-ins for this account or from your address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )


class ThrottledLoginMixin:
    """For an AuthenticationForm: count the attempt, refuse past a limit, clear the count on success."""

    request: HttpRequest | None
    throttled = False

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = self.cleaned_data  # type: ignore[attr-defined]
        username, address = str(data.get("username") or ""), client_address(self.request)
        wait = login_attempt(username=username, address=address)
        if wait:
            self.throttled = True
            raise forms.ValidationError(locked_message(wait), code="throttled")
        cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        login_succeeded(username=username, address=address)
        return cleaned


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    """The login page's form."""


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    """The admin site's login form (it checks passwords too)."""
