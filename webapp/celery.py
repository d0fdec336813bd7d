"""The Celery app: queues `rollouts`, `training`, `sandboxes`, `datasets`, `interactive`; results in the
db; beat.

Workers are laid out so that nobody waits behind longer work of another kind (scripts/run.sh and
docker-compose.yml start them): `interactive` (a person waiting for a demonstration's sandbox) and
`sandboxes` (short upkeep: reapers, sandbox host and policy server checks) on one worker that agents
never occupy; `rollouts` (agent episodes, task checks) and `datasets` (rounds, exports, merges) on
another; `training` alone.
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")

QUEUES = ("rollouts", "training", "sandboxes", "datasets", "interactive")
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
