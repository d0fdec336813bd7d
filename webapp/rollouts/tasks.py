"""Celery tasks for rollouts: one task per episode (queue `rollouts`), the reaper (beat)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from webapp.rollouts.services import episode_run
from webapp.rollouts.services import rollouts_reap as reap


@shared_task(bind=True, name="webapp.rollouts.tasks.episode_rollout", acks_late=True)
def episode_rollout(self: Any, episode_id: int) -> dict[str, Any] | None:
    """Run one episode; a second delivery of the same id does nothing."""
    episode = episode_run(episode_id=episode_id, worker=str(self.request.hostname or ""))
    if episode is None:
        return None
    return {"episode": episode.pk, "status": episode.status, "reward": episode.reward}


@shared_task(name="webapp.rollouts.tasks.rollouts_reap")
def rollouts_reap() -> dict[str, int]:
    """Re-run episodes whose worker died; re-enqueue lost ones."""
    return reap()


# A check with no sandbox to run on (the pool warming on the first start, the host not registered
# yet) is tried again later: 15 s, 30 s, 1 min, 2 min, 4 min, then every 5 min, 23 minutes in all.
VERIFY_RETRIES = 8


@shared_task(
    bind=True, name="webapp.rollouts.tasks.task_verify_run", acks_late=True, max_retries=VERIFY_RETRIES
)
def task_verify_run(self: Any, task_id: int, runs: int = 2) -> dict[str, Any]:
    """Check a task's oracle and do-nothing runs and publish it if they agree; wait for sandboxes."""
    from webapp.catalog.models import Task
    from webapp.rollouts.verification import VerificationDeferred, task_verify, verification_gave_up

    task = Task.objects.get(pk=task_id)
    try:
        return task_verify(task=task, runs=runs)
    except VerificationDeferred as exc:
        tries = self.request.retries + 1
        if tries > self.max_retries:
            verification_gave_up(task=task, tries=tries)
            return {"ok": False, "status": "waiting", "reason": str(exc)}
        raise self.retry(countdown=min(300, 15 * 2**self.request.retries)) from exc
