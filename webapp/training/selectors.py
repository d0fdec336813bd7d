"""Reads of training runs and policy versions."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from webapp.training.models import Checkpoint, MetricPoint, PolicyVersion, TrainingRun


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


def policy_versions_list(*, active: bool | None = None) -> QuerySet[PolicyVersion]:
    """Every policy (or only active / inactive ones), newest first."""
    qs = PolicyVersion.objects.select_related("checkpoint")
    if active is not None:
        qs = qs.filter(is_active=active)
    return qs.order_by("-created_at", "-pk")


def checkpoints_of(*, run: TrainingRun) -> QuerySet[Checkpoint]:
    """A run's checkpoints in step order, with the policy each became (if any)."""
    return run.checkpoints.select_related("policy_version").order_by("step")


def metric_names(*, run: TrainingRun) -> list[str]:
    """The names of a run's metric series, sorted."""
    names = MetricPoint.objects.filter(run=run).values_list("name", flat=True)
    return list(names.distinct().order_by("name"))
