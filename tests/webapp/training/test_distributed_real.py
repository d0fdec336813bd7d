"""A real Celery `training` worker runs an SFT run with `processes: 2` under torchrun (gloo on CPU): one of
its ranks is killed with SIGKILL after the first checkpoint, the run goes back to the queue, and the next
attempt resumes from that checkpoint under torchrun again and finishes; rank 0's reports reach the database
once per step."""

from __future__ import annotations

import os
import signal

import pytest

from tests.procs import wait_for
from tests.webapp.training.test_worker_real import training_worker
from webapp.policies.models import PolicyVersion
from webapp.training.models import MetricPoint, TrainingRun
from webapp.training.multiproc import JOB_FOLDER
from webapp.training.selectors import run_log_tail
from webapp.training.services import training_run_launch

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MAX_STEPS = 8


def test_a_two_process_run_loses_a_rank_and_resumes_to_the_end(tmp_path, personas, sft_version, settings):
    from agent_core.tiny_models import build_tiny_causal_lm

    model = build_tiny_causal_lm(tmp_path / "tiny-base", seed=1)
    base = PolicyVersion.objects.create(name="tiny-lm", backend="local", model_name=str(model))
    config = {"max_steps": MAX_STEPS, "checkpoint_every": 2, "batch_size": 2, "processes": 2}
    config |= {"device": "cpu", "max_seq_len": 512}

    with training_worker(tmp_path, "torchrun"):
        run = training_run_launch(
            algorithm="sft",
            name="two processes",
            config=config,
            created_by=personas.admin,
            dataset_pin=f"{sft_version.dataset.name}@v{sft_version.number}",
            base_policy=base,
            suite=None,
        )
        rank_1 = settings.VAR_DIR / run.out_dir / JOB_FOLDER / "attempt-1" / "rank-1.pid"
        saved = wait_for(lambda: run.checkpoints.exists() and rank_1.is_file(), timeout=240, interval=0.05)
        assert saved, f"no checkpoint after 240 s: {run_log_tail(run=run)[-5:]}"
        os.kill(int(rank_1.read_text()), signal.SIGKILL)
        done = wait_for(
            lambda: TrainingRun.objects.filter(pk=run.pk, status__in=["finished", "failed"]).exists(),
            timeout=300,
            interval=0.5,
        )
        assert done, f"the run did not end: {run_log_tail(run=run)[-5:]}"

    run.refresh_from_db()
    log = "\n".join(run_log_tail(run=run, lines=2000))
    assert (run.status, run.error, run.step, run.attempt) == ("finished", "", MAX_STEPS, 2), log[-3000:]
    assert "launching 2 training processes" in log and "x 2 processes" in log
    assert "attempt 1 lost a training process" in log and "queued again" in log
    assert "resuming from checkpoint step-" in log
    # Rank 0 alone reported: one point per step (the lost attempt's steps after its checkpoint redone).
    steps = list(MetricPoint.objects.filter(run=run, name="train/loss").values_list("step", flat=True))
    assert sorted(steps) == list(range(1, MAX_STEPS + 1))
    assert sorted(run.checkpoints.values_list("step", flat=True))[-1] == MAX_STEPS
    last = settings.VAR_DIR / run.out_dir / "checkpoints" / f"step-{MAX_STEPS:06d}"
    assert (last / "config.json").is_file()
    assert (settings.VAR_DIR / run.out_dir / JOB_FOLDER / "attempt-2" / "torchrun.log").is_file()
