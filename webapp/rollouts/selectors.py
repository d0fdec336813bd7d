"""Reads for rollout batches: progress, success per task, what waiting episodes wait for, episodic
memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Avg, Count, Q, QuerySet
from django.utils import timezone

from agent_core.memory import EpisodeSummary
from webapp.catalog.models import Task
from webapp.catalog.selectors import task_game
from webapp.common.queue import queue_depths
from webapp.episodes.models import Episode
from webapp.rollouts.models import EpisodeWait, RolloutBatch

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


# --- what waiting episodes wait for ----------------------------------------------------------------

ROLLOUT_QUEUE = "rollouts"
IDLE_HINT_S = 60  # queued this long while no episode runs at all: say that no worker may be serving it


@dataclass(frozen=True)
class Wait:
    """What one episode waits for: `kind` (turn, worker, sandbox, policy) and the words for it."""

    kind: str
    text: str


def _ago(since: datetime | None, now: datetime) -> str:
    seconds = max(0, int((now - since).total_seconds())) if since else 0
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _wait_kind(status: str, sandbox_id: int | None, queued_at: datetime | None, noted: str | None) -> str:
    """What an active episode waits for ("" when it waits for nothing: it runs on its sandbox)."""
    if noted == EpisodeWait.Kind.POLICY:
        return "policy"
    if status == Episode.Status.RUNNING:
        return "" if sandbox_id else "sandbox"
    if noted == EpisodeWait.Kind.SANDBOX:
        return "sandbox"
    return "turn" if queued_at is None else "worker"


def episode_waits(*, batch: RolloutBatch, episodes: Sequence[Episode]) -> dict[int, Wait]:
    """For each of `episodes` that waits (pending, or running without its sandbox yet): what for. Its
    turn (the batch keeps `concurrency` in flight), a free rollout worker (queued; with how busy they
    are), a sandbox of its profile (given back to the queue with the host's reason, or leasing one now)
    or a policy server; the worker's notes (`rollouts.waits`) say the last two."""
    now = timezone.now()
    active = [e for e in episodes if e.status in Episode.ACTIVE]
    notes = {w.episode_id: w for w in EpisodeWait.objects.filter(episode__in=[e.pk for e in active])}
    load: tuple[int, str] | None = None
    out: dict[int, Wait] = {}
    for e in active:
        note = notes.get(e.pk)
        kind = _wait_kind(e.status, e.sandbox_id, e.queued_at, note.kind if note else None)
        profile = e.task.env_profile
        if kind == "policy" and note is not None:
            text = f"a policy server ({_ago(note.since, now)}): {note.detail}"
        elif kind == "sandbox" and e.status == Episode.Status.RUNNING:
            text = (
                f"a '{profile}' sandbox: leasing one (it waits up to {settings.ROLLOUT_LEASE_WAIT_SECONDS} s)"
            )
        elif kind == "sandbox" and note is not None:
            text = f"a '{profile}' sandbox ({_ago(note.since, now)}): {note.detail}; it asks again shortly"
        elif kind == "turn":
            text = f"its turn: the batch runs {batch.concurrency} at once"
        elif kind == "worker":
            load = load or _rollout_workers_load()
            text = f"a free rollout worker (queued {_ago(e.queued_at, now)} ago; {load[1]})"
            if load[0] == 0 and e.queued_at and (now - e.queued_at).total_seconds() > IDLE_HINT_S:
                text += (
                    f"; no episode runs anywhere: is a worker serving the '{ROLLOUT_QUEUE}' queue running?"
                )
        else:
            continue
        out[e.pk] = Wait(kind, text)
    return out


def _rollout_workers_load() -> tuple[int, str]:
    """(episodes running on the rollout workers, that and the queue's depth in words)."""
    running = Episode.objects.filter(status=Episode.Status.RUNNING, batch__isnull=False).count()
    depth = queue_depths(queues=[ROLLOUT_QUEUE])[ROLLOUT_QUEUE]
    queued = "the queue cannot be read" if depth is None else f"{depth} queued on '{ROLLOUT_QUEUE}'"
    return running, f"{running} episode{'s' if running != 1 else ''} running on the rollout workers, {queued}"


WAIT_WORDS = {
    "turn": "their turn",
    "worker": "a free rollout worker",
    "sandbox": "a sandbox",
    "policy": "a policy server",
}


def batch_waiting(*, batch: RolloutBatch) -> list[tuple[str, int]]:
    """How many of the batch's episodes wait for what, over all of them (not only those on the page):
    [(what, count)] for the kinds that have any, in the order a person reads them."""
    rows = Episode.objects.filter(batch=batch, status__in=Episode.ACTIVE).values_list(
        "status", "sandbox_id", "queued_at", "rollout_wait__kind"
    )
    counts = dict.fromkeys(WAIT_WORDS, 0)
    for row in rows:
        kind = _wait_kind(*row)
        if kind:
            counts[kind] += 1
    return [(WAIT_WORDS[k], n) for k, n in counts.items() if n]


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
