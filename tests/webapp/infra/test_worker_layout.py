"""The workers `make run` and docker-compose start: every queue has one, and the work a person waits on
(a demonstration's sandbox) and the reapers never share a worker with agents' episodes or bulk work."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from webapp.celery import HUMAN_QUEUES, QUEUES, app

ROOT = Path(__file__).resolve().parents[3]
LONG_QUEUES = {"rollouts", "datasets", "training"}  # episodes, exports and training runs: minutes to hours


def run_sh_workers() -> dict[str, tuple[list[str], int]]:
    """Worker name → (queues, concurrency) as scripts/run.sh starts them."""
    workers = {}
    for line in (ROOT / "scripts" / "run.sh").read_text().splitlines():
        if not line.startswith("start worker-"):
            continue
        args = shlex.split(line)
        workers[args[1]] = (args[args.index("-Q") + 1].split(","), int(args[args.index("--concurrency") + 1]))
    return workers


def compose_workers() -> dict[str, list[str]]:
    """Service name → queues, for docker-compose.yml's Celery workers."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return {
        name: service["command"][service["command"].index("-Q") + 1].split(",")
        for name, service in services.items()
        if "worker" in service.get("command", [])
    }


def queue_of(task_name: str) -> str:
    app.loader.import_default_modules()
    return str(app.amqp.router.route({}, task_name)["queue"].name)


LAYOUTS = {
    "run.sh": lambda: {name: queues for name, (queues, _) in run_sh_workers().items()},
    "docker-compose.yml": compose_workers,
}


@pytest.mark.parametrize("where", LAYOUTS)
def test_every_queue_has_a_worker(where):
    workers = LAYOUTS[where]()
    assert {q for queues in workers.values() for q in queues} == set(QUEUES), workers


@pytest.mark.parametrize("where", LAYOUTS)
def test_people_and_reapers_never_wait_behind_agents(where):
    workers = LAYOUTS[where]()
    demo = "webapp.annotation.tasks.demo_prepare_task"
    assert queue_of(demo) in HUMAN_QUEUES
    reapers = ("webapp.rollouts.tasks.rollouts_reap", "webapp.sandboxes.tasks.leases_reap")
    for task in (demo, *reapers, "webapp.policies.tasks.servers_check"):
        queue = queue_of(task)
        serving = {name: queues for name, queues in workers.items() if queue in queues}
        assert serving, (task, workers)
        for name, queues in serving.items():
            assert not LONG_QUEUES & set(queues), f"{task} waits behind {queues} on {where}'s {name}"
