"""A real SFT run of a tiny model on a real Celery `training` worker, killed with SIGKILL after its first
checkpoint: the reaper queues it again and a new worker resumes it from that checkpoint to the end."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from tests.procs import BIN, child_db_env, process, wait_for
from webapp.celery import app
from webapp.policies.models import PolicyVersion
from webapp.training.models import MetricPoint, TrainingRun
from webapp.training.selectors import run_log_tail
from webapp.training.services import training_run_launch, training_runs_reap

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MAX_STEPS = 30


@contextmanager
def training_worker(tmp_path: Path, label: str) -> Iterator[object]:
    """A Celery worker on queue `training` sharing this test's database, var dir and media."""
    name = f"training-{label}-{uuid.uuid4().hex[:6]}@localhost"
    args = [str(BIN / "celery"), "-A", "webapp", "worker", "-Q", "training", "-n", name, "--pool", "solo"]
    args += ["--without-gossip", "--without-mingle", "-l", "INFO"]
    env = {
        **child_db_env(),
        "FLYWHEEL_VAR_DIR": str(settings.VAR_DIR),
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "OMP_NUM_THREADS": "1",  # a tiny model on a shared machine: one thread is faster
    }
    with process(
        args,
        ready=lambda: bool(app.control.ping(destination=[name], timeout=0.5)),
        env=env,
        log_path=tmp_path / f"worker-{label}.log",
        timeout=90,
    ) as proc:
        yield proc


def test_a_worker_killed_with_sigkill_resumes_from_its_last_checkpoint(
    tmp_path, personas, sft_version, settings
):
    from agent_core.tiny_models import build_tiny_causal_lm

    model = build_tiny_causal_lm(tmp_path / "tiny-base", seed=1)
    base = PolicyVersion.objects.create(name="tiny-lm", backend="local", model_name=str(model))
    config = {
        "max_steps": MAX_STEPS,
        "checkpoint_every": 5,
        "batch_size": 2,
        "device": "cpu",
        "max_seq_len": 512,
    }

    with training_worker(tmp_path, "first") as first:
        run = training_run_launch(
            algorithm="sft",
            name="killed and resumed",
            config=config,
            created_by=personas.admin,
            dataset_pin=f"{sft_version.dataset.name}@v{sft_version.number}",
            base_policy=base,
            suite=None,
        )
        saved = wait_for(lambda: run.checkpoints.exists(), timeout=180, interval=0.02)
        os.killpg(first.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        first.wait()  # type: ignore[attr-defined]
        assert saved, f"no checkpoint after 180 s: {run_log_tail(run=run)[-5:]}"

    run.refresh_from_db()
    assert run.status == "running" and run.attempt == 1, "the run ended before the worker was killed"
    killed_at = run.step
    assert killed_at < MAX_STEPS
    last_saved = max(run.checkpoints.values_list("step", flat=True))

    with override_settings(TRAINING_STALE_S=2):
        time.sleep(3)  # the dead worker's heartbeat goes stale
        with training_worker(tmp_path, "second"):
            assert training_runs_reap() == {"requeued": 1, "failed": 0, "cancelled": 0}
            done = wait_for(
                lambda: TrainingRun.objects.filter(pk=run.pk, status__in=["finished", "failed"]).exists(),
                timeout=300,
                interval=0.5,
            )
            assert done, f"the resumed run did not end: {run_log_tail(run=run)[-5:]}"

    run.refresh_from_db()
    assert (run.status, run.error) == ("finished", "")
    assert (run.step, run.attempt) == (MAX_STEPS, 2)
    log = "\n".join(run_log_tail(run=run, lines=2000))
    assert f"resuming from checkpoint step-{last_saved:06d}" in log
    assert f"resumed from step-{last_saved:06d} (step {last_saved})" in log
    assert "queued again, resumes from its last checkpoint" in log
    # The steps the dead attempt took after its last checkpoint were trained (and logged) once more.
    steps = list(MetricPoint.objects.filter(run=run, name="train/loss").values_list("step", flat=True))
    assert sorted(steps) == list(range(1, MAX_STEPS + 1))
    assert max(run.checkpoints.values_list("step", flat=True)) == MAX_STEPS
    assert (
        settings.VAR_DIR / run.out_dir / "checkpoints" / f"step-{MAX_STEPS:06d}" / "config.json"
    ).is_file()
    print(f"killed at step {killed_at}, resumed from {last_saved}, finished at {run.step}")
