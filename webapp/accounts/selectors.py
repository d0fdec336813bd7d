"""Reads about users and their roles."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from webapp.accounts.models import ApiToken
from webapp.accounts.roles import Role


def user_roles(*, user: AbstractBaseUser | AnonymousUser) -> list[Role]:
    """The roles `user` holds, in the order of Role."""
    if not user.is_authenticated:
        return []
    names = set(user.groups.values_list("name", flat=True))  # type: ignore[attr-defined]
    if user.is_superuser:  # type: ignore[attr-defined]
        names.add(Role.ADMIN.value)
    return [role for role in Role if role.value in names]


def api_tokens_of(*, user: AbstractBaseUser) -> list[ApiToken]:
    """The user's tokens, newest first."""
    return list(ApiToken.objects.filter(user=user))
