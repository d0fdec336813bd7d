"""Training runs, their checkpoints and metrics, and merges of policies (PolicyVersion: webapp.policies)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models

from webapp.common.jobs import Job, ended_has_finished_at


class TrainingRun(Job):
    """One SFT / PPO / GRPO run launched by an admin and executed on the `training` queue. A job
    (webapp.common.jobs): a worker that goes silent loses it to the reaper, which queues it again to
    resume from its last checkpoint (`attempt` counts them); cancelled is a stop a person asked for,
    at a checkpoint the run can be resumed from."""

    class Algorithm(models.TextChoices):
        SFT = "sft", "Supervised fine-tuning"
        PPO = "ppo", "Multi-turn PPO"
        GRPO = "grpo", "Step-level GRPO"

    name = models.CharField(max_length=200)
    algorithm = models.CharField(max_length=8, choices=Algorithm.choices)
    config = models.JSONField(default=dict, blank=True)
    dataset_version = models.ForeignKey(
        "datasets.DatasetVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="training_runs",
    )
    base_policy = models.ForeignKey(
        "policies.PolicyVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="training_runs",
    )
    suite = models.ForeignKey(
        "catalog.TaskSuite",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="training_runs",
        help_text="Where live rollouts of an RL run come from",
    )
    resumed_from = models.ForeignKey(
        "training.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="resumed_runs"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="training_runs"
    )
    celery_task_id = models.CharField(max_length=64, blank=True)
    log_file = models.CharField(max_length=300, blank=True)
    out_dir = models.CharField(
        max_length=300,
        blank=True,
        help_text="The run's directory (relative to the var dir): checkpoints, log",
    )
    step = models.PositiveIntegerField(default=0, help_text="Last optimizer step reached")
    stop_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("launch_training", "Can launch and stop training runs")]
        indexes = [models.Index(fields=["status", "-created_at"], name="trainingrun_status_idx")]
        constraints = [
            ended_has_finished_at("trainingrun_ended_has_finished_at"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.algorithm})"

    @property
    def is_rl(self) -> bool:
        return self.algorithm in (self.Algorithm.PPO, self.Algorithm.GRPO)

    def path(self, relative: str) -> Path:
        """A path stored relative to the var dir (out_dir, log_file) as an absolute one."""
        path = Path(relative)
        return path if path.is_absolute() else Path(settings.VAR_DIR) / path


class Checkpoint(models.Model):
    """Weights saved by a run at a training step."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    path = models.CharField(max_length=500)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="checkpoint_unique_step")]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.step}"


class MetricPoint(models.Model):
    """One point of a named metric series: per training run, or global (`run` empty) for dashboards."""

    run = models.ForeignKey(
        TrainingRun, null=True, blank=True, on_delete=models.CASCADE, related_name="metrics"
    )
    name = models.CharField(max_length=100)
    step = models.PositiveIntegerField()
    value = models.FloatField()
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "name", "step"]
        indexes = [models.Index(fields=["run", "name", "step"], name="metric_series_idx")]

    def __str__(self) -> str:
        return f"{self.name}[{self.step}]={self.value}"


class PolicyMerge(Job):
    """Parameter interpolation of local policies from the same base into a new policy, done on a worker.

    `sources` is [{"policy": id, "name": str, "weight": float}] (weights sum to 1); on success `policy` is
    the new local policy version, its model directory under the var dir."""

    name = models.SlugField(max_length=100, help_text="The name of the policy it makes")
    sources = models.JSONField()
    policy = models.OneToOneField(
        "policies.PolicyVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="merge"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [ended_has_finished_at("policymerge_ended_has_finished_at")]

    def __str__(self) -> str:
        return f"merge {self.pk} -> {self.name} ({self.status})"


class TrainingWorker(models.Model):
    """A Celery worker on the `training` queue and the devices it trains on, as it reported them when
    it started (webapp.training.workers); `reported_at` is renewed while it lives. The launch form plans
    a run against the largest device of the workers heard from lately."""

    name = models.CharField(max_length=200, unique=True, help_text="Its Celery hostname")
    devices = models.JSONField(
        default=list, blank=True, help_text='[{"kind": "cuda" | "cpu", "name": ..., "memory": bytes}]'
    )
    error = models.TextField(blank=True, help_text="Why its devices could not be measured")
    started_at = models.DateTimeField()
    reported_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
