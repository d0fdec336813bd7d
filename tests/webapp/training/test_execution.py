"""A run on a worker with a fake trainer reporting through the real hooks: metrics, checkpoints, log,
stop, resume from the last checkpoint, failures, claims, the reaper."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.test import override_settings
from django.utils import timezone

from agent_core.training.errors import TrainingError
from webapp.celery import app
from webapp.common.queue import TRAINING_RUN
from webapp.training import services, tasks
from webapp.training.hooks import RunHooks, RunLost
from webapp.training.models import MetricPoint, TrainingRun
from webapp.training.selectors import run_log_tail
from webapp.training.services import (
    MAX_ATTEMPTS,
    TrainingRunError,
    training_run_resume,
    training_run_stop,
    training_runs_reap,
)

pytestmark = pytest.mark.django_db


def run_task(run: TrainingRun) -> dict | None:
    """The Celery task, executed in this process (as a worker would, minus the broker)."""
    result = tasks.training_run_task.apply(args=(run.pk,)).get()
    run.refresh_from_db()
    return result


def test_run_trains_to_the_end_writing_metrics_checkpoints_and_log(
    launch, fake_runner, sft_version, settings
):
    run = launch()
    assert run_task(run) == {"run": run.pk, "status": "finished", "step": 6}
    assert (run.status, run.step, run.attempt) == ("finished", 6, 1)
    assert run.finished_at is not None and run.started_at is not None
    assert [c.step for c in run.checkpoints.order_by("step")] == [2, 4, 6]
    ckpt = run.checkpoints.get(step=4)
    assert ckpt.path == f"training/run-{run.pk}/checkpoints/step-000004"  # relative to the var dir
    assert ckpt.metrics == {"train/loss": 0.25}
    assert list(
        MetricPoint.objects.filter(run=run, name="train/loss").order_by("step").values_list("step", flat=True)
    ) == [1, 2, 3, 4, 5, 6]
    (call,) = fake_runner.calls
    spec = call["spec"]
    assert spec.resume_from is None and spec.base_model == Path(run.base_policy.model_name)
    assert spec.out_dir == Path(settings.VAR_DIR) / f"training/run-{run.pk}"
    assert spec.config["max_steps"] == 6
    # The examples are the dataset version's, built by webapp.training.data (3 episodes x 3 steps).
    assert len(call["examples"]) == 9 and call["source"] is None
    log = run_log_tail(run=run)
    assert "starting from" in log[0] and "fake training: 6 steps" in log[1]
    assert log[-1].endswith("finished at step 6 after " + log[-1].rsplit("after ", 1)[1])


def test_second_delivery_of_the_task_does_nothing(launch, fake_runner):
    run = launch()
    run_task(run)
    assert run_task(run) is None
    assert len(fake_runner.calls) == 1


def test_a_run_held_by_a_live_worker_is_not_taken(launch, fake_runner):
    run = launch()
    TrainingRun.objects.filter(pk=run.pk).update(status="running", attempt=1, heartbeat_at=timezone.now())
    assert run_task(run) is None
    assert fake_runner.calls == [] and run.attempt == 1


def test_a_redelivered_task_takes_over_a_run_whose_worker_went_silent(launch, fake_runner):
    run = launch()
    old = timezone.now() - timedelta(minutes=10)
    TrainingRun.objects.filter(pk=run.pk).update(status="running", attempt=1, heartbeat_at=old)
    assert run_task(run)["status"] == "finished"
    assert run.attempt == 2


def test_stop_saves_a_checkpoint_and_ends_stopped(launch, fake_runner, personas):
    run = launch(config={"max_steps": 10, "checkpoint_every": 4})
    fake_runner.on_step = lambda step: step == 3 and training_run_stop(run=run, by=personas.admin)
    assert run_task(run)["status"] == "cancelled"
    assert (run.status, run.step, run.stop_requested) == ("cancelled", 3, True)
    assert run.finished_at is not None
    assert sorted(run.checkpoints.values_list("step", flat=True)) == [3]
    assert any("stop requested by dave" in line for line in run_log_tail(run=run))


def test_stopping_a_pending_run_stops_it_at_once_and_the_task_then_does_nothing(
    launch, fake_runner, personas
):
    run = launch()
    run = training_run_stop(run=run, by=personas.admin)
    assert (run.status, run.finished_at is not None) == ("cancelled", True)
    assert run_task(run) is None and fake_runner.calls == []
    with pytest.raises(TrainingRunError, match=r"already ended \(cancelled\)"):
        training_run_stop(run=run, by=personas.admin)


def test_resume_continues_from_the_last_checkpoint(launch, fake_runner, personas):
    run = launch(config={"max_steps": 10, "checkpoint_every": 4})
    fake_runner.on_step = lambda step: step == 6 and training_run_stop(run=run, by=personas.admin)
    run_task(run)
    assert (run.status, run.step) == ("cancelled", 6)
    # Step 6's points came after checkpoint 4; a stopped run saved step 6 itself, so they stay.
    run = training_run_resume(run=run, by=personas.admin)
    assert (run.status, run.stop_requested, run.attempt, run.finished_at) == ("pending", False, 0, None)
    assert run.resumed_from == run.checkpoints.get(step=6)
    fake_runner.on_step = None
    assert run_task(run)["status"] == "finished"
    resumed = fake_runner.calls[-1]["spec"].resume_from
    assert resumed is not None and resumed.name == "step-000006"
    assert (run.step, run.status) == (10, "finished")
    log = "\n".join(run_log_tail(run=run))
    assert "resuming from checkpoint step-000006" in log and "resumed from step-000006 (step 6)" in log
    steps = list(MetricPoint.objects.filter(run=run, name="train/loss").values_list("step", flat=True))
    assert sorted(steps) == list(range(1, 11))  # no step twice


def test_resume_without_a_checkpoint_is_refused(launch, fake_runner, personas):
    run = launch()
    training_run_stop(run=run, by=personas.admin)
    with pytest.raises(TrainingRunError) as caught:
        training_run_resume(run=run, by=personas.admin)
    assert caught.value.field == "checkpoint"
    assert "no checkpoint to resume from" in str(caught.value)


def test_resume_of_a_running_or_finished_run_is_refused(launch, fake_runner, personas):
    run = launch()
    run_task(run)
    with pytest.raises(TrainingRunError, match="only a cancelled or failed run resumes"):
        training_run_resume(run=run, by=personas.admin)


def test_training_error_fails_the_run_with_its_message_and_the_traceback_in_the_log(launch, fake_runner):
    fake_runner.fail_with = TrainingError("the dataset version has no usable examples")
    run = launch()
    assert run_task(run)["status"] == "failed"
    assert run.error == "the dataset version has no usable examples"
    assert run.finished_at is not None
    log = "\n".join(run_log_tail(run=run))
    assert "failed: the dataset version has no usable examples" in log and "Traceback" in log


def test_any_other_exception_fails_the_run_too(launch, fake_runner):
    fake_runner.fail_with = RuntimeError("CUDA out of memory")
    run = launch()
    run_task(run)
    assert (run.status, run.error) == ("failed", "RuntimeError: CUDA out of memory")


def test_a_base_policy_without_model_fails_the_run_never_leaving_it_running(launch, fake_runner, base_policy):
    run = launch()
    base_policy.model_name = ""
    base_policy.backend = "oracle"
    base_policy.save()
    run_task(run)
    assert run.status == "failed" and "no model directory" in run.error


def test_hooks_of_a_reaped_attempt_stop_without_writing(launch):
    run = launch()
    TrainingRun.objects.filter(pk=run.pk).update(status="running", attempt=2)
    stale = RunHooks(run, attempt=1)
    with pytest.raises(RunLost):
        stale.on_metrics(1, {"train/loss": 1.0})
    with pytest.raises(RunLost):
        stale.should_stop()
    assert not MetricPoint.objects.exists()
    current = RunHooks(run, attempt=2, stop_poll_s=0)
    current.on_metrics(1, {"train/loss": 1.0, "train/grad_norm": float("inf"), "bad": float("nan")})
    assert set(MetricPoint.objects.values_list("name", flat=True)) >= {"train/loss", "train/grad_norm"}
    assert current.should_stop() is False


def test_a_worker_that_lost_its_run_leaves_the_new_attempt_alone(launch, fake_runner):
    run = launch()

    def taken_over(step: int) -> None:
        if step == 2:  # the reaper gave the run to another worker meanwhile
            TrainingRun.objects.filter(pk=run.pk).update(attempt=5)

    fake_runner.on_step = taken_over
    assert run_task(run) == {"run": run.pk, "status": "running", "step": 2}
    assert run.attempt == 5 and run.error == ""


# --- the reaper ------------------------------------------------------------------------------------


def _silent(run: TrainingRun, attempts: int) -> None:
    TrainingRun.objects.filter(pk=run.pk).update(
        status="running", attempt=attempts, heartbeat_at=timezone.now() - timedelta(seconds=30)
    )


@override_settings(TRAINING_STALE_S=10)
def test_reaper_queues_a_silent_run_again_and_it_resumes_from_its_checkpoint(
    launch, fake_runner, queued, django_capture_on_commit_callbacks
):
    run = launch(config={"max_steps": 8, "checkpoint_every": 2})
    fake_runner.on_step = lambda step: step == 5 and _raise_kill()
    with pytest.raises(_Killed):
        services.training_run_execute(run_id=run.pk, worker="w1")  # the worker dies at step 5
    run.refresh_from_db()
    assert (run.status, run.step) == ("running", 5)
    _silent(run, attempts=1)
    pending = TrainingRun.objects.create(name="waits", algorithm="sft", created_by=run.created_by)

    del queued[:]
    with django_capture_on_commit_callbacks(execute=True):
        assert training_runs_reap() == {"requeued": 1, "failed": 0, "cancelled": 0}
    assert queued.of(TRAINING_RUN) == [(run.pk,)]
    run.refresh_from_db()
    pending.refresh_from_db()
    assert (run.status, run.heartbeat_at, pending.status) == ("pending", None, "pending")

    fake_runner.on_step = None
    assert run_task(run)["status"] == "finished"
    assert fake_runner.calls[-1]["spec"].resume_from.name == "step-000004"
    assert run.attempt == 2 and run.resumed_from == run.checkpoints.get(step=4)
    steps = list(MetricPoint.objects.filter(run=run, name="train/loss").values_list("step", flat=True))
    assert sorted(steps) == list(range(1, 9))  # step 5 of the dead attempt was dropped, then redone
    assert any("silent for over 10 s" in line for line in run_log_tail(run=run))


class _Killed(BaseException):
    """Stands for SIGKILL: nothing in the task catches it (it is not an Exception)."""


def _raise_kill() -> None:
    raise _Killed()


@override_settings(TRAINING_STALE_S=10)
def test_reaper_fails_a_run_after_three_attempts(launch, queued, django_capture_on_commit_callbacks):
    run = launch()
    _silent(run, attempts=MAX_ATTEMPTS)
    del queued[:]
    with django_capture_on_commit_callbacks(execute=True):
        assert training_runs_reap() == {"requeued": 0, "failed": 1, "cancelled": 0}
    assert not queued.of(TRAINING_RUN)
    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None
    assert "stopped answering 3 times" in run.error and "gave up after 3 attempts" in run.error


@override_settings(TRAINING_STALE_S=10)
def test_reaper_stops_a_silent_run_that_was_asked_to_stop(launch, queued, django_capture_on_commit_callbacks):
    run = launch()
    _silent(run, attempts=1)
    TrainingRun.objects.filter(pk=run.pk).update(stop_requested=True)
    del queued[:]
    with django_capture_on_commit_callbacks(execute=True):
        assert training_runs_reap() == {"requeued": 0, "failed": 0, "cancelled": 1}
    assert not queued.of(TRAINING_RUN)
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None


@override_settings(TRAINING_STALE_S=60)
def test_reaper_leaves_live_runs_alone(launch):
    run = launch()
    _silent(run, attempts=1)  # 30 s of silence is under the limit
    assert training_runs_reap() == {"requeued": 0, "failed": 0, "cancelled": 0}


def test_run_task_goes_to_training_and_the_reaper_to_a_queue_training_jobs_never_block():
    router = app.amqp.router
    assert router.route({}, "webapp.training.tasks.training_run_task")["queue"].name == "training"
    assert router.route({}, "webapp.training.tasks.training_runs_reap")["queue"].name == "sandboxes"
    entries = {e["task"]: e["schedule"] for e in app.conf.beat_schedule.values()}
    assert entries["webapp.training.tasks.training_runs_reap"] == 30.0


def test_a_leftover_folder_of_the_same_name_is_set_aside_not_resumed_from(launch, monkeypatch, settings):
    leftover = Path(settings.VAR_DIR) / "training" / "run-7"
    (leftover / "checkpoints" / "step-000004").mkdir(parents=True)
    services._set_aside(leftover)
    assert not leftover.exists()
    (aside,) = (Path(settings.VAR_DIR) / "training").glob("run-7.old-*")
    assert (aside / "checkpoints" / "step-000004").is_dir()
    services._set_aside(leftover)  # nothing there: nothing to do

    checked: list[Path] = []
    monkeypatch.setattr(services, "_set_aside", checked.append)
    run = launch()
    assert checked == [Path(settings.VAR_DIR) / f"training/run-{run.pk}"]


class _Source:
    """Stands in for webapp.training.rollout_source.DBRolloutSource."""

    made: list[_Source] = []

    def __init__(self, run: TrainingRun, config: dict) -> None:
        self.run, self.config, self.closed = run, config, False
        _Source.made.append(self)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("fails", [False, True])
def test_rl_run_gets_a_rollout_source_of_its_own_that_is_closed_at_the_end(
    launch, suite, fake_runner, monkeypatch, fails
):
    from webapp.training import rollout_source

    _Source.made = []
    monkeypatch.setattr(rollout_source, "DBRolloutSource", _Source)
    if fails:
        fake_runner.fail_with = TrainingError("no rollouts came back")
    run = launch(
        algorithm="grpo", dataset_pin=None, suite=suite, config={"iterations": 3, "checkpoint_every": 1}
    )
    run_task(run)
    (source,) = _Source.made
    assert source.run.pk == run.pk and source.config["suite"] == "miniwob" and source.closed
    call = fake_runner.calls[0]
    assert call["source"] is source and call["examples"] is None
    assert run.status == ("failed" if fails else "finished")
