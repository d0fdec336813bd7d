"""Celery tasks for demonstrations: preparing a sandbox (queue `interactive`), the reaper (beat)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from webapp.annotation.services import demo_prepare, demos_reap


@shared_task(name="webapp.annotation.tasks.demo_prepare_task", acks_late=True)
def demo_prepare_task(episode_id: int) -> dict[str, Any] | None:
    """Lease and set up the sandbox of a pending demonstration; a second delivery does nothing."""
    episode = demo_prepare(episode_id=episode_id)
    if episode is None:
        return None
    return {"episode": episode.pk, "status": episode.status, "error": episode.error}


@shared_task(name="webapp.annotation.tasks.demos_reap_task")
def demos_reap_task() -> int:
    """End demonstrations whose sandbox was lost while nobody worked on them."""
    return demos_reap()
