"""Builders for the dashboards' tests: ended episodes at a chosen time, hosts from a heartbeat."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from tests.factories import make_episode
from webapp.catalog.models import Task
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_create, episode_finish, episode_start
from webapp.policies.models import PolicyVersion
from webapp.sandboxes.models import Sandbox, SandboxHost
from webapp.sandboxes.services import host_heartbeat


def ended(
    task: Task,
    *,
    at: datetime | None = None,
    reward: float | None = None,
    env_error: bool = False,
    policy: PolicyVersion | None = None,
    sandbox: Sandbox | None = None,
    annotator: AbstractBaseUser | None = None,
    source: str | None = None,
    steps: int = 0,
    started: datetime | None = None,
) -> Episode:
    """An episode of `task` ended through the services (env_error ends it aborted), then dated `at`."""
    if env_error:
        episode = episode_create(task=task, source=source or "agent", annotator=annotator)
        episode_start(episode=episode)
        episode_finish(episode=episode, reward=None, env_error=True, error="sandbox died")
    else:
        episode = make_episode(task=task, annotator=annotator, source=source, steps=steps, reward=reward)
    fields: dict[str, Any] = {"policy_version": policy, "sandbox": sandbox}
    if at is not None:
        fields["finished_at"] = at
    if started is not None:
        fields["started_at"] = started
    Episode.objects.filter(pk=episode.pk).update(**fields)
    episode.refresh_from_db()
    return episode


def heartbeat(
    name: str,
    *,
    sandboxes: list[dict[str, Any]],
    counters: dict[str, int] | None = None,
    lease_wait: dict[str, float] | None = None,
    profiles: dict[str, Any] | None = None,
) -> SandboxHost:
    """Register `name` through the heartbeat service, as a real host's report would."""
    now = time.time()
    items = []
    leases = []
    for i, s in enumerate(sandboxes):
        sid = s.get("id", f"{name}-sb{i}")
        items.append(
            {
                "id": sid,
                "profile": s["profile"],
                "provider": s.get("provider", "browser"),
                "state": s["state"],
                "latency_ms": s.get("latency", {}),
                "endpoints": {},
            }
        )
        if s["state"] == "leased":
            leases.append({"id": f"lease-{sid}", "sandbox_id": sid, "holder": "episode:test",
                           "acquired_at": now - 5, "expires_at": now + 300, "heartbeat_at": now})  # fmt: skip
    return host_heartbeat(
        report={
            "name": name,
            "api_url": f"http://{name}.invalid:9000",
            "profiles": profiles or {},
            "sandboxes": items,
            "leases": leases,
            "errors": [],
            "counters": counters or {},
            "lease_latency_ms": {"all": lease_wait} if lease_wait else {},
        }
    )
