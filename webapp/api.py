"""The JSON API for scripts: token (or session) auth, 400 for bad input, OpenAPI at /api/v1/openapi.json."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, ValidationError

from webapp.accounts.selectors import user_roles
from webapp.common.api import BearerToken, ErrorOut, SessionCookie, require_perm

__all__ = ["ErrorOut", "api", "require_perm"]


api = NinjaAPI(
    title="GUI-agent flywheel API",
    version="1",
    description="Tasks, rollout batches, episodes with their steps, datasets and training runs. "
    "Authenticate with `Authorization: Bearer <token>` (create one on the API tokens page).",
    auth=[BearerToken(), SessionCookie()],
    urls_namespace="api",
)


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


from webapp.catalog.api import router as catalog_router  # noqa: E402
from webapp.dashboards.api import router as dashboards_router  # noqa: E402
from webapp.datasets.api import router as datasets_router  # noqa: E402
from webapp.episodes.api import router as episodes_router  # noqa: E402
from webapp.policies.api import router as policies_router  # noqa: E402
from webapp.rollouts.api import router as rollouts_router  # noqa: E402
from webapp.sandboxes.api import router as sandboxes_router  # noqa: E402
from webapp.training.api import router as training_router  # noqa: E402

api.add_router("", catalog_router)
api.add_router("", episodes_router)
api.add_router("", rollouts_router)
api.add_router("", datasets_router)
api.add_router("", training_router)
api.add_router("", sandboxes_router)
api.add_router("", policies_router)
api.add_router("", dashboards_router)

# Last, so it only answers paths no endpoint above matched.
from webapp.common.api import fallback_router  # noqa: E402

api.add_router("", fallback_router)
