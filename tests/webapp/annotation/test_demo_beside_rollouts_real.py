"""A demonstration starts while a rollout batch fills every agent slot: Celery workers laid out as
`make run` starts them (queues and concurrency read from scripts/run.sh), a real desktop host, and a
batch of slow oracle episodes that keeps the rollout worker busy throughout."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.conftest import Personas
from tests.procs import BIN, child_db_env, process, wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN
from tests.webapp.annotation.conftest import note_task, registered_host
from tests.webapp.infra.test_worker_layout import run_sh_workers
from webapp.annotation.services import demo_start
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create, suite_load
from webapp.celery import app
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.services import batch_cancel, batch_create

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@contextmanager
def worker(tmp_path: Path, label: str, queues: list[str], concurrency: int) -> Iterator[Any]:
    name = f"{label}-{uuid.uuid4().hex[:8]}@localhost"
    args = [str(BIN / "celery"), "-A", "webapp", "worker", "-Q", ",".join(queues), "-n", name]
    args += ["--pool", "threads", "--concurrency", str(concurrency), "--without-gossip", "--without-mingle"]
    env = {**child_db_env(), "SANDBOX_HOST_TOKEN": TOKEN, "ROLLOUT_LEASE_WAIT_SECONDS": "60"}
    with process(args + ["-l", "INFO"], ready=lambda: bool(app.control.ping(destination=[name], timeout=0.5)),
                 env=env, log_path=tmp_path / f"{label}.log", timeout=90) as proc:  # fmt: skip
        yield proc


def test_a_demonstration_starts_while_a_rollout_batch_fills_the_agent_workers(
    live_server: Any, tmp_path: Path, personas: Personas
) -> None:
    workers = {n: w for n, w in run_sh_workers().items() if "training" not in w[0]}
    agent_slots = next(c for queues, c in workers.values() if "rollouts" in queues)
    spec = {**LIGHT_DESKTOP, "min_idle": agent_slots + 1, "max_total": agent_slots + 1}
    suite_load(name="desktop")
    Task.objects.filter(slug="desktop/terminal/count-lines").update(is_published=True)
    suite = suite_get_or_create(slug="busy", name="Busy")
    suite.tasks.add(Task.objects.get(slug="desktop/terminal/count-lines"))
    # An oracle that thinks a minute before each action: its episodes outlast the demonstration's start.
    slow = PolicyVersion.objects.create(name="slow-oracle", backend="oracle", config={"think_s": 60.0})
    with (
        registered_host(live_server, tmp_path, name="busy-host", profile="desktop", spec=spec, slot_base=240),
        override_settings(SANDBOX_HOST_TOKEN=TOKEN),
        ExitStack() as stack,
    ):
        for label, (queues, concurrency) in workers.items():
            stack.enter_context(worker(tmp_path, label, queues, concurrency))
        batch = batch_create(suite=suite, policy_version=slow, seeds=list(range(agent_slots + 2)),
                             concurrency=agent_slots + 2, created_by=personas.researcher)  # fmt: skip
        rollouts = Episode.objects.filter(batch=batch)
        started = rollouts.filter(status="running", sandbox__isnull=False)
        assert wait_for(lambda: started.count() == agent_slots, timeout=120, interval=0.3), "never filled up"
        demo = demo_start(task=note_task(), annotator=personas.annotator)
        ready = wait_for(lambda: Episode.objects.filter(pk=demo.pk, status="running", prepared__isnull=False)
                         .exclude(prepared={}).exists(), timeout=120, interval=0.3)  # fmt: skip
        busy = list(rollouts.values_list("status", flat=True))
        batch_cancel(batch=batch)
    demo.refresh_from_db()
    assert ready, (demo.status, demo.error)
    # It did not wait for an agent's slot: every slot was still busy with a rollout episode.
    assert busy.count("running") == agent_slots and "finished" not in busy, busy
