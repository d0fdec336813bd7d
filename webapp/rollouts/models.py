"""Rollout batches: N episodes per task over a suite, with one policy version."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class RolloutBatch(models.Model):
    """A researcher's request: run `policy` on published tasks of `suite` (all, or a chosen few), once
    per seed (0 … N-1, or the seeds asked for)."""

    class Status(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        CANCELLED = "cancelled"

    name = models.CharField(max_length=200)
    suite = models.ForeignKey("catalog.TaskSuite", on_delete=models.PROTECT, related_name="rollout_batches")
    policy_version = models.ForeignKey(
        "policies.PolicyVersion", on_delete=models.PROTECT, related_name="rollout_batches"
    )
    episodes_per_task = models.PositiveIntegerField(default=1)
    seeds = models.JSONField(
        default=list, blank=True, help_text="The seeds each task runs with, one episode per seed"
    )
    concurrency = models.PositiveIntegerField(default=4, help_text="Episodes in flight at once")
    max_attempts = models.PositiveSmallIntegerField(
        default=3, help_text="An episode that hits an env_error is re-run up to this many times in all"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    config = models.JSONField(default=dict, blank=True, help_text="Agent settings (history images, …)")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="rollout_batches"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(episodes_per_task__gte=1), name="batch_episodes_per_task_pos"),
            models.CheckConstraint(condition=Q(concurrency__gte=1), name="batch_concurrency_pos"),
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="batch_max_attempts_pos"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def seeds_label(self) -> str:
        """The seeds in short: runs of consecutive seeds as ranges ("0–9, 20")."""
        runs: list[list[int]] = []
        for seed in self.seeds or []:
            if runs and seed == runs[-1][-1] + 1:
                runs[-1].append(seed)
            else:
                runs.append([seed])
        return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


class EpisodeWait(models.Model):
    """What a rollout episode waits for where its own row cannot say: a sandbox (it was given back to the
    queue because none was free) or a policy server (none serves its version yet). Its turn in the batch
    and a free worker are read off the episode itself (`rollouts.selectors.episode_waits`). The row is
    dropped once the episode has its sandbox."""

    class Kind(models.TextChoices):
        SANDBOX = "sandbox"
        POLICY = "policy"

    episode = models.OneToOneField(
        "episodes.Episode", on_delete=models.CASCADE, primary_key=True, related_name="rollout_wait"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    detail = models.TextField(blank=True, help_text="Why, in the words of whatever refused (the host's)")
    since = models.DateTimeField(help_text="When this wait began")

    def __str__(self) -> str:
        return f"episode {self.episode_id} waits for a {self.kind}"
