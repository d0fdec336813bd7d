"""Rollouts: batches of agent episodes, each run by one Celery task, re-run when the env fails.

Scheduling is rollout-wise: a batch keeps `concurrency` episodes in flight, and every episode that
ends enqueues the next one at once, so a slow episode never holds the others back.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.utils import timezone

from agent_core.actions import action_to_dict
from agent_core.agent import AgentConfig, run_episode
from agent_core.data.trajectory import EpisodeOutcome, StepRecord
from agent_core.env import EnvError
from agent_core.memory import summarize_episode
from agent_core.policies.base import PolicyError
from agent_core.tasks.runner import prepare
from agent_core.tasks.spec import TaskSpecError, parse_task
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.base import SandboxError
from webapp.catalog.availability import tasks_unavailable
from webapp.catalog.models import Task, TaskSuite
from webapp.common.queue import EPISODE_ROLLOUT, enqueue
from webapp.episodes.models import Episode, Source
from webapp.episodes.services import (
    EpisodeStateError,
    episode_finish,
    prepared_to_json,
    screen_of,
    step_record,
)
from webapp.policies.models import PolicyVersion
from webapp.policies.runtime import PolicyUnavailable
from webapp.rollouts.models import EpisodeWait, RolloutBatch
from webapp.rollouts.policy_pick import rollout_policy
from webapp.rollouts.selectors import episode_memory
from webapp.rollouts.waits import episode_wait_end, episode_wait_note
from webapp.sandboxes.control import control_agent_gate, control_assign, control_clear
from webapp.sandboxes.models import ControlToken
from webapp.sandboxes.services import SandboxUnavailable, lease_end, sandbox_lease

log = logging.getLogger(__name__)
LEASE_TTL_S = 120.0
REQUEUE_DELAY_S = 3.0
AGENT_CONFIG_FIELDS = ("history_images", "max_consecutive_invalid", "episodic_k", "max_steps", "max_seconds")


class RolloutError(ValueError):
    """A rollout batch cannot be launched as asked; the message says why, `field` what was at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field


MAX_SEEDS = 1000
MAX_SEED = 2**63 - 1  # Episode.seed is a 64-bit integer


# --- batches -----------------------------------------------------------------------------------


def batch_create(
    *,
    suite: TaskSuite,
    policy_version: PolicyVersion,
    concurrency: int,
    created_by: AbstractBaseUser,
    episodes_per_task: int | None = None,
    seeds: Sequence[int] | None = None,
    name: str = "",
    tasks: Iterable[Task] | None = None,
    config: dict[str, Any] | None = None,
    follow_newest: bool = False,
) -> RolloutBatch:
    """A batch over `tasks` (default: every published task of `suite`), one episode per task and seed,
    started at once. The seeds are `seeds`, or 0 … `episodes_per_task` - 1. With `follow_newest`, each
    episode runs the newest ready version of the policy's line when it starts (rollouts.policy_pick).
    A task whose profile no sandbox host serves now is refused (catalog.availability)."""
    if seeds is None:
        if episodes_per_task is None or not 1 <= episodes_per_task <= MAX_SEEDS:
            raise RolloutError(
                f"episodes per task must be between 1 and {MAX_SEEDS}", field="episodes_per_task"
            )
        seeds = range(episodes_per_task)
    elif episodes_per_task is not None and episodes_per_task != len(seeds):
        raise RolloutError(f"{len(seeds)} seeds but {episodes_per_task} episodes per task", field="seeds")
    seeds = seeds_checked(seeds)
    if not 1 <= concurrency <= 1000:
        raise RolloutError("concurrency must be between 1 and 1000", field="concurrency")
    if not policy_version.is_active:
        raise RolloutError(f"policy {policy_version.name} is not active", field="policy")
    if policy_version.backend == PolicyVersion.Backend.HUMAN:
        raise RolloutError(
            "a human policy cannot run unattended rollouts; use a demonstration instead", field="policy"
        )
    unknown = sorted(set(config or {}) - set(AGENT_CONFIG_FIELDS))
    if unknown:
        raise RolloutError(
            f"unknown agent setting(s) {', '.join(unknown)}; valid: {', '.join(AGENT_CONFIG_FIELDS)}",
            field="config",
        )
    chosen = (
        list(tasks) if tasks is not None else list(suite.tasks.filter(is_published=True).order_by("slug"))
    )
    if not chosen:
        raise RolloutError(f"suite {suite.slug} has no published tasks", field="suite")
    if outside := [t.slug for t in chosen if not t.suites.filter(pk=suite.pk).exists()]:
        raise RolloutError(f"not in suite {suite.slug}: {', '.join(outside[:5])}", field="tasks")
    if unpublished := [t.slug for t in chosen if not t.is_published]:
        raise RolloutError(
            f"not published (their oracle check has not passed): {', '.join(unpublished[:5])}", field="tasks"
        )
    if unavailable := tasks_unavailable(chosen):  # no sandbox would come: refused, not left waiting
        raise RolloutError(unavailable, field="tasks" if tasks is not None else "suite")
    with transaction.atomic():
        batch = RolloutBatch.objects.create(
            name=name or f"{policy_version.name} on {suite.slug}",
            suite=suite,
            policy_version=policy_version,
            episodes_per_task=len(seeds),
            seeds=seeds,
            concurrency=concurrency,
            config={**(config or {}), **({"follow_newest": True} if follow_newest else {})},
            created_by=created_by,
        )
        Episode.objects.bulk_create(
            Episode(
                task=task,
                source=Source.AGENT,
                policy_version=policy_version,
                seed=seed,
                batch=batch,
            )
            for task in chosen
            for seed in seeds
        )
        transaction.on_commit(lambda: batch_advance(batch_id=batch.pk))
    log.info("batch %s: %d tasks x %d seeds", batch.pk, len(chosen), len(seeds))
    return batch


