"""Writes for leases and sandboxes kept in the web app's database."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from sandbox_workers.client import HostClient, HostUnreachable, LeasedSandbox, LeaseInfo
from sandbox_workers.pool import LeaseNotFound
from sandbox_workers.pool import SandboxUnavailable as HostUnavailable
from webapp.sandboxes.models import Lease, Sandbox, SandboxHost

log = logging.getLogger(__name__)


class SandboxUnavailable(Exception):
    """No sandbox could be leased (none idle, or the one asked for is held)."""


def lease_acquire(*, sandbox: Sandbox, holder: str, ttl_seconds: int, user: object | None = None) -> Lease:
    """Lease an idle sandbox for `ttl_seconds`; raises SandboxUnavailable if it is not idle."""
    if ttl_seconds <= 0:
        raise ValueError("ttl_seconds must be positive")
    now = timezone.now()
    with transaction.atomic():
        claimed = Sandbox.objects.filter(pk=sandbox.pk, state=Sandbox.State.IDLE).update(
            state=Sandbox.State.LEASED
        )
        if claimed != 1:
            raise SandboxUnavailable(f"sandbox {sandbox} is not idle")
        return Lease.objects.create(
            sandbox=sandbox,
            holder=holder,
            user=user,
            acquired_at=now,
            heartbeat_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
        )


def leases_expire(*, now: datetime | None = None) -> int:
    """Mark every active lease past its expiry as expired and send its sandbox to reset.

    Safe to run twice or concurrently: each lease is claimed with a conditional update.
    """
    started = time.monotonic()
    now = now or timezone.now()
    expired = 0
    for lease in Lease.objects.filter(state=Lease.State.ACTIVE, expires_at__lte=now).only("pk", "sandbox_id"):
        with transaction.atomic():
            if (
                Lease.objects.filter(pk=lease.pk, state=Lease.State.ACTIVE).update(
                    state=Lease.State.EXPIRED, ended_at=now
                )
                != 1
            ):
                continue
            Sandbox.objects.filter(pk=lease.sandbox_id, state=Sandbox.State.LEASED).update(
                state=Sandbox.State.RESETTING
            )
            expired += 1
    if expired:
        log.info(
            "leases_expire: expired %d lease(s) in %.1f ms", expired, (time.monotonic() - started) * 1000
        )
    return expired


# --- sandbox hosts: heartbeats in, host API calls out ---------------------------------------------

# How long a just-acquired lease may be absent from its host's heartbeats before the mirror ends it.
LEASE_REPORT_GRACE_S = 15.0

HOST_STATES = {
    "starting": Sandbox.State.STARTING,
    "idle": Sandbox.State.IDLE,
    "leased": Sandbox.State.LEASED,
    "resetting": Sandbox.State.RESETTING,
    "stopping": Sandbox.State.STOPPING,
}


def _epoch(value: float) -> datetime:
    return datetime.fromtimestamp(float(value), tz=UTC)


def host_heartbeat(*, report: Mapping[str, Any]) -> SandboxHost:
    """Register or refresh a host from its heartbeat, and mirror its sandboxes and leases.

    The host is the authority on sandboxes and leases; these rows are a mirror the pages read.
    A sandbox the host no longer reports is stopped; a lease it no longer reports has ended.
    """
    now = timezone.now()
    with transaction.atomic():
        host = _host_refresh(report, now)
        seen = _sandboxes_mirror(host, report)
        _leases_end_unreported(host, report, now)
        _leases_mirror(report, seen, now)
    return host


def _host_refresh(report: Mapping[str, Any], now: datetime) -> SandboxHost:
    host, _ = SandboxHost.objects.select_for_update(no_key=True).get_or_create(
        name=report["name"], defaults={"api_url": report["api_url"]}
    )
    host.api_url = report["api_url"]
    host.version = str(report.get("version", ""))[:50]
    host.status = SandboxHost.Status.ONLINE
    host.last_heartbeat_at = now
    host.capacity = report.get("profiles", {})
    host.report = {
        "errors": report.get("errors", [])[-20:],
        "counters": report.get("counters", {}),
        "lease_latency_ms": report.get("lease_latency_ms", {}),
        "disk_quota": report.get("disk_quota"),  # {"enabled", "reason"}: a host without quotas says why
    }
    host.save()
    return host


def _sandboxes_mirror(host: SandboxHost, report: Mapping[str, Any]) -> dict[str, Sandbox]:
    """The reported sandboxes by their id on the host; those it no longer reports are stopped."""
    seen: dict[str, Sandbox] = {}
    for item in report.get("sandboxes", []):
        sandbox, _ = Sandbox.objects.update_or_create(
            host=host,
            external_id=item["id"],
            defaults={
                "provider": item["provider"],
                "profile": item["profile"],
                "state": HOST_STATES.get(item["state"], Sandbox.State.UNHEALTHY),
                "endpoints": item.get("endpoints", {}),
                "last_error": item.get("last_error", ""),
                "latency": item.get("latency_ms", {}),
            },
        )
        seen[sandbox.external_id] = sandbox
    host.sandboxes.exclude(external_id__in=seen).exclude(state=Sandbox.State.STOPPED).update(
        state=Sandbox.State.STOPPED
    )
    return seen


def _leases_end_unreported(host: SandboxHost, report: Mapping[str, Any], now: datetime) -> None:
    # End the leases the host no longer holds first: a sandbox has one active lease at most. A
    # lease taken moments ago may be missing from a report the host assembled just before it:
    # that one is left alone, or a stale heartbeat would end the lease its holder just got.
    reported = [item["id"] for item in report.get("leases", [])]
    fresh = now - timedelta(seconds=LEASE_REPORT_GRACE_S)
    for lease in (
        Lease.objects.filter(sandbox__host=host, state=Lease.State.ACTIVE)
        .exclude(external_id__in=reported)
        .exclude(acquired_at__gt=fresh)
    ):
        lease.state = Lease.State.EXPIRED if lease.expires_at <= now else Lease.State.RELEASED
        lease.ended_at = now
        lease.save(update_fields=["state", "ended_at"])


def _leases_mirror(report: Mapping[str, Any], seen: dict[str, Sandbox], now: datetime) -> None:
    """Refresh the reported leases; record one the platform has not seen (taken on the host before
    its own write landed, or by another route), ending the sandbox's previous active lease."""
    for item in report.get("leases", []):
        lease_id = item["id"]
        fields = {
            "expires_at": _epoch(item["expires_at"]),
            "heartbeat_at": _epoch(item["heartbeat_at"]),
        }
        if item.get("broken"):  # its sandbox may already be gone from the report
            Lease.objects.filter(external_id=lease_id, state=Lease.State.ACTIVE).update(
                state=Lease.State.BROKEN, ended_at=now
            )
            continue
        sandbox = seen.get(item["sandbox_id"])
        if sandbox is None:
            continue
        updated = Lease.objects.filter(external_id=lease_id, state=Lease.State.ACTIVE).update(**fields)
        if not updated and not Lease.objects.filter(external_id=lease_id).exists():
            Lease.objects.filter(sandbox=sandbox, state=Lease.State.ACTIVE).update(
                state=Lease.State.RELEASED, ended_at=now
            )
            Lease.objects.create(
                sandbox=sandbox,
                external_id=lease_id,
                holder=item["holder"],
                acquired_at=_epoch(item["acquired_at"]),
                **{"state": Lease.State.ACTIVE, "ended_at": None, **fields},
            )


