"""Reads of hosts, sandboxes and leases."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, Q, QuerySet

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