def seeds_checked(seeds: Iterable[int]) -> list[int]:
    """The seeds as a list; RolloutError (field "seeds") for a bad one, a repeat, none or too many."""
    checked: list[int] = []
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise RolloutError(f"seed {seed!r} is not a whole number from 0 to {MAX_SEED}", field="seeds")
        if seed in checked:
            raise RolloutError(f"seed {seed} is given twice", field="seeds")
        checked.append(seed)
    if not 1 <= len(checked) <= MAX_SEEDS:
        raise RolloutError(f"give 1 to {MAX_SEEDS} seeds", field="seeds")
    return checked


def batch_advance(*, batch_id: int) -> int:
    """Enqueue pending episodes of the batch up to its concurrency; finish it when nothing is left."""
    with transaction.atomic():
        batch = RolloutBatch.objects.select_for_update(no_key=True).get(pk=batch_id)
        if batch.status != RolloutBatch.Status.RUNNING:
            return 0
        episodes = Episode.objects.filter(batch=batch)
        in_flight = (
            episodes.filter(status=Episode.Status.RUNNING).count()
            + episodes.filter(status=Episode.Status.PENDING, queued_at__isnull=False).count()
        )
        room = batch.concurrency - in_flight
        ids = (
            list(
                episodes.filter(status=Episode.Status.PENDING, queued_at__isnull=True)
                .order_by("-attempt", "pk")  # re-runs first: finish started work before new work
                .values_list("pk", flat=True)[:room]
            )
            if room > 0
            else []
        )
        if ids:
            Episode.objects.filter(pk__in=ids).update(queued_at=timezone.now())
            for episode_id in ids:
                transaction.on_commit(lambda i=episode_id: enqueue(EPISODE_ROLLOUT, i))  # type: ignore[misc]
        elif in_flight == 0 and not episodes.filter(status=Episode.Status.PENDING).exists():
            RolloutBatch.objects.filter(pk=batch.pk).update(
                status=RolloutBatch.Status.FINISHED, finished_at=timezone.now()
            )
            log.info("batch %s finished", batch.pk)
    return len(ids)


def batch_cancel(*, batch: RolloutBatch) -> int:
    """Stop a batch: its pending episodes are dropped; running ones finish their current episode."""
    with transaction.atomic():
        updated = RolloutBatch.objects.filter(pk=batch.pk, status=RolloutBatch.Status.RUNNING).update(
            status=RolloutBatch.Status.CANCELLED, finished_at=timezone.now()
        )
        dropped, _ = Episode.objects.filter(batch=batch, status=Episode.Status.PENDING).delete()
    return dropped if updated else 0


# --- one episode -------------------------------------------------------------------------------


def episode_run(*, episode_id: int, worker: str = "") -> Episode | None:
    """Run one agent episode end to end; None when another delivery already took it (idempotent)."""
    if Episode.claim(episode_id, worker=worker) is None:
        log.info("episode %s: not pending, another delivery has it", episode_id)
        return None
    episode = Episode.objects.select_related("task", "policy_version", "batch").get(pk=episode_id)
    try:
        return _run_claimed(episode)
    finally:
        if episode.batch_id is not None:
            batch_advance(batch_id=episode.batch_id)


