"""Live rollouts for an RL run: the platform's own rollout machinery as a `RolloutSource`.

Rollouts are ordinary agent episodes in one rollout batch of the run (Celery rollout workers run
them on leased sandboxes and persist every step, token ids and logprobs included); the trainer reads
them back from the database. Each policy the trainer publishes becomes a PolicyVersion
(`run-<id>-v<version>`, a local model directory, sampling at the run's temperature and top_p), and every
episode not started yet switches to it: workers pick up the new policy one episode at a time.

Seeds: training rollouts draw seeds from TRAINING_SEED_BASE up (evaluation batches use 0, 1, …), so
a task instance trained on is not one a batch evaluates, as long as evaluations stay below it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import Max, Prefetch
from django.utils import timezone

from agent_core.rl.episodes import RLEpisode
from webapp.catalog.models import Task, TaskSuite
from webapp.episodes.models import Episode, Source, Step
from webapp.policies.models import PolicyVersion
from webapp.policies.selectors import var_stored, version_ready
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.services import batch_advance, batch_cancel
from webapp.training.checkpoint_keep import rollouts_keep, rollouts_release
from webapp.training.data import rl_episode_of
from webapp.training.models import TrainingRun

log = logging.getLogger(__name__)

TRAINING_SEED_BASE = 10_000
"""First seed of training rollouts; evaluation batches draw 0, 1, … (see the module doc)."""
DEFAULT_CONCURRENCY = 2
POLL_INTERVAL_S = 0.3
# An env_error episode is re-run as a new episode right after it ends; wait this long for the re-run
# to appear before taking the failure as final.
RETRY_GRACE_S = 10.0


def batch_name(run: TrainingRun) -> str:
    """The name of the rollout batch a run's rollouts belong to."""
    return f"training run {run.pk}"


def version_name(run: TrainingRun, version: int) -> str:
    """The PolicyVersion name of the policy a run publishes as `version`."""
    return f"run-{run.pk}-v{version}"


def rollout_config(
    base: Mapping[str, Any] | None, run_config: Mapping[str, Any], *, served: bool
) -> dict[str, Any]:
    """A rollout version's policy config: the base policy's, sampling exactly as the trainer scores
    (the run's temperature and top_p, nothing else on top).

    A served version sends top_p in its request body, with vLLM's top_k and repetition penalty off:
    vLLM would otherwise take them from the checkpoint's generation_config. The base's `seed` is
    dropped: every episode gets a fresh policy, and one seed would draw every rollout of a group the
    same."""
    config = {k: v for k, v in (base or {}).items() if k != "seed"}
    config["temperature"] = float(run_config.get("temperature", 1.0))
    config["max_new_tokens"] = int(run_config.get("max_new_tokens", 64))
    top_p = float(run_config.get("top_p", 1.0))
    if served:
        extra = dict(config.get("extra_body") or {})
        config["extra_body"] = {**extra, "top_p": top_p, "top_k": 0, "repetition_penalty": 1.0}
    else:
        config["top_p"] = top_p
    return config


