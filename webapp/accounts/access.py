"""Access checks for pages: one decorator so every view states what it needs."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse


def page_requires(*perms: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Anonymous visitors go to the login page; logged-in users lacking any of `perms` get 403.

    With no perms, any logged-in active user may open the page.
    """

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            user = request.user
            if not user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not user.is_active or not all(user.has_perm(p) for p in perms):
                raise PermissionDenied(f"this page needs: {', '.join(perms)}")
            return view(request, *args, **kwargs)

        wrapped.required_perms = perms  # type: ignore[attr-defined]
        return wrapped

    return decorate
