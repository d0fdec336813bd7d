"""Celery tasks for the flywheel (queue `datasets`): closing a round, exports, and their reaper."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from webapp.datasets.exports import export_run, exports_reap
from webapp.datasets.models import FlywheelIteration
from webapp.datasets.rounds import flywheel_round_close, flywheel_rounds_reap


@shared_task(name="webapp.datasets.tasks.flywheel_round_task")
def flywheel_round_task(iteration_id: int) -> dict[str, Any] | None:
    """Route every finished episode and write the round's dataset versions; a second delivery does nothing."""
    iteration = FlywheelIteration.objects.filter(pk=iteration_id).first()
    if iteration is None:
        return None
    iteration = flywheel_round_close(iteration=iteration)
    return {"round": iteration.number, "status": iteration.status, "p_v1": iteration.stats.get("p_v1")}


@shared_task(name="webapp.datasets.tasks.dataset_export_task")
def dataset_export_task(export_id: int) -> dict[str, Any] | None:
    """Write one pending export; a second delivery finds it claimed and does nothing."""
    export = export_run(export_id=export_id)
    if export is None:
        return None
    return {"export": export.pk, "status": export.status, "error": export.error}


@shared_task(name="webapp.datasets.tasks.exports_reap_task")
def exports_reap_task() -> dict[str, int]:
    """Fail exports and free rounds whose job died, and remove their temporary files."""
    return {"exports": exports_reap(), "rounds": flywheel_rounds_reap()}
