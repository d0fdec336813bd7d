"""The JSON API for scripts: token (or session) auth, 400 for bad input, OpenAPI at /api/v1/openapi.json."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import APIKeyCookie, HttpBearer

from webapp.accounts.selectors import user_roles
from webapp.accounts.services import api_token_authenticate


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

    param_name = "sessionid"

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        if request.user.is_authenticated and request.user.is_active:
            return request.user
        return None


api = NinjaAPI(
    title="GUI-agent flywheel API",
    version="1",
    description="Tasks, episodes with their steps, datasets and training runs. "
    "Authenticate with `Authorization: Bearer <token>` (create one on the API tokens page).",
    auth=[BearerToken(), SessionCookie()],
    urls_namespace="api",
)


class ErrorOut(Schema):
    detail: str
    errors: list[dict[str, Any]] | None = None


def _location(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "payload", "query", "path")]
    return ".".join(parts) or "request"


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Wrong types or missing fields: 400 naming each field and what was wrong."""
    errors = [{"field": _location(e.get("loc", ())), "message": e.get("msg", "invalid")} for e in exc.errors]
    summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return api.create_response(
        request, {"detail": f"invalid request: {summary}", "errors": errors}, status=400
    )


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    """No or bad credentials: 401 with the scheme to use."""
    response = api.create_response(
        request, {"detail": "authentication required: send Authorization: Bearer <token>"}, status=401
    )
    response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def require_perm(request: HttpRequest, *perms: str) -> None:
    """403 unless the authenticated user holds every one of `perms`."""
    missing = [p for p in perms if not request.user.has_perm(p)]
    if missing:
        raise HttpError(403, f"not allowed: needs {', '.join(missing)}")


class MeOut(Schema):
    username: str
    roles: list[str]


@api.get("/me", response=MeOut, tags=["accounts"])
def me(request: HttpRequest) -> dict[str, Any]:
    """Who the token or session belongs to, and their roles."""
    return {
        "username": request.user.get_username(),
        "roles": [r.value for r in user_roles(user=request.user)],
    }
