"""Celery tasks for training: one run per task on queue `training`, and the reaper (beat)."""

from __future__ import annotations

import os
import socket
from typing import Any

from celery import shared_task

from webapp.training.services import training_run_execute
from webapp.training.services import training_runs_reap as reap


@shared_task(bind=True, name="webapp.training.tasks.training_run_task", acks_late=True)
def training_run_task(self: Any, run_id: int) -> dict[str, Any] | None:
    """Train one run to its end; a second delivery (or a run another worker holds) does nothing."""
    worker = f"{self.request.hostname or socket.gethostname()}:{os.getpid()}"
    run = training_run_execute(run_id=run_id, worker=worker)
    if run is None:
        return None
    return {"run": run.pk, "status": run.status, "step": run.step}


@shared_task(name="webapp.training.tasks.training_runs_reap")
def training_runs_reap() -> dict[str, int]:
    """Queue again the runs whose worker went silent (they resume from their last checkpoint)."""
    return reap()


@shared_task(name="webapp.training.tasks.policy_merge_task", acks_late=True)
def policy_merge_task(merge_id: int) -> dict[str, Any] | None:
    """Average the weights of a requested merge into a new local policy version."""
    from webapp.training.merging import policy_merge_execute

    merge = policy_merge_execute(merge_id=merge_id)
    if merge is None:
        return None
    return {"merge": merge.pk, "status": merge.status, "policy": merge.policy_id}
