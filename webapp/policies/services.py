"""Writes: naming policies; policy servers' heartbeats in, silent servers out."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agent_core.policies.local import is_vision_model
from agent_core.policies.vision import checkpoint_coords
from agent_core.training.sampling import placeholder_ids_in
from webapp.policies.models import PolicyServer, PolicyVersion
from webapp.policies.selectors import adapters_wanted

log = logging.getLogger(__name__)

# What a server keeps of its last heartbeat's errors, and of each message.
ERRORS_KEPT = 20
ERROR_CHARS = 2000


def free_policy_name(base: str) -> str:
    """`base`, or `base-2`, `base-3`, … whichever no policy is called yet."""
    base = base[:90].strip("-") or "policy"
    name, n = base, 1
    while PolicyVersion.objects.filter(name=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _model_config(model_dir: Path) -> dict[str, Any]:
    """A model directory's config.json ({} if it has none or it is not JSON)."""
    try:
        data = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def served_twin_create(*, local: PolicyVersion, served_name: str | None = None) -> PolicyVersion:
    """`<name>-served`: a local policy's full weights on the platform's policy servers, under the model id
    `served_name` (default: the local policy's name), answering from the prompt the local policy renders
    (text_only for a text-only model) with the token ids RL trains on. Idempotent: updated if it exists.
    A server started on those weights under that id serves it (python -m agent_core.serving)."""
    if local.backend != PolicyVersion.Backend.LOCAL or local.model_dir() is None:
        raise ValueError(f"policy {local.name} is not a local model")
    served_name = served_name or local.name
    # Vision as the checkpoint says it: its processor config under either name (transformers 5 writes
    # processor_config.json, older releases preprocessor_config.json) or a vision_config in config.json.
    vision = is_vision_model(local.model_dir())  # type: ignore[arg-type]
    config = {**(local.config or {}), "extra_body": {"return_token_ids": True}}
    if not vision:
        config["text_only"] = True
    else:  # the server never samples an image placeholder either (the local policy does not)
        config["coords"] = checkpoint_coords(local.model_dir(), str(config.get("coords", "smart_resize")))  # type: ignore[arg-type]
        banned = placeholder_ids_in(_model_config(local.model_dir()))  # type: ignore[arg-type]
        if banned:
            config["extra_body"]["logit_bias"] = {str(i): -100 for i in banned}
    path = local.checkpoint.path if local.checkpoint is not None else local.model_name
    twin, _ = PolicyVersion.objects.update_or_create(
        name=f"{local.name}-served"[:100],
        defaults={
            "backend": PolicyVersion.Backend.OPENAI,
            "checkpoint": None,
            "endpoint_url": "",
            "model_name": served_name,
            "serving": {"base": served_name, "kind": "base", "path": str(local.model_dir())},
            "config": config,
            "is_active": True,
            "lineage": {"weights_of": local.name, "stored_as": str(path)},
        },
    )
    return twin


def policy_server_heartbeat(*, report: Mapping[str, Any]) -> tuple[PolicyServer, list[dict[str, str]]]:
    """Register or refresh a policy server from its heartbeat; returns it and the adapters it should load.

    The server is the authority on what it serves; the row mirrors its last report. Online once it
    says it is serving, starting otherwise (starting up, or restarting onto new weights).
    """
    now = timezone.now()
    with transaction.atomic():
        server, _ = PolicyServer.objects.select_for_update(no_key=True).get_or_create(
            name=report["name"], defaults={"api_url": report["api_url"], "base_model": report["base_model"]}
        )
        server.api_url = report["api_url"]
        server.engine = str(report.get("engine", ""))[:100]
        server.base_model = report["base_model"]
        server.weights = str(report.get("weights", ""))
        server.status = (
            PolicyServer.Status.ONLINE if report["state"] == "serving" else PolicyServer.Status.STARTING
        )
        server.models = [_model_entry(m) for m in report.get("models", [])]
        server.metrics = {k: v for k, v in (report.get("metrics") or {}).items() if v is not None}
        server.errors = [
            {"at": float(e["at"]), "message": str(e["message"])[:ERROR_CHARS]}
            for e in list(report.get("errors", []))[-ERRORS_KEPT:]
        ]
        server.last_heartbeat_at = now
        server.save()
    adapters = adapters_wanted(base_model=server.base_model) if report.get("lora") else []
    return server, adapters


def _model_entry(item: Mapping[str, Any]) -> dict[str, str]:
    entry = {"id": str(item["id"]), "kind": str(item["kind"])}
    if item.get("path"):
        entry["path"] = str(item["path"])
    return entry


def servers_mark_offline(*, now: datetime | None = None) -> int:
    """Policy servers silent for longer than POLICY_SERVER_GRACE_S go offline; returns how many."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.POLICY_SERVER_GRACE_S)
    stale = PolicyServer.objects.exclude(status=PolicyServer.Status.OFFLINE).filter(
        Q(last_heartbeat_at__lt=cutoff) | Q(last_heartbeat_at__isnull=True)
    )
    count = stale.update(status=PolicyServer.Status.OFFLINE)
    if count:
        log.warning("servers_mark_offline: %d policy server(s) stopped heartbeating", count)
    return count
