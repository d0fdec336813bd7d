"""The job lifecycle's migrations (one word per state, webapp.common.jobs) rewrite the old words in
existing rows, forwards and back, and keep what the rows said (errors, attempts)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [
    ("episodes", "0006_policyversion_moves_to_policies"),
    ("datasets", "0004_policyversion_moves_to_policies"),
    ("training", "0005_policyversion_moves_to_policies"),
]
AFTER = [
    ("episodes", "0007_job_lifecycle"),
    ("datasets", "0005_job_lifecycle"),
    ("training", "0006_job_lifecycle"),
]


def _migrate(targets):  # type: ignore[no-untyped-def]
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _old_rows(apps) -> dict[str, int]:  # type: ignore[no-untyped-def]
    now = timezone.now()
    user = apps.get_model("auth", "User").objects.create(username="old-admin")
    task = apps.get_model("catalog", "Task").objects.create(
        slug="old/task", title="t", instruction="i", platform="desktop", env_profile="desktop"
    )
    Episode = apps.get_model("episodes", "Episode")

    def episode(status: str, **kw):  # type: ignore[no-untyped-def]
        ended = {"finished_at": now} if status in ("finished", "aborted") else {}
        return Episode.objects.create(task=task, source="agent", status=status, **ended, **kw).pk

    Dataset = apps.get_model("datasets", "Dataset")
    version = apps.get_model("datasets", "DatasetVersion").objects.create(
        dataset=Dataset.objects.create(name="old-sft", kind="sft"), number=1
    )
    Export = apps.get_model("datasets", "DatasetExport")
    Round = apps.get_model("datasets", "FlywheelIteration")
    Run = apps.get_model("training", "TrainingRun")
    Merge = apps.get_model("training", "PolicyMerge")
    return {
        "ep_finished": episode("finished", reward=1.0),
        "ep_env_error": episode("aborted", env_error=True, error_message="sandbox died"),
        "ep_abandoned": episode("aborted", error_message="abandoned by the annotator"),
        "ep_lost": episode("aborted", error_message="the sandbox was lost (its lease ended)"),
        "ep_running": episode("running"),
        # An export finished before finished_at was required of it: the migration fills it in.
        "export_done": Export.objects.create(version=version, kind="sft", fmt="jsonl", status="done").pk,
        "export_cancelled": Export.objects.create(
            version=version, kind="ct", fmt="jsonl", status="cancelled", finished_at=now, error="cancelled"
        ).pk,
        "round_closed": Round.objects.create(number=1, status="closed", finished_at=now).pk,
        "round_closing": Round.objects.create(number=2, status="closing").pk,
        "run_succeeded": Run.objects.create(
            name="a", algorithm="sft", status="succeeded", created_by=user, attempts=2, finished_at=now
        ).pk,
        "run_stopped": Run.objects.create(
            name="b", algorithm="sft", status="stopped", created_by=user, finished_at=now
        ).pk,
        "run_failed": Run.objects.create(
            name="c",
            algorithm="sft",
            status="failed",
            created_by=user,
            error_message="CUDA out of memory",
            finished_at=now - timedelta(seconds=1),
        ).pk,
        "merge_succeeded": Merge.objects.create(name="m", sources=[], status="succeeded").pk,
    }


@pytest.mark.django_db(transaction=True)
def test_old_words_become_the_lifecycle_words_and_come_back():
    try:
        _words_forwards_and_back()
    finally:  # whatever happened, the tests after this one find the schema as it is now
        executor = MigrationExecutor(connection)
        _migrate(executor.loader.graph.leaf_nodes())


def _words_forwards_and_back() -> None:
    rows = _old_rows(_migrate(BEFORE))
    apps = _migrate(AFTER)
    Episode = apps.get_model("episodes", "Episode")

    def status(model: str, key: str) -> str:
        return apps.get_model(*model.split(".")).objects.get(pk=rows[key]).status

    assert [
        status("episodes.Episode", k) for k in ("ep_finished", "ep_env_error", "ep_abandoned", "ep_lost")
    ] == [
        "finished",
        "failed",
        "cancelled",
        "failed",
    ]
    assert status("episodes.Episode", "ep_running") == "running"
    assert Episode.objects.get(pk=rows["ep_env_error"]).error == "sandbox died"  # the field renamed, kept
    assert (
        status("datasets.DatasetExport", "export_done"),
        status("datasets.DatasetExport", "export_cancelled"),
    ) == (
        "finished",
        "cancelled",
    )
    assert (
        status("datasets.FlywheelIteration", "round_closed"),
        status("datasets.FlywheelIteration", "round_closing"),
    ) == (
        "finished",
        "running",
    )
    assert (
        apps.get_model("datasets", "DatasetExport").objects.get(pk=rows["export_done"]).finished_at
        is not None
    )
    Run = apps.get_model("training", "TrainingRun")
    assert [status("training.TrainingRun", k) for k in ("run_succeeded", "run_stopped", "run_failed")] == [
        "finished",
        "cancelled",
        "failed",
    ]
    assert Run.objects.get(pk=rows["run_succeeded"]).attempt == 2
    assert Run.objects.get(pk=rows["run_failed"]).error == "CUDA out of memory"
    merge = apps.get_model("training", "PolicyMerge").objects.get(pk=rows["merge_succeeded"])
    assert merge.status == "finished" and merge.finished_at is not None  # the new constraint holds

    apps = _migrate(BEFORE)
    back = {
        key: apps.get_model(*model.split(".")).objects.get(pk=rows[key]).status
        for model, key in [
            ("episodes.Episode", "ep_env_error"),
            ("episodes.Episode", "ep_abandoned"),
            ("datasets.DatasetExport", "export_done"),
            ("datasets.FlywheelIteration", "round_closing"),
            ("training.TrainingRun", "run_stopped"),
            ("training.PolicyMerge", "merge_succeeded"),
        ]
    }
    assert back == {
        "ep_env_error": "aborted",
        "ep_abandoned": "aborted",
        "export_done": "done",
        "round_closing": "closing",
        "run_stopped": "stopped",
        "merge_succeeded": "succeeded",
    }
    _migrate(AFTER)
