"""Enqueue background work by task name: services never import their own Celery tasks.

A service that starts work in the background names it here; the task module imports the service to do
the work. So no service imports a task and no task/service pair forms an import circle. The queue each
task goes to is in `webapp.celery` (`task_routes`, by these names), beside the workers that serve it.

`enqueue_or_note` is the one path for "the broker is down": it logs, lets the caller mark its row
failed with a message a person can act on, and returns None instead of raising into a page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# name → what it does (queue: see webapp.celery.app.conf.task_routes)
DEMO_PREPARE = "webapp.annotation.tasks.demo_prepare_task"  # lease and set up a demonstration's sandbox
EPISODE_ROLLOUT = "webapp.rollouts.tasks.episode_rollout"  # run one agent episode of a batch
TASK_VERIFY = "webapp.rollouts.tasks.task_verify_run"  # check a task's oracle and do-nothing policy
FLYWHEEL_ROUND = "webapp.datasets.tasks.flywheel_round_task"  # close a flywheel round
DATASET_EXPORT = "webapp.datasets.tasks.dataset_export_task"  # write a dataset export
TRAINING_RUN = "webapp.training.tasks.training_run_task"  # run (or resume) a training run
POLICY_MERGE = "webapp.training.tasks.policy_merge_task"  # merge policy checkpoints

ENQUEUED = (
    DEMO_PREPARE,
    EPISODE_ROLLOUT,
    TASK_VERIFY,
    FLYWHEEL_ROUND,
    DATASET_EXPORT,
    TRAINING_RUN,
    POLICY_MERGE,
)
"""Every task a service starts by name (a test checks each is a registered task)."""

UNAVAILABLE = "the task queue is unavailable"


def _send(name: str, args: tuple[Any, ...], countdown: float | None) -> str:
    """The boundary with Celery (tests replace it). By name: this process need not have imported the
    task's module (Celery routes by name, `task_routes`); with CELERY_TASK_ALWAYS_EAGER the task runs
    here and now, as `.delay` would."""
    from webapp.celery import app

    if app.conf.task_always_eager:
        app.loader.import_default_modules()
        return str(app.tasks[name].apply(args).id or "")
    return str(app.send_task(name, args=args, countdown=countdown).id or "")


def enqueue(name: str, *args: Any, countdown: float | None = None) -> str:
    """Queue task `name` with `args` (JSON-serialisable); its task id. Raises what the broker raised."""
    if name not in ENQUEUED:
        raise ValueError(f"{name!r} is not a task services enqueue (webapp.common.queue.ENQUEUED)")
    return _send(name, args, countdown)


def enqueue_or_note(name: str, *args: Any, note: Callable[[str], None]) -> str | None:
    """Queue task `name`; if the broker cannot take it, log it, call `note` with a message naming the
    cause (to fail or free the row that waits for it) and return None."""
    try:
        return enqueue(name, *args)
    except Exception as exc:  # the broker is down or refuses: the row must not wait forever
        log.exception("could not queue %s%r", name, args)
        note(f"{UNAVAILABLE} ({type(exc).__name__}: {exc})")
        return None
