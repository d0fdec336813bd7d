"""Snapshots of environment health, kept for the dashboard's charts over time."""

from __future__ import annotations

from django.db import models


class HealthSample(models.Model):
    """One snapshot of environment health (pools, latencies, crash and env_error rates, queue depths).

    A beat task takes one every 30 s and drops those older than 48 h; `data` has the shape of
    `webapp.dashboards.health.health_now()`, so the charts and the current tables read the same figures.
    """

    taken_at = models.DateTimeField(db_index=True)
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["-taken_at"]
        # The Prometheus endpoint: a capability of its own, so a scraper's token can hold only it.
        permissions = [("view_metrics", "Can scrape the Prometheus metrics endpoint")]

    def __str__(self) -> str:
        return f"health sample at {self.taken_at:%Y-%m-%d %H:%M:%S}"
