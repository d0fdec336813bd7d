"""The Celery app: queues `rollouts`, `checks`, `training`, `sandboxes`, `datasets`, `interactive`;
results in the db; beat.

Workers are laid out so that nobody waits behind longer work of another kind (scripts/run.sh and
docker-compose.yml start them, tests/webapp/infra/test_worker_layout.py holds them to it):
`interactive` (a person waiting for a demonstration's sandbox) and `sandboxes` (short upkeep: reapers,
sandbox host and policy server checks) on one worker that agents never occupy; `rollouts` (a
researcher's agent episodes, and only those) on another; `checks` (the catalog's publication checks:
about 120 on a first start, each several episodes long) on a worker of its own, so a batch launched
meanwhile starts at once on an idle rollout worker; `datasets` (rounds, exports, merges: a person waits
for them) on its own, behind neither checks nor rollouts; `training` alone.

Within a queue, order is first come first served: a worker reserves no more messages than it runs
(`worker_prefetch_multiplier` 1 with late acks, webapp.settings), so one worker never hoards a backlog
that an idle one could have started.
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")

QUEUES = ("rollouts", "checks", "training", "sandboxes", "datasets", "interactive")
# The queues whose work a person waits on; the workers that serve them serve no agent or bulk work.
HUMAN_QUEUES = ("interactive",)
app.conf.task_queues = [Queue(name) for name in QUEUES]
app.conf.task_default_queue = "rollouts"
# Routing by app keeps training jobs (long, one per worker) away from rollouts and pool upkeep.
app.conf.task_routes = {
    # A training worker runs one job for hours: its reaper runs where work is short.
    "webapp.training.tasks.training_runs_reap": {"queue": "sandboxes"},
    # A merge of checkpoints is file work of minutes: it must not wait behind a run of hours.
    "webapp.training.tasks.policy_merge_task": {"queue": "datasets"},
    "webapp.training.tasks.*": {"queue": "training"},
    "webapp.sandboxes.tasks.*": {"queue": "sandboxes"},
    # Policy-server upkeep (the check for silent servers): short, beside the sandbox host check.
    "webapp.policies.tasks.*": {"queue": "sandboxes"},
    # Tasks' difficulty statistics: short upkeep, beside the reapers.
    "webapp.episodes.tasks.task_stats_rollup": {"queue": "sandboxes"},
    "webapp.dashboards.tasks.*": {"queue": "sandboxes"},
    # A person is waiting for a demonstration's sandbox: a queue of its own, never busy with episodes.
    "webapp.annotation.tasks.*": {"queue": "interactive"},
    "webapp.episodes.tasks.*": {"queue": "rollouts"},
    # Flywheel rounds and exports read whole dataset versions: their own queue, so a long export
    # never delays a sandbox lease or a rollout.
    "webapp.datasets.tasks.*": {"queue": "datasets"},
    # The reaper must run even when every rollout worker is busy with long episodes.
    "webapp.rollouts.tasks.rollouts_reap": {"queue": "sandboxes"},
    # Catalog checks are bulk work (every task of every suite on a first start): a queue of their own,
    # so a researcher's episodes never wait behind them, nor they behind a batch.
    "webapp.rollouts.tasks.task_verify_run": {"queue": "checks"},
    "webapp.rollouts.tasks.*": {"queue": "rollouts"},
}
app.conf.beat_schedule = {
    "reap-expired-leases": {"task": "webapp.sandboxes.tasks.leases_reap", "schedule": 10.0},
    "check-sandbox-hosts": {"task": "webapp.sandboxes.tasks.hosts_check", "schedule": 10.0},
    "check-policy-servers": {"task": "webapp.policies.tasks.servers_check", "schedule": 10.0},
    "reap-lost-rollouts": {"task": "webapp.rollouts.tasks.rollouts_reap", "schedule": 10.0},
    "reap-lost-demonstrations": {"task": "webapp.annotation.tasks.demos_reap_task", "schedule": 30.0},
    "reap-lost-exports": {"task": "webapp.datasets.tasks.exports_reap_task", "schedule": 60.0},
    "roll-up-task-stats": {"task": "webapp.episodes.tasks.task_stats_rollup", "schedule": 60.0},
    "sample-env-health": {"task": "webapp.dashboards.tasks.health_sample", "schedule": 30.0},
    "reap-lost-training-runs": {"task": "webapp.training.tasks.training_runs_reap", "schedule": 30.0},
}
app.autodiscover_tasks()
