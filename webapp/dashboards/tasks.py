"""Celery tasks for the dashboards (queue `sandboxes`: light, and never stuck behind long episodes)."""

from __future__ import annotations

from celery import shared_task

from webapp.dashboards.services import health_sample_take, health_samples_prune


@shared_task(name="webapp.dashboards.tasks.health_sample", ignore_result=True)
def health_sample() -> int:
    """Take one environment-health sample and drop the expired ones; returns the new sample's id."""
    sample = health_sample_take()
    health_samples_prune()
    return sample.pk
