"""The workers `make run` and docker-compose start: every queue has one, the work a person waits on
(a demonstration's sandbox) and the reapers never share a worker with agents' episodes or bulk work, and
a researcher's batch, a round or an export never waits behind the catalog's checks (issue 34: a batch
waited 28.8 minutes behind about 120 of them on the same queue)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from webapp.celery import HUMAN_QUEUES, QUEUES, app

ROOT = Path(__file__).resolve().parents[3]
LONG_QUEUES = {"rollouts", "checks", "datasets", "training"}  # minutes to hours of work per message
# Work that must start on an idle worker at once, whatever bulk work is queued: a queue → the queues its
# workers may serve beside it (none: a worker of its own).
NEVER_BEHIND_BULK = {"rollouts": set(), "checks": set(), "datasets": set()}


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


@pytest.mark.parametrize("where", LAYOUTS)
def test_batches_checks_and_datasets_each_have_workers_of_their_own(where):
    workers = LAYOUTS[where]()
    for queue, beside in NEVER_BEHIND_BULK.items():
        serving = {name: set(queues) for name, queues in workers.items() if queue in queues}
        assert serving, f"no worker serves {queue} on {where}"
        for name, queues in serving.items():
            assert queues - {queue} <= beside, f"{queue} shares {name} with {queues - {queue}} on {where}"


def test_each_kind_of_work_goes_to_its_own_queue():
    assert queue_of("webapp.rollouts.tasks.episode_rollout") == "rollouts"
    assert queue_of("webapp.rollouts.tasks.task_verify_run") == "checks"
    for task in ("flywheel_round_task", "dataset_export_task"):
        assert queue_of(f"webapp.datasets.tasks.{task}") == "datasets"
    assert queue_of("webapp.training.tasks.policy_merge_task") == "datasets"
    assert queue_of("webapp.rollouts.tasks.rollouts_reap") == "sandboxes"


def test_a_worker_reserves_only_what_it_runs():
    # One message per process, acknowledged when done: an idle worker can start what a busy one would
    # otherwise hold in reserve (and a worker killed mid-task leaves its message for another).
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_acks_late is True and app.conf.task_reject_on_worker_lost is True


def test_the_rollouts_queue_holds_agents_episodes_only():
    # An episode given back to wait for a sandbox goes to the back of this queue: nothing but other
    # agents' episodes may be in front of it (issue 34: each later pair went behind ~120 checks again).
    app.loader.import_default_modules()
    ours = [name for name in app.tasks if name.startswith("webapp.")]
    assert {name for name in ours if queue_of(name) == "rollouts"} == {
        "webapp.rollouts.tasks.episode_rollout"
    }
