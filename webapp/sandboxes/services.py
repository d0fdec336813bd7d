"""Writes for leases and sandboxes kept in the web app's database."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from webapp.sandboxes.models import Lease, Sandbox

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
