"""Writes for users, roles and API tokens."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.db import transaction
from django.utils import timezone

from webapp.accounts.models import ApiToken
from webapp.accounts.roles import ROLE_PERMISSIONS, Role

TOKEN_PREFIX = "fw_"  # noqa: S105 (a marker, not a secret)


class UnknownPermission(LookupError):
    """A role names a permission that no installed app defines."""


def roles_sync(*, using: str = "default") -> None:
    """Create the role groups and give each exactly its permissions."""
    for role, perm_names in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.using(using).get_or_create(name=role.value)
        perms = []
        for name in perm_names:
            app_label, codename = name.split(".", 1)
            perm = (
                Permission.objects.using(using)
                .filter(content_type__app_label=app_label, codename=codename)
                .first()
            )
            if perm is None:
                # During a partial migrate (one app at a time) later apps' permissions are absent.
                continue
            perms.append(perm)
        group.permissions.set(perms)


@transaction.atomic
def user_create(
    *, username: str, password: str, roles: Iterable[Role], email: str = "", update: bool = False
) -> AbstractBaseUser:
    """Create (or with update=True, reset) a user with exactly `roles`."""
    User = get_user_model()
    roles = list(roles)
    groups = list(Group.objects.filter(name__in=[r.value for r in roles]))
    if len(groups) != len(set(roles)):
        # The groups are made by migrate (post_migrate runs roles_sync).
        raise RuntimeError("role groups are missing: run `manage.py migrate` first")
    user = User.objects.filter(username=username).first()
    if user is not None and not update:
        raise ValueError(f"user {username!r} already exists (pass update=True to reset it)")
    if user is None:
        user = User(username=username)
    user.email = email
    user.set_password(password)
    is_admin = Role.ADMIN in roles
    user.is_staff = is_admin
    user.is_superuser = is_admin
    user.save()
    user.groups.set(groups)
    return user


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_token_create(*, user: AbstractBaseUser, name: str) -> tuple[ApiToken, str]:
    """A new token for `user`; returns the row and the secret, which is shown once and never stored."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=raw[:10], token_hash=_hash(raw))
    return token, raw


def api_token_revoke(*, token: ApiToken) -> None:
    """Revoke `token`; later requests with it get 401."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def api_token_authenticate(*, raw: str) -> AbstractBaseUser | None:
    """The active user behind a raw token, or None for an unknown, revoked or inactive one."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(token_hash=_hash(raw), revoked_at=None).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    # Touch at most once a minute so a busy script does not write on every request.
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
