"""Writes for training runs: launch, stop, resume, the run itself on a worker, the reaper (promotion of
a checkpoint to a policy: promotion.py).

A run is claimed by one worker at a time (status running, `attempt` = its claim number, a fresh
heartbeat). A worker killed with -9 stops heartbeating; the reaper puts its run back to pending and
queues it again, and the next worker resumes from the last checkpoint on disk (up to MAX_ATTEMPTS).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agent_core.training.config import ConfigError, validate_config
from agent_core.training.types import RunSpec
from webapp.catalog.models import TaskSuite
from webapp.common.queue import TRAINING_RUN, enqueue_or_note
from webapp.common.text import MAX_NAME, text_problem
from webapp.datasets.models import DatasetVersion
from webapp.datasets.services import DatasetError, version_pin_resolve
from webapp.policies.models import PolicyVersion
from webapp.training.hooks import RunHooks, RunLost, heartbeat, log_append
from webapp.training.model_dirs import model_dir_problem
from webapp.training.models import Checkpoint, MetricPoint, TrainingRun
from webapp.training.multiproc import run_training
from webapp.training.planning import launch_plan

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
STEP_DIR = re.compile(r"^step-(\d+)$")


class TrainingRunError(Exception):
    """A training operation was refused; `field` names the input at fault (a config field, "dataset", …).

    A launch reports every input at fault at once: `errors` holds (field, message) for each (`field`
    and `message` are the first one's)."""

    def __init__(
        self, message: str, field: str | None = None, *, errors: Sequence[tuple[str | None, str]] = ()
    ) -> None:
        self.errors: list[tuple[str | None, str]] = list(errors) or [(field, message)]
        super().__init__("; ".join(f"{f}: {m}" if f else m for f, m in self.errors))
        self.field = field
        self.message = message

    @classmethod
    def of(cls, errors: Sequence[tuple[str | None, str]]) -> TrainingRunError:
        """One refusal naming every one of `errors` (at least one)."""
        field, message = errors[0]
        return cls(message, field, errors=errors)


def stale_seconds() -> float:
    """How long a running run's heartbeat may be silent before the reaper takes it back."""
    return float(getattr(settings, "TRAINING_STALE_S", 60))


def stop_poll_seconds() -> float:
    """How often a running trainer reads its stop request from the database."""
    return float(getattr(settings, "TRAINING_STOP_POLL_S", 2.0))


def heartbeat_seconds() -> float:
    """How often a worker heartbeats its run from a thread (0: only when the trainer reports)."""
    return float(getattr(settings, "TRAINING_HEARTBEAT_S", 10))


# --- launch ----------------------------------------------------------------------------------------


def _check_base_policy(policy: PolicyVersion | None) -> None:
    if policy is None:
        raise TrainingRunError("choose the local policy the run starts from", "base_policy")
    served = policy.backend == PolicyVersion.Backend.OPENAI and policy.is_platform_served()
    if policy.backend != PolicyVersion.Backend.LOCAL and not served:
        raise TrainingRunError(
            f"{policy.name} is a {policy.get_backend_display()} policy; a run starts from a local model "
            "or one the platform's policy servers serve",
            "base_policy",
        )
    if not policy.is_active:
        raise TrainingRunError(f"{policy.name} is retired; choose an active policy", "base_policy")
    if problem := model_dir_problem(policy.model_dir()):  # an adapter's base must still be there
        raise TrainingRunError(f"{policy.name} {problem}", "base_policy")


def _check_suite(suite: TaskSuite | None, config: dict[str, Any], algorithm: str) -> TaskSuite:
    named = str(config.get("suite") or "")
    if suite is None and named:
        suite = TaskSuite.objects.filter(slug=named).first()
        if suite is None:
            raise TrainingRunError(f"there is no task suite {named!r}", "suite")
    if suite is None:
        raise TrainingRunError(f"{algorithm} rolls out on live tasks: choose a task suite", "suite")
    if named and named != suite.slug:
        raise TrainingRunError(
            f"the config says suite {named!r} but the run is launched on {suite.slug}", "suite"
        )
    published = set(suite.tasks.filter(is_published=True).values_list("slug", flat=True))
    if not published:
        raise TrainingRunError(f"suite {suite.slug} has no published task to roll out on", "suite")
    for slug in (s.strip() for s in str(config.get("tasks") or "").split(",")):
        if slug and slug not in published:
            raise TrainingRunError(f"{slug!r} is not a published task of suite {suite.slug}", "tasks")
    config["suite"] = suite.slug
    return suite


def _data_of(
    algorithm: str,
    known: bool,
    dataset_pin: str | None,
    suite: TaskSuite | None,
    config: dict[str, Any],
    refuse: Callable[[TrainingRunError], None],
) -> tuple[DatasetVersion | None, TaskSuite | None]:
    """What the run learns from: the pinned dataset version (SFT) or the suite it rolls out on (RL)."""
    version = None
    pin = (dataset_pin or "").strip()
    if algorithm == TrainingRun.Algorithm.SFT:
        suite = None
        if not pin:
            refuse(TrainingRunError("an SFT run trains on a dataset version: pin one (name@vN)", "dataset"))
        else:
            try:
                version = version_pin_resolve(pin=pin)
            except DatasetError as exc:
                refuse(TrainingRunError(str(exc), "dataset"))
    elif known:
        if pin:
            msg = f"{algorithm} trains on live rollouts; leave the dataset empty"
            refuse(TrainingRunError(msg, "dataset"))
        try:
            suite = _check_suite(suite, config, algorithm)
        except TrainingRunError as exc:
            refuse(exc)
    return version, suite


def training_run_launch(
    *,
    algorithm: str,
    name: str,
    config: dict[str, Any] | None,
    created_by: AbstractBaseUser,
    dataset_pin: str | None,
    base_policy: PolicyVersion | None,
    suite: TaskSuite | None,
    refused: Sequence[tuple[str, str]] = (),
) -> TrainingRun:
    """Validate and create a pending run, queued on `training` once the transaction commits.

    Every input at fault is reported at once (TrainingRunError.errors); `refused` holds what the
    caller already found wrong while reading its input (a policy name that names nothing), reported
    in place of this function's own message for the same field."""
    errors: list[tuple[str | None, str]] = list(refused)

    def refuse(exc: TrainingRunError) -> None:
        taken = {f for f, _ in errors}
        errors.extend((f, m) for f, m in exc.errors if f is None or f not in taken)

    known = algorithm in TrainingRun.Algorithm.values
    if not known:
        valid = ", ".join(TrainingRun.Algorithm.values)
        refuse(TrainingRunError(f"unknown algorithm {algorithm!r}; valid: {valid}", "algorithm"))
    name = (name or "").strip()
    if not name:
        refuse(TrainingRunError("give the run a name", "name"))
    elif problem := text_problem(name, max_length=MAX_NAME):
        refuse(TrainingRunError(problem, "name"))
    clean: dict[str, Any] | None = None
    if known:
        try:
            clean = validate_config(algorithm, config)
        except ConfigError as exc:
            refuse(TrainingRunError.of([(e.field, e.message) for e in exc.errors]))
    try:
        _check_base_policy(base_policy)
    except TrainingRunError as exc:
        refuse(exc)
    else:  # the estimate must fit the largest device a training worker reported
        plan = launch_plan(base_policy=base_policy, algorithm=algorithm, config=clean) if clean else None
        if plan is not None and (too_big := plan.refusal()):
            refuse(TrainingRunError(too_big[1], too_big[0]))
    served = base_policy is not None and base_policy.is_platform_served()
    if served and algorithm in ("ppo", "grpo") and clean is not None and clean.get("lora") != "on":
        # Its rollouts run on its policy servers, which take each published policy as an adapter.
        why = f"{base_policy.name} is served by the policy servers: an RL run on it trains a LoRA adapter"  # type: ignore[union-attr]
        refuse(TrainingRunError(why + " they hot-load (set lora to on)", "lora"))
    # With a bad config the suite and task slugs are still checked, on a copy of what was given.
    checked = clean if clean is not None else dict(config or {})
    version, suite = _data_of(algorithm, known, dataset_pin, suite, checked, refuse)
    if errors:
        raise TrainingRunError.of(errors)
    assert clean is not None  # no error: the config validated
    with transaction.atomic():
        run = TrainingRun.objects.create(
            name=name,
            algorithm=algorithm,
            config=clean,
            dataset_version=version,
            base_policy=base_policy,
            suite=suite,
            created_by=created_by,
        )
        run.out_dir = f"training/run-{run.pk}"
        run.log_file = f"{run.out_dir}/run.log"
        run.save(update_fields=["out_dir", "log_file"])
        _set_aside(run.path(run.out_dir))
        transaction.on_commit(lambda: _enqueue(run.pk))
    log.info("training run %s (%s) launched by %s", run.pk, algorithm, created_by.get_username())
    return run


def _set_aside(out_dir: Path) -> None:
    # A folder of the same name left by an earlier database (reset, restored) must not be resumed from.
    if out_dir.exists():
        aside = out_dir.with_name(f"{out_dir.name}.old-{timezone.now():%Y%m%d-%H%M%S-%f}")
        out_dir.rename(aside)
        log.warning("%s existed already (from an earlier database?): moved to %s", out_dir, aside.name)


def _enqueue(run_id: int) -> None:
    def fail(why: str) -> None:  # the broker is down: say so on the run rather than leave it pending forever
        TrainingRun.end(
            run_id,
            TrainingRun.Status.FAILED,
            error=f"{why}; resume it later",
            whence=[TrainingRun.Status.PENDING],
        )

    task_id = enqueue_or_note(TRAINING_RUN, run_id, note=fail)
    if task_id is not None:
        TrainingRun.objects.filter(pk=run_id).update(celery_task_id=task_id[:64])


# --- stop, resume ---------------------------------------------------------------------------------


def training_run_stop(*, run: TrainingRun, by: AbstractBaseUser) -> TrainingRun:
    """Ask a run to stop: a pending one stops now, a running one saves a checkpoint and stops."""
    if TrainingRun.end(
        run.pk, TrainingRun.Status.CANCELLED, stop_requested=True, whence=[TrainingRun.Status.PENDING]
    ):
        log_append(run, f"stopped by {by.get_username()} before it started")
    elif TrainingRun.objects.filter(pk=run.pk, status=TrainingRun.Status.RUNNING).update(stop_requested=True):
        log_append(run, f"stop requested by {by.get_username()}: the trainer saves a checkpoint and stops")
    else:
        run.refresh_from_db()
        raise TrainingRunError(f"run #{run.pk} has already ended ({run.status})")
    run.refresh_from_db()
    return run


def run_latest_checkpoint(run: TrainingRun) -> Path | None:
    """The newest complete checkpoint directory of the run on disk, or None."""
    from agent_core.training.checkpoints import latest_checkpoint

    return latest_checkpoint(run.path(run.out_dir)) if run.out_dir else None


def _step_of(path: Path) -> int | None:
    match = STEP_DIR.match(path.name)
    return int(match[1]) if match else None


def training_run_resume(*, run: TrainingRun, by: AbstractBaseUser) -> TrainingRun:
    """Queue a cancelled (stopped) or failed run again; it continues from its last checkpoint."""
    ended = (TrainingRun.Status.CANCELLED, TrainingRun.Status.FAILED)
    if run.status not in ended:
        raise TrainingRunError(f"run #{run.pk} is {run.status}: only a cancelled or failed run resumes")
    last = run_latest_checkpoint(run)
    if last is None:
        raise TrainingRunError(
            f"run #{run.pk} has no checkpoint to resume from; launch it again instead", "checkpoint"
        )
    step = _step_of(last)
    with transaction.atomic():
        resumed = TrainingRun.objects.filter(pk=run.pk, status__in=ended).update(
            status=TrainingRun.Status.PENDING,
            stop_requested=False,
            attempt=0,
            finished_at=None,
            heartbeat_at=None,
            error="",
            resumed_from=Checkpoint.objects.filter(run=run, step=step).first(),
        )
        if resumed != 1:
            raise TrainingRunError(f"run #{run.pk} changed meanwhile; reload the page")
        transaction.on_commit(lambda: _enqueue(run.pk))
    log_append(run, f"resume requested by {by.get_username()}: continues from {last.name}")
    run.refresh_from_db()
    return run


# --- the run, on a `training` worker -------------------------------------------------------------


def _claim(run_id: int, worker: str) -> TrainingRun | None:
    """Take the run for this worker: pending, or running with a heartbeat older than stale_seconds()
    (its worker died) and fewer than MAX_ATTEMPTS claims."""
    run = TrainingRun.claim(
        run_id, worker=worker, stale_after=timedelta(seconds=stale_seconds()), max_attempts=MAX_ATTEMPTS
    )
    if run is None:
        log.info("run %s: not claimed (held by a live worker, ended, or out of attempts)", run_id)
    return run


def _spec(run: TrainingRun, out_dir: Path) -> RunSpec:
    from agent_core.training.checkpoints import latest_checkpoint
    from agent_core.training.errors import TrainingError

    base = run.base_policy.model_dir() if run.base_policy else None
    if base is None:
        raise TrainingError("the run's base policy has no model directory")
    return RunSpec(
        algorithm=run.algorithm,
        config=dict(run.config),
        base_model=base,
        out_dir=out_dir,
        resume_from=latest_checkpoint(out_dir),
    )


def _end(run: TrainingRun, attempt: int, status: str, **fields: Any) -> bool:
    return TrainingRun.end(run.pk, status, attempt=attempt, heartbeat_at=timezone.now(), **fields)


def _give_back(run: TrainingRun, attempt: int, why: str) -> None:
    """A training process of this attempt died: queue the run again to resume from its last checkpoint,
    as the reaper does for a dead worker (failed after MAX_ATTEMPTS, cancelled if a stop was asked for)."""
    log.warning("run %s attempt %d lost a training process: %s", run.pk, attempt, why)
    log_append(run, f"attempt {attempt} lost a training process: {why}")
    if TrainingRun.objects.filter(pk=run.pk, stop_requested=True).exists():
        _end(run, attempt, TrainingRun.Status.CANCELLED)
    elif attempt >= MAX_ATTEMPTS:
        _end(run, attempt, TrainingRun.Status.FAILED, error=f"gave up after {attempt} attempts: {why}")
    elif TrainingRun.release(run.pk, attempt=attempt):
        log_append(run, f"queued again (attempt {attempt} of {MAX_ATTEMPTS}): resumes from its checkpoint")
        transaction.on_commit(lambda: _enqueue(run.pk))


def training_run_execute(*, run_id: int, worker: str = "") -> TrainingRun | None:
    """Claim the run and train it to the end (succeeded / stopped / failed); None if it is not ours to run."""
    from agent_core.training import runner
    from agent_core.training.dist_job import ProcessLost

    worker = worker or f"{socket.gethostname()}:{os.getpid()}"
    run = _claim(run_id, worker)
    if run is None:
        return None
    attempt = run.attempt
    started = time.perf_counter()
    out_dir = run.path(run.out_dir or f"training/run-{run.pk}")
    lost = threading.Event()
    hooks = RunHooks(run, attempt=attempt, lost=lost, stop_poll_s=stop_poll_seconds())
    source = None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        spec = _spec(run, out_dir)
        if spec.resume_from is not None:
            step = _step_of(spec.resume_from) or 0
            # Points logged after that checkpoint by the attempt that died come again from the resumed one.
            MetricPoint.objects.filter(run=run, step__gt=step).delete()
            TrainingRun.objects.filter(pk=run.pk, attempt=attempt).update(
                step=step, resumed_from=Checkpoint.objects.filter(run=run, step=step).first()
            )
            log_append(
                run, f"attempt {attempt} on {worker}: resuming from checkpoint {spec.resume_from.name}"
            )
        else:
            log_append(run, f"attempt {attempt} on {worker}: starting from {spec.base_model}")
        kwargs: dict[str, Any] = {}
        if run.algorithm == TrainingRun.Algorithm.SFT:
            from webapp.training.data import sft_examples_for

            kwargs["examples"] = sft_examples_for(
                run.dataset_version, history_images=int(run.config.get("history_images", 3))
            )
        else:
            from webapp.training.rollout_source import DBRolloutSource

            source = DBRolloutSource(run, dict(run.config))
            kwargs["source"] = source
        with heartbeat(run, attempt=attempt, every_s=heartbeat_seconds(), lost=lost):
            result = run_training(spec, hooks, attempt=attempt, **kwargs)
    except RunLost:
        log.warning("run %s attempt %d: another attempt took it over; this one stops", run.pk, attempt)
        return TrainingRun.objects.get(pk=run.pk)
    except ProcessLost as exc:  # one of its torchrun processes died: as if this worker had
        _give_back(run, attempt, str(exc))
        return TrainingRun.objects.get(pk=run.pk)
    except Exception as exc:
        message = str(exc) if isinstance(exc, runner.TrainingError) else f"{type(exc).__name__}: {exc}"
        log.exception("training run %s failed", run.pk)
        log_append(run, f"failed: {message}\n{''.join(traceback.format_exception(exc))}")
        _end(run, attempt, TrainingRun.Status.FAILED, error=message)
        return TrainingRun.objects.get(pk=run.pk)
    finally:
        if source is not None:
            try:
                source.close()
            except Exception:
                log.exception("run %s: closing its rollout source failed", run.pk)
    # The trainer stops at a checkpoint when asked to: the run was cancelled (and can be resumed).
    status = TrainingRun.Status.CANCELLED if result.status == "stopped" else TrainingRun.Status.FINISHED
    if not _end(run, attempt, status, step=int(result.step)):
        log.warning("run %s attempt %d ended but the run is no longer its own", run.pk, attempt)
    log_append(run, f"{status} at step {result.step} after {time.perf_counter() - started:.1f} s")
    log.info(
        "training run %s %s at step %d in %.1fs", run.pk, status, result.step, time.perf_counter() - started
    )
    return TrainingRun.objects.get(pk=run.pk)


def training_runs_reap() -> dict[str, int]:
    """Runs whose worker went silent: queued again to resume from their last checkpoint, failed after
    MAX_ATTEMPTS, or cancelled if a stop was asked for. Pending runs are left alone."""
    silent_for = timedelta(seconds=stale_seconds())
    requeued = failed = stopped = 0
    for run in TrainingRun.stale(silent_for=silent_for):
        with transaction.atomic():
            if run.stop_requested:  # asked to stop while its worker was dead: it stops at its last checkpoint
                if TrainingRun.end(run.pk, TrainingRun.Status.CANCELLED, attempt=run.attempt):
                    stopped += 1
                    log_append(run, "stopped: its worker was lost after the stop request (resume continues)")
                continue
            if run.attempt >= MAX_ATTEMPTS:
                message = (
                    f"its training worker stopped answering {run.attempt} times (no heartbeat for "
                    f"{stale_seconds():.0f} s each time); gave up after {MAX_ATTEMPTS} attempts. "
                    "Resume it once the cause is fixed."
                )
                if TrainingRun.end(run.pk, TrainingRun.Status.FAILED, attempt=run.attempt, error=message):
                    failed += 1
                    log_append(run, f"failed: {message}")
                continue
            if TrainingRun.release(run.pk, attempt=run.attempt, silent_since=timezone.now() - silent_for):
                requeued += 1
                log_append(
                    run,
                    f"worker {run.worker or '?'} silent for over {stale_seconds():.0f} s (attempt "
                    f"{run.attempt} of {MAX_ATTEMPTS}): queued again, resumes from its last checkpoint",
                )
                transaction.on_commit(lambda pk=run.pk: _enqueue(pk))  # type: ignore[misc]
    if requeued or failed or stopped:
        log.warning(
            "training reaper: %d run(s) queued again, %d failed, %d stopped", requeued, failed, stopped
        )
    return {"requeued": requeued, "failed": failed, "cancelled": stopped}


def training_run_pin(*, run: TrainingRun, pin: str) -> TrainingRun:
    """Pin a training run that has not started to the dataset version `pin` names (DatasetError if it
    has started; VersionGone / DatasetError from the pin)."""
    version = version_pin_resolve(pin=pin)
    updated = TrainingRun.objects.filter(pk=run.pk, status=TrainingRun.Status.PENDING).update(
        dataset_version=version
    )
    if updated != 1:
        raise DatasetError(f"training run {run.pk} has already started; its data cannot change")
    run.refresh_from_db()
    return run
