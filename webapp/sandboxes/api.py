"""JSON API: sandbox hosts heartbeat in here; people with the right list hosts and sandboxes."""

from __future__ import annotations

import hmac
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.security import HttpBearer

from webapp.common.api import ErrorOut, require_perm
from webapp.sandboxes.selectors import hosts_with_counts, sandboxes_list
from webapp.sandboxes.services import host_heartbeat

router = Router(tags=["sandboxes"])
DENIED = {401: ErrorOut, 403: ErrorOut}


class HostToken(HttpBearer):
    """`Authorization: Bearer <SANDBOX_HOST_TOKEN>`: only sandbox hosts hold it."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        expected = settings.SANDBOX_HOST_TOKEN
        if expected and hmac.compare_digest(token.encode(), expected.encode()):
            return "sandbox-host"
        return None


class LeaseReport(Schema):
    id: str = Field(max_length=64)
    sandbox_id: str = Field(max_length=100)
    holder: str = Field(max_length=200)
    acquired_at: float
    expires_at: float
    heartbeat_at: float
    broken: str | None = None


class SandboxReport(Schema):
    id: str = Field(max_length=100)
    profile: str = Field(max_length=100)
    provider: str = Field(pattern=r"^(xdesktop|browser|android)$")
    state: str = Field(max_length=16)
    last_error: str = ""
    endpoints: dict[str, Any] = {}
    latency_ms: dict[str, Any] = {}


class HeartbeatIn(Schema):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")
    api_url: str = Field(max_length=300, pattern=r"^https?://")
    version: str = ""
    profiles: dict[str, Any] = {}
    sandboxes: list[SandboxReport] = []
    leases: list[LeaseReport] = []
    errors: list[dict[str, Any]] = []
    counters: dict[str, int] = {}
    lease_latency_ms: dict[str, Any] = {}
    disk_quota: dict[str, Any] | None = None


class HeartbeatOut(Schema):
    host_id: int
    sandboxes: int
    leases: int


@router.post(
    "/sandbox-hosts/heartbeat",
    auth=HostToken(),
    response={200: HeartbeatOut, 401: ErrorOut},
    include_in_schema=False,  # for sandbox hosts only, not for scripts
)
def heartbeat(request: HttpRequest, payload: HeartbeatIn) -> dict[str, Any]:
    """A sandbox host registers itself and reports its pools, sandboxes and leases (host token only)."""
    host = host_heartbeat(report=payload.dict())
    return {"host_id": host.pk, "sandboxes": len(payload.sandboxes), "leases": len(payload.leases)}


class HostOut(Schema):
    id: int
    name: str
    api_url: str
    status: str
    last_heartbeat_at: datetime | None
    capacity: dict[str, Any]
    n_sandboxes: int
    n_leased: int


class SandboxOut(Schema):
    id: int
    host: str = Field(alias="host.name")
    external_id: str
    provider: str
    profile: str
    state: str
    last_error: str
    latency: dict[str, Any]


@router.get("/sandbox-hosts", response={200: list[HostOut], **DENIED})
def hosts(request: HttpRequest) -> Any:
    """Every registered sandbox host, with its pools and how many sandboxes it runs and lends."""
    require_perm(request, "sandboxes.view_sandboxhost")
    return list(hosts_with_counts())


@router.get("/sandboxes", response={200: list[SandboxOut], **DENIED})
def sandboxes(request: HttpRequest) -> Any:
    """Every sandbox that is not stopped, on every host."""
    require_perm(request, "sandboxes.view_sandbox")
    return list(sandboxes_list()[:1000])
