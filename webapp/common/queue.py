"""Enqueue background work by task name: services never import their own Celery tasks.

A service that starts work in the background names it here; the task module imports the service to do
the work. So no service imports a task and no task/service pair forms an import circle. The queue each
task goes to is in `webapp.celery` (`task_routes`, by these names), beside the workers that serve it.

`enqueue_or_note` is the one path for "the broker is down": it logs, lets the caller mark its row
failed with a message a person can act on, and returns None instead of raising into a page.
`queue_depths` reads how much waits in each queue (the health page, a batch's waiting episodes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import redis
from django.conf import settings

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
BROKER_TIMEOUT_S = 0.5


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


def queue_depths(*, queues: Iterable[str] | None = None) -> dict[str, int | None]:
    """Messages waiting in each Celery queue on the Redis broker; None for all when it cannot be read.

    Celery's Redis transport keeps a queue as a list named after it, plus one list per priority step
    (`<queue>\\x06\\x16<step>`) once a message with that priority was sent; a worker's unacked
    messages are elsewhere, so this is what waits for a worker.
    """
    from webapp.celery import QUEUES, app

    names = list(queues if queues is not None else QUEUES)
    options = app.conf.broker_transport_options or {}
    prefix = str(options.get("global_keyprefix", ""))
    sep = str(options.get("sep", "\x06\x16"))
    steps = [int(p) for p in options.get("priority_steps", (0, 3, 6, 9))]
    try:
        client = redis.Redis.from_url(
            settings.CELERY_BROKER_URL,
            socket_connect_timeout=BROKER_TIMEOUT_S,
            socket_timeout=BROKER_TIMEOUT_S,
        )
        with client, client.pipeline(transaction=False) as pipe:
            for name in names:
                for step in steps:
                    pipe.llen(prefix + (f"{name}{sep}{step}" if step else name))
            sizes = pipe.execute()
    except (redis.RedisError, OSError, ValueError):
        return dict.fromkeys(names)
    out: dict[str, int | None] = {}
    for i, name in enumerate(names):
        out[name] = int(sum(sizes[i * len(steps) : (i + 1) * len(steps)]))
    return out
