"""Writes for the dashboards: health samples taken over time and pruned after a while."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from webapp.dashboards.health import health_now
from webapp.dashboards.models import HealthSample

SAMPLE_KEEP = timedelta(hours=48)


def health_sample_take(*, now: datetime | None = None) -> HealthSample:
    """Store the current environment health as one sample."""
    now = now or timezone.now()
    return HealthSample.objects.create(taken_at=now, data=health_now(now=now))


def health_samples_prune(*, now: datetime | None = None, keep: timedelta = SAMPLE_KEEP) -> int:
    """Delete samples older than `keep`; returns how many."""
    now = now or timezone.now()
    deleted, _ = HealthSample.objects.filter(taken_at__lt=now - keep).delete()
    return deleted
