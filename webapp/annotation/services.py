"""Writes for demonstrations: start one on a leased sandbox, fork one, submit it to the checker.

A demonstration is a human (or mixed) episode. `demo_start` creates it and queues `demo_prepare`,
which leases a sandbox, runs the task's setup (and, for a fork, replays the first k actions of the
episode it forks), hands control to the annotator and starts the episode. The live session
(webapp.annotation.session) then records each step; `demo_submit` runs the checker and releases
the sandbox. A sandbox lost while nobody is connected ends the episode (`demos_reap`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agent_core.actions import ActionError, Finished, action_from_dict
from agent_core.env import EnvError
from agent_core.tasks.runner import PreparedTask, evaluate, prepare
from agent_core.tasks.spec import TaskSpecError, parse_task
from sandbox_workers.agent_env import A11yMode, SandboxEnv
from sandbox_workers.base import SandboxError
from sandbox_workers.client import LeasedSandbox
from webapp.annotation.models import Assignment
from webapp.annotation.selectors import is_unproven
from webapp.catalog.availability import task_require_available
from webapp.catalog.models import Task
from webapp.common.queue import DEMO_PREPARE, enqueue
from webapp.common.text import MAX_NOTE, text_problem
from webapp.episodes.models import Episode, Source, Step
from webapp.episodes.services import (
    EpisodeStateError,
    episode_abort,
    episode_create,
    episode_finish,
    episode_start,
    prepared_to_json,
    screen_of,
    step_record,
)
from webapp.policies.models import PolicyVersion
from webapp.rollouts.verification import proof_record
from webapp.sandboxes.control import control_assign, control_clear
from webapp.sandboxes.models import ControlToken, Lease
from webapp.sandboxes.services import (
    SandboxUnavailable,
    host_client,
    lease_end,
    lease_info,
    sandbox_lease,
)

log = logging.getLogger(__name__)


class DemoError(Exception):
    """The demonstration cannot do this (not running, not yours, no sandbox)."""


# --- starting ---------------------------------------------------------------------------------------


def demo_start(
    *,
    task: Task,
    annotator: AbstractBaseUser,
    policy_version: PolicyVersion | None = None,
    assignment: Assignment | None = None,
    fork_of: Episode | None = None,
    fork_step: int = 0,
    seed: int | None = None,
) -> Episode:
    """A pending demonstration of `task`; its sandbox is prepared by a Celery task.

    With `policy_version` the episode is interactive (mixed): the policy proposes each step. A task no
    sandbox host serves the profile of now is refused (catalog.availability.TaskUnavailable).
    """
    if not annotator.has_perm("episodes.annotate"):
        raise PermissionError(f"{annotator} may not record demonstrations")
    try:
        parse_task(task.spec)
    except TaskSpecError as exc:
        raise DemoError(f"task {task.slug} cannot be demonstrated: its spec is invalid: {exc}") from None
    task_require_available(task=task)  # TaskUnavailable: no host serves its profile, none would come
    if fork_of is not None:
        if not 0 <= fork_step <= fork_of.num_steps:
            raise DemoError(f"episode {fork_of.pk} has {fork_of.num_steps} steps; cannot fork at {fork_step}")
        seed = fork_of.seed
    source = Source.MIXED if policy_version is not None else Source.HUMAN
    with transaction.atomic():
        episode = episode_create(
            task=task,
            source=source,
            annotator=annotator,
            policy_version=policy_version,
            seed=seed if seed is not None else int(time.time() * 1000) % 2**31,
        )
        if fork_of is not None:
            Episode.objects.filter(pk=episode.pk).update(forked_from=fork_of, fork_step=fork_step)
            episode.forked_from, episode.fork_step = fork_of, fork_step
        if assignment is not None:
            Assignment.objects.filter(pk=assignment.pk).update(
                state=Assignment.State.IN_PROGRESS, episode=episode
            )
        Episode.objects.filter(pk=episode.pk).update(queued_at=timezone.now())
        transaction.on_commit(lambda: _enqueue_prepare(episode.pk))
    return episode


def _enqueue_prepare(episode_id: int) -> None:
    enqueue(DEMO_PREPARE, episode_id)


def demo_prepare(*, episode_id: int) -> Episode | None:
    """Lease a sandbox, set the task up (replay a fork's first steps), give the annotator control.

    Idempotent: a second delivery finds the episode no longer pending and does nothing. Failures
    end the episode as an env_error with the reason, and the sandbox goes back.
    """
    t0 = time.monotonic()
    episode = Episode.objects.select_related("task", "annotator", "forked_from").filter(pk=episode_id).first()
    if episode is None or episode.status != Episode.Status.PENDING:
        return None
    try:
        episode = episode_start(episode=episode)
    except EpisodeStateError:
        return None
    lease = None
    try:
        # Inside: a spec that no longer parses ends the episode saying so, instead of leaving the page
        # on "Preparing the sandbox…" with the worker's traceback as the only trace.
        spec = parse_task(episode.task.spec)
        lease, leased = sandbox_lease(
            profile=spec.profile,
            holder=f"episode:{episode.pk}",
            ttl_s=settings.DEMO_LEASE_SECONDS,
            user=episode.annotator,
            wait_s=settings.ROLLOUT_LEASE_WAIT_SECONDS,
        )
        Episode.objects.filter(pk=episode.pk).update(sandbox=lease.sandbox, heartbeat_at=timezone.now())
        env = SandboxEnv(leased, platform=spec.platform)
        prepared = prepare(spec, env, seed=episode.seed)
        Episode.objects.filter(pk=episode.pk).update(prepared=prepared_to_json(prepared))
        if episode.forked_from is not None and episode.fork_step:
            _replay_prefix(episode, env)
        control_assign(
            sandbox=lease.sandbox, episode=episode, holder=ControlToken.Holder.HUMAN, user=episode.annotator
        )
    except TaskSpecError as exc:
        _fail(episode, lease, f"the task's spec is invalid: {exc}")
        return episode
    except (SandboxUnavailable, EnvError, SandboxError, ActionError) as exc:
        _fail(episode, lease, f"the sandbox could not be prepared: {exc}")
        return episode
    except Exception as exc:
        log.exception("demonstration %s: preparing failed", episode.pk)
        _fail(episode, lease, f"internal error while preparing (not yours): {exc!r}")
        return episode
    log.info(
        "demonstration %s of %s ready on %s in %.0f ms",
        episode.pk,
        episode.task.slug,
        lease.sandbox,
        (time.monotonic() - t0) * 1000,
    )
    episode.refresh_from_db()
    return episode


def _replay_prefix(episode: Episode, env: SandboxEnv) -> None:
    """Redo the forked episode's first `fork_step` actions, recording each with its fresh screen."""
    assert episode.forked_from is not None and episode.fork_step is not None
    source_steps = Step.objects.filter(episode=episode.forked_from, index__lt=episode.fork_step).order_by(
        "index"
    )
    for old in source_steps:
        obs = env.observe()
        observed_at = timezone.now()
        action = None
        if old.action.get("type") not in ("invalid", None):
            action = action_from_dict(old.action)
            if not isinstance(action, Finished):
                env.act(action)
        step_record(
            episode=episode,
            actor=old.actor,
            action=old.action,
            action_text=old.action_text,
            thought=old.thought,
            screenshot_png=obs.screenshot,
            screenshot_ext="jpg" if obs.mime == "image/jpeg" else "png",
            screen_size=(obs.width, obs.height),
            invalid_reason=old.invalid_reason,
            proposed_action=old.proposed_action,
            proposed_action_text=old.proposed_action_text,
            proposed_thought=old.proposed_thought,
            info={"replayed_from": old.pk},
            observed_at=observed_at,
            acted_at=timezone.now(),
        )


def _fail(episode: Episode, lease: Lease | None, message: str) -> None:
    log.warning("demonstration %s: %s", episode.pk, message)
    if lease is not None:
        control_clear(sandbox_id=lease.sandbox_id)
        with contextlib.suppress(SandboxError, EnvError):
            lease_end(lease=lease, recycle=True)
    with contextlib.suppress(EpisodeStateError):
        episode_finish(episode=episode, reward=None, env_error=True, error=message)
    Assignment.objects.filter(episode=episode, state=Assignment.State.IN_PROGRESS).update(
        state=Assignment.State.OPEN, episode=None
    )


# --- the prepared task, kept on the episode -----------------------------------------------------------


def prepared_of(episode: Episode) -> PreparedTask:
    """The episode's task as it was prepared in its sandbox (for the checker and the policy)."""
    data = episode.prepared or {}
    if not data:
        raise DemoError(f"episode {episode.pk} was never prepared")
    return PreparedTask(
        spec=parse_task(episode.task.spec),
        seed=int(data.get("seed", episode.seed)),
        params=data.get("params", {}),
        instruction=str(data.get("instruction", "")),
        setup=data.get("setup", {}),
        tools=tuple(t for t in data.get("tools") or () if isinstance(t, dict)),
    )


# --- the live sandbox of a running demonstration ----------------------------------------------------


def demo_lease(*, episode: Episode) -> Lease:
    """The active lease of the episode's sandbox; DemoError if it has none (expired, lost)."""
    lease = (
        Lease.objects.select_related("sandbox", "sandbox__host")
        .filter(holder=f"episode:{episode.pk}", state=Lease.State.ACTIVE)
        .first()
    )
    if lease is None:
        raise DemoError(f"episode {episode.pk} holds no sandbox (its lease ended)")
    return lease


def demo_env(*, episode: Episode, lease: Lease | None = None, a11y: A11yMode = False) -> SandboxEnv:
    """An environment acting on the episode's leased sandbox from this process (`a11y`: what it adds to
    each screenshot, as for a rollout)."""
    lease = lease or demo_lease(episode=episode)
    leased = host_client(lease.sandbox.host).lease(lease_info(lease))
    return SandboxEnv(leased, platform=parse_task(episode.task.spec).platform, a11y=a11y)


def demo_renew(*, episode: Episode, env: SandboxEnv) -> None:
    """Keep the sandbox while someone works on it; the row mirrors the new expiry."""
    target = env.target
    assert isinstance(target, LeasedSandbox)
    expires = target.renew(settings.DEMO_LEASE_SECONDS)
    Lease.objects.filter(holder=f"episode:{episode.pk}", state=Lease.State.ACTIVE).update(
        heartbeat_at=timezone.now(), expires_at=datetime.fromtimestamp(expires, tz=UTC)
    )
    Episode.beat(episode.pk)


# --- ending -------------------------------------------------------------------------------------------


def demo_submit(*, episode: Episode, user: AbstractBaseUser, answer: str = "") -> Episode:
    """Score the final state with the task's checker, end the episode, release the sandbox."""
    _check_owner(episode, user)
    if episode.status != Episode.Status.RUNNING:
        raise DemoError(f"episode {episode.pk} is {episode.status}, not running")
    lease = demo_lease(episode=episode)
    env = demo_env(episode=episode, lease=lease)
    t0 = time.monotonic()
    try:
        final = env.observe()  # the screen the annotator ended on: the result a reviewer judges
        check = evaluate(prepared_of(episode), env, final_answer=answer)
    except (EnvError, SandboxError) as exc:
        _fail(episode, lease, f"the checker could not read the sandbox: {exc}")
        episode.refresh_from_db()
        return episode
    episode = episode_finish(
        episode=episode,
        reward=check.reward,
        final_screen=screen_of(final),
        stop_reason="finished",
        final_answer=answer[:10000],
        check_details=list(check.details),
    )
    log.info(
        "demonstration %s submitted: reward %s (%.0f ms)",
        episode.pk,
        check.reward,
        (time.monotonic() - t0) * 1000,
    )
    control_clear(sandbox_id=lease.sandbox_id)
    with contextlib.suppress(SandboxError, EnvError):
        lease_end(lease=lease)
    Assignment.objects.filter(episode=episode).update(state=Assignment.State.DONE)
    if check.reward == 1.0 and is_unproven(episode.task):
        # A benchmark task with no scripted solution: this demonstration is its proof.
        proof_record(task=episode.task, episode_id=episode.pk, by=str(user))
    return episode


def demo_abandon(
    *, episode: Episode, user: AbstractBaseUser, reason: str = "abandoned by the annotator"
) -> Episode:
    """Stop a demonstration without scoring it; the sandbox goes back, the assignment reopens."""
    _check_owner(episode, user)
    episode = episode_abort(episode=episode, reason=reason, status=Episode.Status.CANCELLED)
    _release_quietly(episode)
    Assignment.objects.filter(episode=episode, state=Assignment.State.IN_PROGRESS).update(
        state=Assignment.State.OPEN, episode=None
    )
    return episode


def _release_quietly(episode: Episode) -> None:
    lease = (
        Lease.objects.filter(holder=f"episode:{episode.pk}", state=Lease.State.ACTIVE)
        .select_related("sandbox", "sandbox__host")
        .first()
    )
    if lease is not None:
        control_clear(sandbox_id=lease.sandbox_id)
        with contextlib.suppress(SandboxError, EnvError, SandboxUnavailable):
            lease_end(lease=lease, recycle=True)


def _check_owner(episode: Episode, user: AbstractBaseUser) -> None:
    if episode.annotator_id != user.pk and not user.has_perm("sandboxes.change_sandbox"):
        raise DemoError("only the episode's annotator may do this")


def demos_reap(*, now: datetime | None = None) -> int:
    """End running demonstrations whose sandbox lease has ended (expired while nobody worked on it)."""
    now = now or timezone.now()
    # Preparing may wait for a sandbox: only a preparation far past that wait counts as lost.
    preparing_limit = now - timedelta(seconds=settings.ROLLOUT_LEASE_WAIT_SECONDS + 300)
    reaped = 0
    running = Episode.objects.filter(
        status=Episode.Status.RUNNING, source__in=[Source.HUMAN, Source.MIXED], batch__isnull=True
    ).filter(started_at__lt=now - timedelta(seconds=30))
    for episode in running:
        if not episode.prepared and episode.started_at and episode.started_at > preparing_limit:
            continue
        holder = f"episode:{episode.pk}"
        if Lease.objects.filter(holder=holder, state=Lease.State.ACTIVE).exists():
            continue
        with contextlib.suppress(EpisodeStateError):
            episode_abort(episode=episode, reason=_lost_reason(episode))
            reaped += 1
            if episode.sandbox_id:
                control_clear(sandbox_id=episode.sandbox_id)
            Assignment.objects.filter(episode=episode, state=Assignment.State.IN_PROGRESS).update(
                state=Assignment.State.OPEN, episode=None
            )
    if reaped:
        log.warning("demos_reap: ended %d demonstration(s) that lost their sandbox", reaped)
    return reaped


def _lost_reason(episode: Episode) -> str:
    """Why a running demonstration has no lease any more, as the records say it (issue 34: a sandbox
    replaced under a connected annotator was recorded as "lost while nobody was connected")."""
    lease = (
        Lease.objects.filter(holder=f"episode:{episode.pk}")
        .select_related("sandbox", "sandbox__host")
        .order_by("-acquired_at")
        .first()
    )
    if lease is None:
        return "the sandbox was lost: the episode never held a lease"
    ended = f"{lease.ended_at:%Y-%m-%d %H:%M:%S} UTC" if lease.ended_at else "an unknown time"
    if lease.state == Lease.State.BROKEN:
        return f"the sandbox failed and its host ended the lease at {ended}: {_sandbox_failure(lease)}"
    if lease.state == Lease.State.EXPIRED:
        return (
            f"the sandbox's lease expired at {ended}: nobody renewed it for {settings.DEMO_LEASE_SECONDS} s "
            "(an open session page renews it every 30 s)"
        )
    return f"the sandbox's lease ended at {ended}: its host no longer held it (a host restart, or an admin)"


def _sandbox_failure(lease: Lease) -> str:
    """What the host reported about the sandbox around its lease's end: its recorded errors (the newest
    that names it), else the sandbox's last error."""
    sandbox = lease.sandbox
    errors = (sandbox.host.report or {}).get("errors") or []
    mine = [e for e in errors if isinstance(e, dict) and e.get("sandbox") == sandbox.external_id]
    if mine:
        return str(mine[-1].get("message") or "")[:1000]
    return sandbox.last_error[:1000] or "the host gave no reason"


# --- assignments --------------------------------------------------------------------------------------


def assignment_create(
    *, task: Task, annotator: AbstractBaseUser, assigned_by: AbstractBaseUser | None = None, note: str = ""
) -> Assignment:
    """Put `task` in `annotator`'s queue."""
    if not annotator.has_perm("episodes.annotate"):
        raise PermissionError(f"{annotator} is not an annotator")
    problem = text_problem(note, max_length=MAX_NOTE)
    if problem:
        raise DemoError(f"the note {problem}")
    return Assignment.objects.create(task=task, annotator=annotator, assigned_by=assigned_by, note=note)
