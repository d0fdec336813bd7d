"""Reads of training runs and policy versions."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from webapp.training.models import MetricPoint, PolicyVersion, TrainingRun


def training_runs_list() -> QuerySet[TrainingRun]:
    """Runs newest first, with their checkpoint counts."""
    return (
        TrainingRun.objects.select_related("dataset_version__dataset", "created_by")
        .annotate(n_checkpoints=Count("checkpoints"))
        .order_by("-created_at")
    )


def metric_series(*, run: TrainingRun, name: str) -> list[tuple[int, float]]:
    """A run's metric as (step, value) points in step order."""
    return list(MetricPoint.objects.filter(run=run, name=name).order_by("step").values_list("step", "value"))


def policy_versions_active() -> QuerySet[PolicyVersion]:
    """Policies rollouts may use, newest first."""
    return PolicyVersion.objects.filter(is_active=True).order_by("-created_at")
