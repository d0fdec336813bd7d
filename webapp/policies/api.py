"""JSON API: policy servers heartbeat in here (and learn which adapters to hold); people with the right
list the servers.

The heartbeat is checked at the door, strictly (a string is not a number, "yes" is not true): a bad
report is a 400 naming its field, so a sidecar bug shows in its log instead of as a half-stored row.
"""

from __future__ import annotations

import hmac
from datetime import datetime
from typing import Any, Literal

from django.conf import settings
from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.security import HttpBearer
from pydantic import ConfigDict

from webapp.common.api import ErrorOut, require_perm
from webapp.policies.rolling import weights_grant
from webapp.policies.selectors import servers_overview
from webapp.policies.services import policy_server_heartbeat

router = Router(tags=["policies"])
DENIED = {401: ErrorOut, 403: ErrorOut}


class ServerToken(HttpBearer):
    """`Authorization: Bearer <POLICY_SERVER_TOKEN>`: only policy servers hold it."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        expected = settings.POLICY_SERVER_TOKEN
        if expected and hmac.compare_digest(token.encode(), expected.encode()):
            return "policy-server"
        return None


class Strict(Schema):
    model_config = ConfigDict(strict=True)


def _amount(*, le: float | None = None) -> Any:
    """An optional finite number ≥ 0 (a metric the engine may not have yet)."""
    return Field(None, ge=0, le=le, allow_inf_nan=False)


class ModelReport(Strict):
    id: str = Field(min_length=1, max_length=200)
    kind: Literal["base", "lora"]
    path: str | None = Field(None, max_length=1000)


class MetricsReport(Strict):
    running: float | None = _amount()
    waiting: float | None = _amount()
    requests_total: float | None = _amount()
    prompt_tokens_total: float | None = _amount()
    generation_tokens_total: float | None = _amount()
    gen_tokens_per_s: float | None = _amount()
    kv_cache_usage: float | None = _amount(le=1.0)  # a fraction of the KV cache, 0–1


class ErrorReport(Strict):
    at: float = Field(ge=0, allow_inf_nan=False)
    message: str = Field(max_length=20_000)


class ServerHeartbeatIn(Strict):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")
    api_url: str = Field(max_length=300, pattern=r"^https?://[^\s/]+(/[^\s]*)?/v1$")
    engine: str = Field("", max_length=100)
    base_model: str = Field(min_length=1, max_length=200)
    weights: str = Field("", max_length=1000)
    state: Literal["starting", "serving", "restarting"]
    models: list[ModelReport] = Field([], max_length=1000)
    lora: bool = False
    metrics: MetricsReport = MetricsReport()
    errors: list[ErrorReport] = Field([], max_length=1000)


class AdapterOut(Schema):
    name: str
    path: str


class ServerHeartbeatOut(Schema):
    server_id: int
    adapters: list[AdapterOut]
    weights: AdapterOut | None = None  # other full weights to restart on now (a rolling update)


@router.post(
    "/policy-servers/heartbeat",
    auth=ServerToken(),
    response={200: ServerHeartbeatOut, 401: ErrorOut},
    include_in_schema=False,  # for policy servers only, not for scripts
)
def heartbeat(request: HttpRequest, payload: ServerHeartbeatIn) -> dict[str, Any]:
    """A policy server registers itself and reports what it serves, its load and errors (server token
    only); the answer names the LoRA adapters of its base model it should hold, and other full weights
    when it is this server's turn in a rolling update."""
    server, adapters = policy_server_heartbeat(report=payload.dict())
    return {"server_id": server.pk, "adapters": adapters, "weights": weights_grant(server_id=server.pk)}


class PolicyServerOut(Schema):
    id: int
    name: str
    api_url: str
    engine: str
    base_model: str
    weights: str
    status: str
    alive: bool
    models: list[dict[str, Any]]
    metrics: dict[str, Any]
    errors: list[dict[str, Any]]
    registered_at: datetime
    last_heartbeat_at: datetime | None


@router.get("/policy-servers", response={200: list[PolicyServerOut], **DENIED})
def servers(request: HttpRequest) -> Any:
    """Every registered policy server: status, whether it is alive, what it serves, its load, its
    latest errors (newest first)."""
    require_perm(request, "policies.view_policyserver")
    return servers_overview()