def hosts_mark_offline(*, now: datetime | None = None) -> int:
    """Hosts silent for longer than the grace period go offline; returns how many."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.SANDBOX_HOST_GRACE_SECONDS)
    stale = SandboxHost.objects.filter(status=SandboxHost.Status.ONLINE).filter(
        Q(last_heartbeat_at__lt=cutoff) | Q(last_heartbeat_at__isnull=True)
    )
    count = stale.update(status=SandboxHost.Status.OFFLINE)
    if count:
        log.warning("hosts_mark_offline: %d host(s) stopped heartbeating", count)
    return count


def host_client(host: SandboxHost, *, timeout: float = 60.0) -> HostClient:
    """A client for `host`'s API with this web app's host token."""
    if not settings.SANDBOX_HOST_TOKEN:
        raise SandboxUnavailable("SANDBOX_HOST_TOKEN is not set: this web app cannot talk to sandbox hosts")
    return HostClient(host.api_url, settings.SANDBOX_HOST_TOKEN, timeout=timeout)


def sandbox_lease(
    *, profile: str, holder: str, ttl_s: float = 300, user: Any = None, wait_s: float = 0
) -> tuple[Lease, LeasedSandbox]:
    """Lease a warm sandbox of `profile` from whichever live host has one idle.

    Hosts with the most idle sandboxes of the profile are tried first; a host that turns out to
    be full or unreachable is skipped. Raises SandboxUnavailable naming what was tried.
    """
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.SANDBOX_HOST_GRACE_SECONDS)
    hosts = (
        SandboxHost.objects.filter(status=SandboxHost.Status.ONLINE, last_heartbeat_at__gte=cutoff)
        .annotate(
            idle=Count("sandboxes", filter=Q(sandboxes__profile=profile, sandboxes__state=Sandbox.State.IDLE))
        )
        .order_by("-idle", "name")
    )
    deadline = time.monotonic() + wait_s
    candidates = [host for host in hosts if profile in (host.capacity or {})]
    tried: list[str] = []
    busy: list[SandboxHost] = []
    leased: LeasedSandbox | None = None
    # Hosts this database shows an idle sandbox on are asked without waiting, so a full host is not
    # waited on while another has one; those shown full wait. The counts come from heartbeats and can
    # be stale: a host that answered "none idle" to a no-wait ask is then waited on with the time left
    # (a sandbox of a just-ended lease is still resetting there), rather than failing at once.
    for host in candidates:
        wait = max(0.0, deadline - time.monotonic()) if host.idle == 0 else 0.0
        leased = _acquire(host, profile, holder, ttl_s, wait, tried, busy if wait == 0 else None)
        if leased is not None:
            break
    if leased is None and wait_s > 0:
        for host in busy:
            leased = _acquire(host, profile, holder, ttl_s, max(0.0, deadline - time.monotonic()), tried)
            if leased is not None:
                break
    if leased is not None:
        now = timezone.now()  # after any wait
        with transaction.atomic():
            sandbox, _ = Sandbox.objects.get_or_create(
                host=host,
                external_id=leased.info.sandbox_id,
                defaults={"provider": leased.info.provider, "profile": profile},
            )
            # The host may report this lease in a heartbeat before this transaction commits, and the
            # heartbeat then records it too. Both write a sandbox's leases holding its row (the heartbeat's
            # update_or_create, this update), so one waits for the other and then sees its lease: adopt it
            # rather than insert a second active lease (a unique violation that failed the episode).
            Sandbox.objects.filter(pk=sandbox.pk).update(state=Sandbox.State.LEASED)  # locks the row
            lease = Lease.objects.filter(external_id=leased.info.id, state=Lease.State.ACTIVE).first()
            if lease is not None:
                lease.holder, lease.user = holder, user
                lease.save(update_fields=["holder", "user"])
            else:
                Lease.objects.filter(sandbox=sandbox, state=Lease.State.ACTIVE).update(
                    state=Lease.State.RELEASED, ended_at=now
                )
                lease = Lease.objects.create(
                    sandbox=sandbox,
                    external_id=leased.info.id,
                    holder=holder,
                    user=user,
                    acquired_at=now,
                    heartbeat_at=now,
                    expires_at=_epoch(leased.info.expires_at),
                )
        return lease, leased
    reason = "; ".join(tried) or "no live host serves this profile"
    raise SandboxUnavailable(f"no '{profile}' sandbox available: {reason}")


def _acquire(
    host: SandboxHost,
    profile: str,
    holder: str,
    ttl_s: float,
    wait_s: float,
    tried: list[str],
    busy: list[SandboxHost] | None = None,
) -> LeasedSandbox | None:
    """One host's answer to a lease request: the sandbox, or None with why noted in `tried` (and the
    host added to `busy` when it was reachable but had none idle)."""
    client = host_client(host)
    try:
        return client.acquire(profile, holder=holder, ttl_s=ttl_s, wait_s=wait_s)
    except (HostUnreachable, HostUnavailable) as exc:
        client.close()
        tried.append(f"{host.name}: {exc}")
        if busy is not None and isinstance(exc, HostUnavailable):
            busy.append(host)
    return None


def lease_end(*, lease: Lease, recycle: bool = False) -> None:
    """Release `lease` on its host (reset, or replace with `recycle`) and mark the row released."""
    # LeaseNotFound: the host already ended it (expired, or the sandbox died).
    with host_client(lease.sandbox.host) as client, contextlib.suppress(LeaseNotFound):
        client.lease(lease_info(lease)).release(recycle=recycle)
    Lease.objects.filter(pk=lease.pk, state=Lease.State.ACTIVE).update(
        state=Lease.State.RELEASED, ended_at=timezone.now()
    )


def lease_info(lease: Lease) -> LeaseInfo:
    """What a host client needs to act under a lease row."""
    return LeaseInfo(
        id=lease.external_id,
        sandbox_id=lease.sandbox.external_id,
        profile=lease.sandbox.profile,
        provider=lease.sandbox.provider,
        expires_at=lease.expires_at.timestamp(),
        endpoints=lease.sandbox.endpoints,
    )


def sandbox_admin(*, sandbox: Sandbox, action: str) -> None:
    """Reset or kill a sandbox on its host (an admin's button); a holder's lease ends."""
    if action not in ("reset", "kill"):
        raise ValueError(f"unknown sandbox action {action!r}; valid: reset, kill")
    with host_client(sandbox.host) as client:
        if action == "reset":
            client.reset_sandbox(sandbox.external_id)
        else:
            client.kill_sandbox(sandbox.external_id)
    log.info("sandbox %s: %s by an administrator", sandbox, action)
