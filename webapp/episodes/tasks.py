"""Celery tasks over episodes (queue `sandboxes`: short upkeep, run by beat)."""

from __future__ import annotations

from celery import shared_task

from webapp.episodes.services import task_stats_refresh


@shared_task(name="webapp.episodes.tasks.task_stats_rollup")
def task_stats_rollup() -> int:
    """Refresh tasks' difficulty statistics from their episodes; returns how many changed."""
    return task_stats_refresh()