def _run_claimed(episode: Episode) -> Episode:
    task = episode.task
    try:
        spec = parse_task(task.spec)
    except TaskSpecError as exc:
        return _env_failure(episode, f"the task's spec is invalid: {exc}", retry=False)
    if episode.policy_version is None:
        return _env_failure(episode, "the episode has no policy version", retry=False)
    try:
        policy, observation = rollout_policy(episode)
    except PolicyUnavailable as exc:  # no server up (yet): infrastructure, re-run
        return _env_failure(episode, f"policy: {exc}")
    except PolicyError as exc:
        return _env_failure(episode, f"policy: {exc}", retry=False)
    lease = None
    beat = _Heartbeat(episode.pk, limit_s=spec.limits.max_seconds + 300)
    try:
        lease, leased = sandbox_lease(
            profile=spec.profile,
            holder=f"episode:{episode.pk}",
            ttl_s=LEASE_TTL_S,
            wait_s=settings.ROLLOUT_LEASE_WAIT_SECONDS,
        )
        Episode.objects.filter(pk=episode.pk).update(sandbox=lease.sandbox)
        episode_wait_end(episode_id=episode.pk)
        control_assign(sandbox=lease.sandbox, episode=episode, holder=ControlToken.Holder.AGENT)
        beat.renew = lambda: leased.renew(LEASE_TTL_S)
        beat.start()
        env = SandboxEnv(leased, platform=spec.platform, a11y=observation)
        prepared = prepare(spec, env, seed=episode.seed)
        # Kept so the prompt can be rebuilt later (training): the instruction a seed drew, its params.
        Episode.objects.filter(pk=episode.pk).update(prepared=prepared_to_json(prepared))
        memory = episode_memory(family=task.family or spec.family, exclude=episode.pk)
        config = _agent_config(episode, spec.limits.max_steps)
        # A person watching may take control: the agent then waits before its next turn.
        gate = control_agent_gate(sandbox_id=lease.sandbox_id)
        outcome = run_episode(
            env, policy, prepared, config=config, memory=memory, on_step=_sink(episode), gate=gate
        )
    except SandboxUnavailable as exc:
        # Every sandbox is busy: not a failure of anything. Give the episode back and try again soon.
        _requeue(episode, reason=str(exc))
        return episode
    except EpisodeStateError as exc:
        # Reaped while it ran (the worker looked dead): the replacement owns the task now.
        log.warning("episode %s was ended elsewhere: %s", episode.pk, exc)
        episode.refresh_from_db()
        return episode
    except (EnvError, SandboxError, PolicyError) as exc:
        kind = "policy" if isinstance(exc, PolicyError) else "environment"
        return _env_failure(episode, f"{kind}: {exc}", lease=lease)
    except Exception as exc:
        # A bug here must not leave the episode running until the reaper: end it, say so, no re-run.
        log.exception("episode %s: internal error", episode.pk)
        return _env_failure(episode, f"internal error (not the agent's): {exc!r}", lease=lease, retry=False)
    finally:
        beat.stop()
        policy.close()
        if lease is not None:
            control_clear(sandbox_id=lease.sandbox_id)
    if lease is not None:
        with contextlib.suppress(SandboxError):
            lease_end(lease=lease)
    return _finish(episode, prepared.instruction, outcome)


def _requeue(episode: Episode, *, reason: str) -> None:
    if Episode.release(episode.pk, started_at=None, queued_at=timezone.now()):
        log.info("episode %s waits for a sandbox (%s)", episode.pk, reason)
        # The batch page says why it waits; it goes to the back of the rollouts queue, which holds
        # agents' episodes only (catalog checks have a queue of their own: webapp.celery).
        episode_wait_note(episode_id=episode.pk, kind=EpisodeWait.Kind.SANDBOX, detail=reason)
        enqueue(EPISODE_ROLLOUT, episode.pk, countdown=REQUEUE_DELAY_S)


def _finish(episode: Episode, instruction: str, outcome: EpisodeOutcome) -> Episode:
    try:
        return episode_finish(
            episode=episode,
            reward=outcome.reward,
            final_screen=screen_of(outcome.final_observation),
            stop_reason=outcome.stop_reason,
            final_answer=outcome.final_answer[:10000],
            check_details=list(outcome.check.details) if outcome.check else [],
            summary=summarize_episode(instruction, outcome),
        )
    except EpisodeStateError:
        episode.refresh_from_db()
        return episode


def _agent_config(episode: Episode, task_max_steps: int) -> AgentConfig:
    cfg = episode.batch.config if episode.batch is not None else {}
    config = AgentConfig(**{k: v for k, v in (cfg or {}).items() if k in AGENT_CONFIG_FIELDS})
    if episode.max_steps:
        # The episode's own cap (RL curation shortens episodes per task) within the batch's budget.
        config = replace(config, max_steps=min(config.max_steps or task_max_steps, episode.max_steps))
    return config


