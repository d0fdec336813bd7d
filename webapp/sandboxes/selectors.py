"""Reads of hosts, sandboxes and leases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from webapp.episodes.models import Episode
from webapp.episodes.selectors import episodes_visible_to
from webapp.sandboxes.models import Lease, Sandbox, SandboxHost


def hosts_with_counts() -> QuerySet[SandboxHost]:
    """Hosts annotated with how many sandboxes they run and how many are leased."""
    return SandboxHost.objects.annotate(
        n_sandboxes=Count("sandboxes", filter=~Q(sandboxes__state=Sandbox.State.STOPPED)),
        n_leased=Count("sandboxes", filter=Q(sandboxes__state=Sandbox.State.LEASED)),
    )


def sandboxes_list() -> QuerySet[Sandbox]:
    """All sandboxes that are not stopped, with their host."""
    return (
        Sandbox.objects.select_related("host")
        .exclude(state=Sandbox.State.STOPPED)
        .prefetch_related("leases")
        .order_by("host__name", "profile", "external_id")
    )


def leases_active() -> QuerySet[Lease]:
    """Live leases, soonest expiry first."""
    return (
        Lease.objects.filter(state=Lease.State.ACTIVE)
        .select_related("sandbox", "user")
        .order_by("expires_at")
    )


def host_errors(*, hosts: list[SandboxHost]) -> list[dict[str, Any]]:
    """Recent errors the hosts reported in their last heartbeats, newest first."""
    errors = [
        {**err, "host": h.name, "at": datetime.fromtimestamp(float(err.get("at", 0)), tz=UTC)}
        for h in hosts
        for err in (h.report or {}).get("errors", [])
    ]
    return sorted(errors, key=lambda e: e["at"], reverse=True)


# --- who may watch or drive a sandbox's screen ----------------------------------------------------

CONTROL = "control"
VIEW = "view"


def profiles_known() -> list[str]:
    """Sandbox profiles a task may run on: the built-in ones and every profile a registered host serves."""
    from sandbox_workers.profiles import DEFAULT_PROFILES

    # Android and office (OSWorld's applications) are served where a host is given them.
    names = {*DEFAULT_PROFILES, "android", "office"}
    for capacity in SandboxHost.objects.values_list("capacity", flat=True):
        names.update(capacity or {})
    return sorted(names)


def profiles_served() -> list[str]:
    """Profiles a task can start on now: the built-in ones (a host serves them unless told otherwise:
    a task on them waits for a sandbox while its host restarts) and every profile an online host that
    heartbeated within the grace period serves (office, android: only where a host was given them)."""
    from sandbox_workers.profiles import DEFAULT_PROFILES

    cutoff = timezone.now() - timedelta(seconds=settings.SANDBOX_HOST_GRACE_SECONDS)
    alive = SandboxHost.objects.filter(status=SandboxHost.Status.ONLINE, last_heartbeat_at__gte=cutoff)
    names = set(DEFAULT_PROFILES)
    for capacity in alive.values_list("capacity", flat=True):
        names.update(capacity or {})
    return sorted(names)


def sandbox_access(*, user: Any, sandbox: Sandbox) -> str | None:
    """ "control", "view" or None: what `user` may do with `sandbox`'s live screen now."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser or user.has_perm("sandboxes.change_sandbox"):
        return CONTROL
    if Lease.objects.filter(sandbox=sandbox, state=Lease.State.ACTIVE, user=user).exists():
        return CONTROL
    if user.has_perm("sandboxes.view_sandbox"):
        # Researchers run rollouts, so they may take over one on a sandbox they can see.
        return CONTROL if user.has_perm("episodes.run_rollouts") else VIEW
    running = episodes_visible_to(user=user).filter(sandbox=sandbox, status=Episode.Status.RUNNING)
    return VIEW if running.exists() else None


def sandboxes_visible_to(*, user: Any) -> QuerySet[Sandbox]:
    """Sandboxes whose live screen `user` may see (the same rule as sandbox_access), for the wall."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Sandbox.objects.none()
    qs = sandboxes_list()
    if (
        user.is_superuser
        or user.has_perm("sandboxes.change_sandbox")
        or user.has_perm("sandboxes.view_sandbox")
    ):
        return qs
    running = episodes_visible_to(user=user).filter(status=Episode.Status.RUNNING).values("sandbox_id")
    held = Lease.objects.filter(state=Lease.State.ACTIVE, user=user).values("sandbox_id")
    return qs.filter(Q(pk__in=running) | Q(pk__in=held))
