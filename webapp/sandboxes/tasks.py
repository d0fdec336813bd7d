"""Celery tasks for sandbox upkeep (queue `sandboxes`)."""

from __future__ import annotations

from celery import shared_task

from webapp.sandboxes.services import hosts_mark_offline, leases_expire


@shared_task(name="webapp.sandboxes.tasks.leases_reap", ignore_result=False)
def leases_reap() -> int:
    """Expire leases past their TTL; returns how many."""
    return leases_expire()


@shared_task(name="webapp.sandboxes.tasks.hosts_check", ignore_result=False)
def hosts_check() -> int:
    """Mark hosts that stopped heartbeating offline; returns how many."""
    return hosts_mark_offline()
