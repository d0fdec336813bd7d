"""Reads of hosts, sandboxes and leases."""

from __future__ import annotations

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
    return Sandbox.objects.select_related("host").exclude(state=Sandbox.State.STOPPED)


def leases_active() -> QuerySet[Lease]:
    """Live leases, soonest expiry first."""
    return (
        Lease.objects.filter(state=Lease.State.ACTIVE)
        .select_related("sandbox", "user")
        .order_by("expires_at")
    )
