"""Pieces every API router uses: authentication, errors, limit/offset pages, 404s that name the row.

Routers import from here, never from webapp.api (which imports the routers).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, TypeVar

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS
from django.db.models import Model, QuerySet, TextChoices
from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError, ValidationError
from ninja.security import APIKeyCookie, HttpBearer

from webapp.accounts.services import api_token_authenticate
from webapp.common.params import MAX_DB_INT

M = TypeVar("M", bound=Model)

MAX_LIMIT = 200


class BearerToken(HttpBearer):
    """`Authorization: Bearer fw_…` from the API-tokens page."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = api_token_authenticate(raw=token)
        if user is None:
            return None
        request.user = user
        return user


class SessionCookie(APIKeyCookie):
    """The browser's logged-in session (CSRF-checked on writes)."""

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request: HttpRequest) -> str | None:
        # CSRF-check only a logged-in session: a script whose token failed has no session and no
        # CSRF cookie, and must be told 401 (authenticate), not 403 "CSRF check Failed".
        if not (request.user.is_authenticated and request.user.is_active):
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        if request.user.is_authenticated and request.user.is_active:
            return request.user
        return None


class ErrorOut(Schema):
    detail: str
    errors: list[dict[str, Any]] | None = None


def require_perm(request: HttpRequest, *perms: str) -> None:
    """403 unless the authenticated user holds every one of `perms`."""
    missing = [p for p in perms if not request.user.has_perm(p)]
    if missing:
        raise HttpError(403, f"not allowed: needs {', '.join(missing)}")


def api_enum(name: str, choices: type[TextChoices]) -> type[StrEnum]:
    """A StrEnum with `choices`' values under a name unique in the OpenAPI document.

    OpenAPI names enums by class name, so Episode.Status and TrainingRun.Status would both be
    "Status" and one would silently describe the other.
    """
    return StrEnum(name, {member.name: member.value for member in choices})  # type: ignore[return-value]


# A row id or count filter: past a 64-bit column it overflows the database, so it is a 400 here.
RowId = Annotated[int, Field(ge=1, le=MAX_DB_INT)]


class PageIn(Schema):
    """`?limit=&offset=` on every list endpoint."""

    limit: int = Field(50, ge=1, le=MAX_LIMIT, description=f"How many items to return (1..{MAX_LIMIT})")
    offset: int = Field(0, ge=0, le=MAX_DB_INT, description="How many items to skip")


def page_of(queryset: QuerySet[M], page: PageIn) -> dict[str, Any]:
    """One page of an ordered queryset as {"count", "items"}; count is the total before paging."""
    return {"count": queryset.count(), "items": list(queryset[page.offset : page.offset + page.limit])}


def object_or_404(queryset: QuerySet[M], pk: int, noun: str) -> M:
    """The row `pk` of `queryset`, or a 404 naming what was not found."""
    obj = queryset.filter(pk=pk).first()
    if obj is None:
        raise HttpError(404, f"no {noun} with id {pk}")
    return obj


def require_any_perm(request: HttpRequest, *perms: str) -> None:
    """403 unless the authenticated user holds at least one of `perms`."""
    if not any(request.user.has_perm(p) for p in perms):
        raise HttpError(403, f"not allowed: needs one of {', '.join(perms)}")


def invalid_input(errors: dict[str, list[str]]) -> ValidationError:
    """A 400 naming each body field, from a Django `ValidationError.message_dict`-shaped mapping."""
    return ValidationError(
        [
            {"loc": ("body", *(() if field == NON_FIELD_ERRORS else (field,))), "msg": message}
            for field, messages in errors.items()
            for message in messages
        ]
    )


# Added last under the API: a path that matches no endpoint gets a JSON 404 rather than Django's
# HTML page, so a script with a typo in its URL still reads {"detail": ...}.
fallback_router = Router(auth=None)


@fallback_router.api_operation(
    ["GET", "POST", "PUT", "PATCH", "DELETE"], "/{path:rest}", include_in_schema=False
)
def unknown_endpoint(request: HttpRequest, rest: str) -> None:
    """404 naming the path that matched no endpoint."""
    raise HttpError(404, f"no endpoint at {request.path}")
