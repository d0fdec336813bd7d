"""Reads: which policy servers are alive, which of them serve a model, what the servers page shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from webapp.policies.models import PolicyServer, PolicyVersion

# The most adapters one server is asked to hold (newest first); vLLM's --max-loras bounds the rest.
ADAPTERS_MAX = 16


def servers_alive(*, now: datetime | None = None) -> list[PolicyServer]:
    """Servers that say they are serving and heartbeated within POLICY_SERVER_GRACE_S, by name."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.POLICY_SERVER_GRACE_S)
    return list(PolicyServer.objects.filter(status=PolicyServer.Status.ONLINE, last_heartbeat_at__gte=cutoff))


def server_urls_for(model_id: str, *, now: datetime | None = None) -> list[str]:
    """The OpenAI base URLs of the alive servers that serve `model_id` (a base model or an adapter)."""
    return [s.api_url for s in servers_alive(now=now) if model_id in s.model_ids()]


def version_ready(version: PolicyVersion) -> bool:
    """Whether a rollout could run `version` now: a platform-served one needs an alive server serving it."""
    if not version.is_platform_served():
        return True
    return bool(server_urls_for(version.served_model_id()))


def line_of(version: PolicyVersion) -> str:
    """The line a version belongs to: what it was trained from, first of all (lineage "line"), else itself.
    Versions promoted or published from a run inherit their base's line."""
    line = (version.lineage or {}).get("line")
    return str(line) if isinstance(line, str) and line else version.name


def newest_ready(version: PolicyVersion) -> PolicyVersion:
    """The newest active version of `version`'s line that a rollout could run now; `version` itself when
    nothing newer is ready (a new adapter not loaded by any server yet: rollouts stay on the old one)."""
    line = line_of(version)
    later = Q(created_at__gt=version.created_at) | Q(created_at=version.created_at, pk__gt=version.pk)
    newer = (
        PolicyVersion.objects.filter(later, is_active=True)
        .filter(Q(lineage__line=line) | Q(name=line))
        .order_by("-created_at", "-pk")
    )
    for candidate in newer[:8]:
        if version_ready(candidate):
            return candidate
    return version


def var_stored(path: Path | str) -> str:
    """How a version records a directory: relative to the var dir when it lies inside it (every process
    resolves it with var_path), else absolute. The inverse of var_path."""
    resolved = Path(path).resolve()
    var = Path(settings.VAR_DIR).resolve()
    return str(resolved.relative_to(var)) if resolved.is_relative_to(var) else str(resolved)


def var_path(raw: str) -> str:
    """A path as written on a version: absolute, or relative to the var dir every process shares."""
    path = Path(raw)
    return str(path if path.is_absolute() else Path(settings.VAR_DIR) / path)


def adapters_wanted(*, base_model: str) -> list[dict[str, str]]:
    """The LoRA adapters a server of `base_model` should hold: active openai versions whose serving is a
    LoRA on that base, newest first, at most ADAPTERS_MAX; each {"name": its model id, "path"}. A
    version without an adapter path has nothing to load and is left out."""
    versions = PolicyVersion.objects.filter(
        is_active=True,
        backend=PolicyVersion.Backend.OPENAI,
        serving__kind="lora",
        serving__base=base_model,
    ).order_by("-created_at", "-pk")
    wanted: list[dict[str, str]] = []
    for version in versions[: ADAPTERS_MAX * 4]:
        path = (version.serving or {}).get("path")
        if isinstance(path, str) and path:
            wanted.append({"name": version.served_model_id(), "path": var_path(path)})
        if len(wanted) == ADAPTERS_MAX:
            break
    return wanted


def _errors_newest_first(server: PolicyServer) -> list[dict[str, Any]]:
    errors = [
        {"at": datetime.fromtimestamp(float(e.get("at", 0)), tz=UTC), "message": str(e.get("message", ""))}
        for e in server.errors or []
        if isinstance(e, dict)
    ]
    return sorted(errors, key=lambda e: e["at"], reverse=True)


def servers_overview(*, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every registered server for the page and the API: the row's fields, whether it is alive, what it
    serves (base models and adapters apart), and its latest errors first."""
    now = now or timezone.now()
    grace = settings.POLICY_SERVER_GRACE_S
    rows = []
    for server in PolicyServer.objects.all():
        alive = server.is_alive(now=now, grace_seconds=grace)
        models = [m for m in server.models or [] if isinstance(m, dict)]
        seen = server.last_heartbeat_at
        rows.append(
            {
                "server": server,
                "id": server.pk,
                "name": server.name,
                "api_url": server.api_url,
                "engine": server.engine,
                "base_model": server.base_model,
                "weights": server.weights,
                "status": server.status,
                # What the page shows: a server past its grace is offline even before the beat says so.
                "shown_status": server.status if alive else PolicyServer.Status.OFFLINE,
                "alive": alive,
                "models": models,
                "bases": [str(m.get("id")) for m in models if m.get("kind") == "base"],
                "adapters": [str(m.get("id")) for m in models if m.get("kind") == "lora"],
                "metrics": server.metrics or {},
                "errors": _errors_newest_first(server),
                "registered_at": server.registered_at,
                "last_heartbeat_at": seen,
                "heartbeat_age_s": (now - seen).total_seconds() if seen is not None else None,
            }
        )
    return rows
