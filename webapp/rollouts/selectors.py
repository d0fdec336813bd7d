"""Reads for rollout batches: progress, success per task, episodic memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Avg, Count, Q, QuerySet

from agent_core.memory import EpisodeSummary
from webapp.catalog.models import Task
from webapp.catalog.selectors import task_game
from webapp.episodes.models import Episode
from webapp.rollouts.models import RolloutBatch

MEMORY_POOL = 50


def batches_for(*, user: AbstractBaseUser) -> QuerySet[RolloutBatch]:
    """The batches `user` may see (researchers and admins see all; others see none)."""
    if not user.has_perm("episodes.run_rollouts") and not user.has_perm("episodes.view_all_episodes"):
        return RolloutBatch.objects.none()
    return RolloutBatch.objects.select_related("suite", "policy_version", "created_by")


@dataclass(frozen=True)
class BatchProgress:
    total: int
    pending: int
    running: int
    finished: int
    env_errors: int
    successes: int
    mean_reward: float | None

    @property
    def done_fraction(self) -> float:
        return (self.finished / self.total) if self.total else 1.0


def batch_progress(*, batch: RolloutBatch) -> BatchProgress:
    """Counts over the batch's planned episodes (a re-run replaces its env_error attempt)."""
    episodes = Episode.objects.filter(batch=batch)
    agg = episodes.aggregate(
        pending=Count("pk", filter=Q(status=Episode.Status.PENDING)),
        running=Count("pk", filter=Q(status=Episode.Status.RUNNING)),
        finished=Count("pk", filter=Q(status=Episode.Status.FINISHED)),
        env_errors=Count("pk", filter=Q(env_error=True)),
        env_errors_final=Count("pk", filter=Q(env_error=True, retried_by__isnull=True)),
        successes=Count("pk", filter=Q(status=Episode.Status.FINISHED, reward__gte=1.0)),
        mean=Avg("reward", filter=Q(status=Episode.Status.FINISHED)),
    )
    total = episodes.filter(retry_of__isnull=True).count()
    return BatchProgress(
        total=total,
        pending=agg["pending"],
        running=agg["running"],
        finished=agg["finished"] + agg["env_errors_final"],
        env_errors=agg["env_errors"],
        successes=agg["successes"],
        mean_reward=agg["mean"],
    )


def batch_task_table(*, batch: RolloutBatch) -> list[dict[str, Any]]:
    """Per task: episodes finished, successes, mean reward, env errors, mean steps; for a game, its
    mean raw score (`raw_score`, else None)."""
    rows = (
        Episode.objects.filter(batch=batch)
        .values("task_id", "task__slug", "task__title")
        .annotate(
            finished=Count("pk", filter=Q(status=Episode.Status.FINISHED)),
            successes=Count("pk", filter=Q(status=Episode.Status.FINISHED, reward__gte=1.0)),
            mean_reward=Avg("reward", filter=Q(status=Episode.Status.FINISHED)),
            env_errors=Count("pk", filter=Q(env_error=True)),
            running=Count("pk", filter=Q(status=Episode.Status.RUNNING)),
            mean_steps=Avg("num_steps", filter=Q(status=Episode.Status.FINISHED)),
        )
        .order_by("task__slug")
    )
    out = [{**r, "success_rate": (r["successes"] / r["finished"]) if r["finished"] else None} for r in rows]
    raw = _game_raw_scores(batch, [r["task_id"] for r in out])
    return [{**r, "raw_score": raw.get(r["task_id"])} for r in out]


def _game_raw_scores(batch: RolloutBatch, task_ids: list[int]) -> dict[int, float]:
    """Per game task of the batch (games suite): the mean raw game score of its finished episodes, beside
    the normalised reward (the checker's game_score check keeps the raw score as its artifact)."""
    games = [t.pk for t in Task.objects.filter(pk__in=task_ids).only("pk", "spec") if task_game(task=t)]
    scores: dict[int, list[float]] = {}
    finished = Episode.objects.filter(batch=batch, task_id__in=games, status=Episode.Status.FINISHED)
    for task_id, details in finished.values_list("task_id", "check_details"):
        for check in details if isinstance(details, list) else ():
            raw = check.get("artifact") if isinstance(check, dict) else None
            number = isinstance(raw, int | float) and not isinstance(raw, bool)
            if number and check.get("metric") == "game_score":
                scores.setdefault(task_id, []).append(float(raw))
    return {task_id: sum(v) / len(v) for task_id, v in scores.items()}


def episode_memory(
    *, family: str, exclude: int | None = None, limit: int = MEMORY_POOL
) -> list[EpisodeSummary]:
    """Summaries of the latest finished episodes of a task family (episodic memory)."""
    if not family:
        return []
    rows = (
        Episode.objects.filter(task__family=family, status=Episode.Status.FINISHED)
        .exclude(summary="")
        .exclude(pk=exclude)
        .select_related("task")
        .order_by("-finished_at")[:limit]
    )
    return [
        EpisodeSummary(
            task_id=e.task.slug,
            family=family,
            instruction=e.instruction,
            reward=e.reward,
            summary=e.summary,
        )
        for e in rows
    ]