class DBRolloutSource:
    """A `RolloutSource` over the database: requests become episodes, finished ones become RLEpisodes."""

    def __init__(self, run: TrainingRun, config: Mapping[str, Any]) -> None:
        self.run = run
        self.config = dict(config)
        self.history_images = int(self.config.get("history_images", 3))
        self.concurrency = int(
            self.config.get("concurrency")
            or getattr(settings, "TRAINING_ROLLOUT_CONCURRENCY", DEFAULT_CONCURRENCY)
        )
        self.base = run.base_policy
        self.current: PolicyVersion | None = None
        """The newest policy the trainer published."""
        self._ready: PolicyVersion | None = None
        """The newest published policy rollouts can run (a served one: once a server has loaded it)."""
        self._versions: dict[int, int] = {}  # PolicyVersion pk -> the version the trainer published
        # Episode ids asked for and not returned yet -> their request's (task, seed).
        self._outstanding: dict[int, tuple[str, int]] = {}
        self._batch: RolloutBatch | None = None
        self._clock = time.time
        self._window = self._clock()
        self._closed = False
        # Seeds go on after every one an earlier attempt asked for (ran or not).
        last = Episode.objects.filter(batch__name=batch_name(run)).aggregate(m=Max("seed"))["m"]
        self._next_seed = max(TRAINING_SEED_BASE, int(last) + 1 if last is not None else 0)
        # A trainer that died left its batch behind: its rollouts answer requests nobody remembers.
        for stale in RolloutBatch.objects.filter(name=batch_name(run), status=RolloutBatch.Status.RUNNING):
            dropped = batch_cancel(batch=stale)
            log.info(
                "run %s: cancelled rollout batch %s of an earlier attempt (%d queued)",
                run.pk,
                stale.pk,
                dropped,
            )

    # --- what to roll out ----------------------------------------------------------------------

    def suite(self) -> TaskSuite:
        """The suite the run's rollouts draw from (the run's, else the config's `suite` slug)."""
        suite = getattr(self.run, "suite", None)
        slug = str(self.config.get("suite") or "")
        if suite is None and slug:
            suite = TaskSuite.objects.filter(slug=slug).first()
        if suite is None:
            first = self._named_tasks()[:1]
            task = Task.objects.filter(slug__in=first).first()
            suite = task.suites.order_by("slug").first() if task is not None else None
        if suite is None:
            raise ValueError(f"run {self.run.pk}: no suite to roll out on (set the run's suite)")
        return suite

    def _named_tasks(self) -> list[str]:
        return [t.strip() for t in str(self.config.get("tasks") or "").split(",") if t.strip()]

    def tasks(self) -> list[str]:
        """The config's `tasks`, else the published tasks of the run's suite (by slug)."""
        named = self._named_tasks()
        if named:
            return named
        return list(
            self.suite().tasks.filter(is_published=True).order_by("slug").values_list("slug", flat=True)
        )

    # --- policies ------------------------------------------------------------------------------

    def publish(self, version: int, model_dir: Path) -> None:
        """A PolicyVersion for the checkpoint; every episode not started yet switches to it (a served
        one: once a policy server has hot-loaded it; rollouts go on with the previous one meanwhile)."""
        base = self.base
        served = base is not None and base.is_platform_served()
        config = rollout_config(base.config if base is not None else None, self.config, served=served)
        stored = var_stored(model_dir)
        lineage = {
            "training_run": self.run.pk,
            "version": version,
            "base_policy": base.name if base is not None else "",
            "purpose": "rollouts",
            "line": f"training-run-{self.run.pk}",
        }
        name = version_name(self.run, version)
        defaults: dict[str, Any] = {
            "backend": PolicyVersion.Backend.LOCAL,
            "checkpoint": None,
            "model_name": stored,
            "config": config,
            "is_active": True,
            "lineage": lineage,
        }
        if served:  # the adapter, hot-loaded by the servers of the base's weights
            assert base is not None
            base_id = str((base.serving or {}).get("base") or base.served_model_id())
            defaults.update(
                backend=PolicyVersion.Backend.OPENAI,
                endpoint_url="",
                model_name=name,
                serving={"base": base_id, "kind": "lora", "path": stored},
            )
        # Kept from keep_checkpoints pruning while rollouts may load it (checkpoint_keep), marked before
        # any rollout can see it; older versions no rollout can load any more are released below.
        rollouts_keep(path=Path(model_dir), policy_name=name)
        policy, _ = PolicyVersion.objects.update_or_create(name=name, defaults=defaults)
        with transaction.atomic():
            # Rollout versions are the run's own: only the newest stays on offer (and on the servers;
            # the one rollouts still use until the new one is ready stays too).
            keep = [policy.pk] + ([self._ready.pk] if served and self._ready is not None else [])
            PolicyVersion.objects.filter(name__startswith=f"run-{self.run.pk}-v").exclude(pk__in=keep).update(
                is_active=False
            )
        self._versions[policy.pk] = version
        self.current = policy
        switched = self._switch_if_ready()
        rollouts_release(versions=PolicyVersion.objects.filter(name__startswith=f"run-{self.run.pk}-v"))
        log.info(
            "run %s: published v%d as %s (%s)%s",
            self.run.pk,
            version,
            policy.name,
            stored,
            f"; {switched} waiting episodes switched"
            if switched >= 0
            else "; rollouts switch once it is served",
        )

    def _switch_if_ready(self) -> int:
        """Move the batch and its waiting episodes to the newest published policy once rollouts can run
        it; the number switched, or -1 while it is not ready (a policy server has not loaded it yet)."""
        policy = self.current
        if policy is None or (self._ready is not None and self._ready.pk == policy.pk):
            return 0
        if not version_ready(policy):
            return -1
        previous, self._ready = self._ready, policy
        switched = 0
        with transaction.atomic():
            if self._batch is not None:
                RolloutBatch.objects.filter(pk=self._batch.pk).update(policy_version=policy)
                switched = Episode.objects.filter(batch=self._batch, status=Episode.Status.PENDING).update(
                    policy_version=policy
                )
            if previous is not None and previous.is_platform_served():
                PolicyVersion.objects.filter(pk=previous.pk).update(is_active=False)
        return switched

    def _policy(self) -> PolicyVersion:
        """What new rollouts run: the newest published policy that is ready (see _switch_if_ready)."""
        self._switch_if_ready()
        if self._ready is not None:
            return self._ready
        if self.base is None:
            raise ValueError(f"run {self.run.pk}: nothing published and no base policy to roll out")
        self._versions.setdefault(self.base.pk, 0)
        return self.base

    def _version_of(self, policy_version_id: int | None) -> int:
        if policy_version_id in self._versions:
            return self._versions[policy_version_id]
        lineage = (
            PolicyVersion.objects.filter(pk=policy_version_id).values_list("lineage", flat=True).first() or {}
        )
        return int(lineage.get("version", 0)) if isinstance(lineage, dict) else 0

    # --- requests ------------------------------------------------------------------------------

    def _open_batch(self) -> RolloutBatch:
        """The run's batch, locked and running: reopened when it finished between requests, a new one
        when it was cancelled. Call inside a transaction."""
        policy = self._policy()
        if self._batch is not None:
            batch = RolloutBatch.objects.select_for_update(no_key=True).get(pk=self._batch.pk)
            if batch.status == RolloutBatch.Status.FINISHED:
                RolloutBatch.objects.filter(pk=batch.pk).update(
                    status=RolloutBatch.Status.RUNNING, finished_at=None
                )
                batch.status = RolloutBatch.Status.RUNNING
            if batch.status == RolloutBatch.Status.RUNNING:
                self._batch = batch
                return batch
        batch = RolloutBatch.objects.create(
            name=batch_name(self.run),
            suite=self.suite(),
            policy_version=policy,
            episodes_per_task=1,
            concurrency=self.concurrency,
            # No episodic memory: the trainer rebuilds each prompt from the episode's own steps.
            config={"history_images": self.history_images, "episodic_k": 0},
            created_by=self.run.created_by,
        )
        log.info("run %s: rollout batch %s (%d at once)", self.run.pk, batch.pk, self.concurrency)
        self._batch = batch
        return batch

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        """`n` episodes of one fresh training instance (seed) of `task_id`, each capped at `max_steps`
        steps; returns the seed."""
        if self._closed:
            raise RuntimeError("the rollout source is closed")
        task = Task.objects.filter(slug=task_id).first()
        if task is None:
            raise ValueError(f"unknown task {task_id!r}")
        with transaction.atomic():
            # The batch row stays locked until the episodes exist, so a worker's batch_advance cannot
            # find it empty and finish it in between.
            batch = self._open_batch()
            policy = self._policy()
            seed = self._next_seed
            created = Episode.objects.bulk_create(
                Episode(
                    task=task,
                    source=Source.AGENT,
                    policy_version=policy,
                    seed=seed,
                    max_steps=max(1, min(int(max_steps), 32767)),
                    batch=batch,
                )
                for _ in range(n)
            )
            self._next_seed += 1
        ids = [e.pk for e in created]
        if any(pk is None for pk in ids):  # a backend that does not return ids from bulk_create
            ids = list(
                Episode.objects.filter(batch=batch, task=task)
                .order_by("-pk")
                .values_list("pk", flat=True)[:n]
            )
        self._outstanding.update({pk: (task_id, seed) for pk in ids})
        batch_advance(batch_id=batch.pk)
        return seed

    # --- results -------------------------------------------------------------------------------

    def pending(self) -> int:
        """Episodes asked for (or their re-runs) not returned by poll yet."""
        return len(self._outstanding)

    def poll(self, timeout: float) -> list[RLEpisode]:
        """Finished episodes not returned yet. An env error is answered by its re-run; an episode given
        up on (no re-run left, or its batch cancelled) comes back with no turns, so the trainer knows
        its group will not grow."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            close_old_connections()
            out = self._collect()
            if out or not self._outstanding or time.monotonic() >= deadline:
                return out
            time.sleep(min(POLL_INTERVAL_S, max(0.0, deadline - time.monotonic())))

    def _collect(self) -> list[RLEpisode]:
        self._switch_if_ready()
        if not self._outstanding:
            return []
        todo = sorted(self._outstanding)
        rows = {e.pk: e for e in Episode.objects.filter(pk__in=todo).select_related("batch")}
        done: list[int] = []
        lost: list[RLEpisode] = []
        while todo:
            pk = todo.pop(0)
            episode = rows.get(pk)
            if episode is None:  # deleted (its batch was cancelled): lost
                lost.append(self._lost(pk))
                continue
            if not episode.is_done:
                continue
            if episode.status == Episode.Status.FINISHED and not episode.env_error:
                done.append(pk)
                continue
            # An infrastructure failure: its re-run (a new episode) answers the request instead.
            retry = Episode.objects.filter(retry_of_id=pk).select_related("batch").first()
            if retry is not None:
                self._outstanding[retry.pk] = self._outstanding.pop(pk)
                rows[retry.pk] = retry
                todo.append(retry.pk)
                continue
            may_retry = (
                episode.env_error
                and episode.batch is not None
                and episode.batch.status == RolloutBatch.Status.RUNNING
                and episode.attempt < episode.batch.max_attempts
            )
            recent = (
                episode.finished_at is not None
                and (timezone.now() - episode.finished_at).total_seconds() < RETRY_GRACE_S
            )
            if may_retry and recent:
                continue  # its re-run is about to be created
            log.info("run %s: episode %s ended without a usable outcome; dropped", self.run.pk, pk)
            lost.append(self._lost(pk, episode))
        self._keep_batch_running()
        if not done:
            return lost
        steps = Prefetch("steps", queryset=Step.objects.order_by("index"), to_attr="ordered_steps")
        finished = (
            Episode.objects.filter(pk__in=done)
            .select_related("task")
            .prefetch_related(steps)
            .order_by("finished_at", "pk")
        )
        out = lost
        for episode in finished:
            out.append(
                rl_episode_of(
                    episode,
                    policy_version=self._version_of(episode.policy_version_id),
                    history_images=self.history_images,
                )
            )
            self._outstanding.pop(episode.pk, None)
        return out

    def _lost(self, pk: int, episode: Episode | None = None) -> RLEpisode:
        """An episode given up on (or deleted), as the trainer's accounting needs it: its request's task
        and seed, no turns."""
        task, seed = self._outstanding.pop(pk)
        version = self._version_of(episode.policy_version_id) if episode is not None else -1
        return RLEpisode(task, seed, 0.0, (), version, episode_id=str(pk))

    def _keep_batch_running(self) -> None:
        """A batch that finished while requests were being added is reopened (episodes never strand)."""
        batch = self._batch
        if batch is None or self._closed:
            return
        stranded = Episode.objects.filter(
            pk__in=list(self._outstanding), status=Episode.Status.PENDING, batch=batch
        )
        reopened = (
            RolloutBatch.objects.filter(pk=batch.pk, status=RolloutBatch.Status.FINISHED)
            .filter(pk__in=stranded.values("batch_id"))
            .update(status=RolloutBatch.Status.RUNNING, finished_at=None)
        )
        if reopened:
            log.info("run %s: batch %s had finished under pending episodes; reopened", self.run.pk, batch.pk)
            batch_advance(batch_id=batch.pk)

    # --- environment use -----------------------------------------------------------------------

    def utilisation(self) -> float | None:
        """Share of the rollout slots' time spent on steps since the last call (None before any batch).

        Sum over the run's steps that ended in the window of their duration (the policy's turn and
        the action: observed_at to acted_at, clipped to the window), divided by the window's length
        times the batch's concurrency, clamped to [0, 1]. Time between steps (leasing, preparing
        and scoring an episode, waiting in the queue) counts as idle, so this is a lower bound on how
        busy the sandboxes were."""
        now = self._clock()
        start, self._window = self._window, now
        batch = self._batch
        if batch is None or now <= start:
            return None
        since = datetime.fromtimestamp(start, tz=UTC)
        busy = 0.0
        for observed, acted in Step.objects.filter(
            episode__batch__name=batch_name(self.run), acted_at__gte=since
        ).values_list("observed_at", "acted_at"):
            busy += max(0.0, acted.timestamp() - max(observed.timestamp(), start))
        return min(1.0, max(0.0, busy / ((now - start) * max(1, batch.concurrency))))

    def close(self) -> None:
        """Cancel what is still queued (running episodes end on their own and are not read)."""
        self._closed = True
        if self._batch is not None:
            dropped = batch_cancel(batch=self._batch)
            log.info(
                "run %s: rollout batch %s cancelled (%d queued dropped)", self.run.pk, self._batch.pk, dropped
            )
        self._outstanding.clear()