def _sink(episode: Episode) -> Callable[[StepRecord], None]:
    def on_step(step: StepRecord) -> None:
        action = (
            {"type": "invalid", "reason": step.invalid_reason[:1000]}
            if step.action is None
            else _action_json(step)
        )
        obs = step.observation
        step_record(
            episode=episode,
            actor="agent",
            action=action,
            action_text=step.action_text,
            thought=step.thought,
            screenshot_png=obs.screenshot,
            screenshot_ext="jpg" if obs.mime == "image/jpeg" else "png",
            a11y_tree=obs.a11y,
            screen_size=(obs.width, obs.height),
            invalid_reason=step.invalid_reason,
            raw_output=step.raw_output,
            token_ids=list(step.token_ids) if step.token_ids is not None else None,
            logprobs=list(step.logprobs) if step.logprobs is not None else None,
            info=dict(step.info),
            observed_at=_dt(step.observed_at),
            acted_at=_dt(step.acted_at) if step.acted_at else None,
            latency_ms=step.latency_ms,
        )  # moves the episode's heartbeat too, in the same commit

    return on_step


def _action_json(step: StepRecord) -> dict[str, Any]:
    assert step.action is not None
    return action_to_dict(step.action)


def _dt(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC) if epoch else timezone.now()


def _env_failure(episode: Episode, message: str, *, lease: Any = None, retry: bool = True) -> Episode:
    log.warning("episode %s: env_error: %s", episode.pk, message)
    if lease is not None:
        with contextlib.suppress(SandboxError, EnvError):
            lease_end(lease=lease, recycle=True)
    try:
        episode = episode_finish(episode=episode, reward=None, env_error=True, error=message)
    except EpisodeStateError:
        episode.refresh_from_db()
        return episode
    if retry:
        episode_retry(episode=episode)
    return episode


def episode_retry(*, episode: Episode) -> Episode | None:
    """A fresh pending episode replacing an env_error one, while the batch's attempts allow."""
    batch = episode.batch
    if batch is None or episode.attempt >= batch.max_attempts or batch.status != RolloutBatch.Status.RUNNING:
        return None
    try:
        with transaction.atomic():
            return Episode.objects.create(
                task_id=episode.task_id,
                source=episode.source,
                # The batch's current policy: a training run may have published a newer one meanwhile.
                policy_version_id=batch.policy_version_id,
                seed=episode.seed,
                max_steps=episode.max_steps,
                batch=batch,
                retry_of=episode,
                attempt=episode.attempt + 1,
            )
    except IntegrityError:
        return None  # retried already (the reaper and the worker both noticed)


# --- the reaper --------------------------------------------------------------------------------


def rollouts_reap(*, now: Any = None) -> dict[str, int]:
    """End episodes whose worker went silent (env_error, re-run) and re-enqueue lost queued ones."""
    now = now or timezone.now()
    silent_for = timedelta(seconds=settings.ROLLOUT_STALE_SECONDS)
    reaped = 0
    for episode in Episode.stale(silent_for=silent_for, now=now).filter(source=Source.AGENT):
        # Still silent (a heartbeat between the list and here keeps it running).
        if not Episode.end(
            episode.pk,
            Episode.Status.FAILED,
            error=f"rollout worker {episode.worker or '?'} went silent "
            f"(no heartbeat for {settings.ROLLOUT_STALE_SECONDS} s)",
            silent_since=now - silent_for,
            env_error=True,
            reward=None,
            finished_at=now,
        ):
            continue
        reaped += 1
        episode.refresh_from_db()
        episode_retry(episode=episode)
        if episode.batch_id is not None:
            batch_advance(batch_id=episode.batch_id)
    lost = Episode.objects.filter(
        status=Episode.Status.PENDING,
        queued_at__lt=now - timedelta(seconds=settings.ROLLOUT_REQUEUE_SECONDS),
    )
    requeued = lost.update(queued_at=None)
    for batch_id in RolloutBatch.objects.filter(status=RolloutBatch.Status.RUNNING).values_list(
        "pk", flat=True
    ):
        batch_advance(batch_id=batch_id)
    if reaped or requeued:
        log.warning("rollouts reaper: %d silent episodes re-run, %d lost ones re-queued", reaped, requeued)
    return {"reaped": reaped, "requeued": requeued}


class _Heartbeat:
    """Marks the episode alive (and renews its lease) every few seconds while it runs.

    A thread, because a policy may think for longer than the reaper's patience between steps; it
    gives up after `limit_s` so a hung episode is reaped instead of looking alive forever."""

    def __init__(self, episode_id: int, *, limit_s: float) -> None:
        self.episode_id = episode_id
        self.limit_s = limit_s
        self.renew: Callable[[], object] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{episode_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        t0 = time.monotonic()
        try:
            while not self._stop.wait(settings.ROLLOUT_HEARTBEAT_SECONDS):
                if time.monotonic() - t0 > self.limit_s:
                    log.warning("episode %s ran past its limit; heartbeat stops", self.episode_id)
                    return
                with contextlib.suppress(Exception):  # a missed beat is retried at the next one
                    Episode.beat(self.episode_id)
                if self.renew is not None:
                    with contextlib.suppress(SandboxError, EnvError):
                        self.renew()
        finally:
            close_old_connections()
            connection.close()
