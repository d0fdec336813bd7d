"""Celery tasks for the catalog (queue `sandboxes`, run by beat)."""

from __future__ import annotations

from celery import shared_task

from webapp.catalog.services import task_stats_refresh


@shared_task(name="webapp.catalog.tasks.task_stats_rollup")
def task_stats_rollup() -> int:
    """Refresh tasks' difficulty statistics; returns how many changed."""
    return task_stats_refresh()
