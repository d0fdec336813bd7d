"""A run whose torchrun process died (agent_core's ProcessLost, raised here by the fake trainer) goes back to
the queue like a run whose worker died, and fails after MAX_ATTEMPTS; a config with processes > 1 reaches
the torchrun launcher. The real torchrun path: tests/webapp/training/test_distributed_real.py."""

from __future__ import annotations

import pytest

from agent_core.training.dist_job import ProcessLost
from webapp.common.queue import TRAINING_RUN
from webapp.training import multiproc, services
from webapp.training.models import TrainingRun
from webapp.training.selectors import run_log_tail
from webapp.training.services import MAX_ATTEMPTS

pytestmark = pytest.mark.django_db


def test_a_lost_training_process_queues_the_run_again(
    launch, fake_runner, queued, django_capture_on_commit_callbacks
):
    run = launch(config={"max_steps": 6, "checkpoint_every": 1, "batch_size": 1})
    fake_runner.fail_with = ProcessLost("torchrun exited with status 1: a training process died")
    del queued[:]
    with django_capture_on_commit_callbacks(execute=True):
        services.training_run_execute(run_id=run.pk, worker="w1")
    run.refresh_from_db()
    assert (run.status, run.worker, run.attempt, run.error) == ("pending", "", 1, "")
    assert queued.of(TRAINING_RUN) == [(run.pk,)]
    log = "\n".join(run_log_tail(run=run))
    assert "attempt 1 lost a training process: torchrun exited" in log and "queued again" in log

    # The next attempt resumes from the checkpoint the lost one saved.
    fake_runner.fail_with = None
    assert services.training_run_execute(run_id=run.pk, worker="w2").status == "finished"
    assert fake_runner.calls[-1]["spec"].resume_from.name == "step-000001"
    run.refresh_from_db()
    assert (run.step, run.attempt) == (6, 2)


def test_a_run_that_keeps_losing_processes_fails_after_max_attempts(launch, fake_runner, queued):
    run = launch()
    TrainingRun.objects.filter(pk=run.pk).update(attempt=MAX_ATTEMPTS - 1)
    fake_runner.fail_with = ProcessLost("a training process died")
    del queued[:]
    services.training_run_execute(run_id=run.pk, worker="w1")
    run.refresh_from_db()
    assert run.status == "failed" and f"gave up after {MAX_ATTEMPTS} attempts" in run.error
    assert not queued.of(TRAINING_RUN)


def test_processes_above_one_go_to_torchrun(launch, fake_runner, monkeypatch):
    calls = []

    def fake_distributed(spec, hooks, *, examples, job_dir, processes):
        calls.append((processes, job_dir, len(list(examples))))
        return fake_runner(spec, hooks, examples=examples)

    monkeypatch.setattr("agent_core.training.dist_job.run_distributed", fake_distributed)
    run = launch(config={"max_steps": 2, "checkpoint_every": 2, "batch_size": 2, "processes": 2})
    assert services.training_run_execute(run_id=run.pk, worker="w1").status == "finished"
    ((processes, job_dir, n),) = calls
    assert processes == 2 and n == 9
    assert job_dir == run.path(run.out_dir) / multiproc.JOB_FOLDER / "attempt-1"
