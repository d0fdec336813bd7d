"""Celery tasks for policy-server upkeep (queue `sandboxes`, beside the sandbox host check)."""

from __future__ import annotations

from celery import shared_task

from webapp.policies.services import servers_mark_offline


@shared_task(name="webapp.policies.tasks.servers_check", ignore_result=False)
def servers_check() -> int:
    """Mark policy servers that stopped heartbeating offline; returns how many."""
    return servers_mark_offline()
