"""A Celery task through the real Redis broker, executed by a real worker process."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_results.models import TaskResult

from tests.procs import BIN, child_db_env, process
from webapp.celery import QUEUES, app
from webapp.sandboxes.models import Lease, Sandbox, SandboxHost
from webapp.sandboxes.tasks import leases_reap

pytestmark = [pytest.mark.slow]


def _overdue_lease() -> Lease:
    host = SandboxHost.objects.create(name="h", api_url="http://127.0.0.1:9/")
    sandbox = Sandbox.objects.create(
        host=host, external_id="s", provider="xdesktop", profile="p", state="leased"
    )
    past = timezone.now() - timedelta(minutes=5)
    return Lease.objects.create(
        sandbox=sandbox,
        holder="episode:1",
        acquired_at=past,
        heartbeat_at=past,
        expires_at=past + timedelta(seconds=30),
    )


def test_tasks_route_to_their_queues():
    routes = app.conf.task_routes
    assert set(QUEUES) == {"rollouts", "checks", "training", "sandboxes", "datasets", "interactive"}
    assert routes["webapp.annotation.tasks.*"] == {"queue": "interactive"}
    assert routes["webapp.training.tasks.*"] == {"queue": "training"}
    assert routes["webapp.sandboxes.tasks.*"] == {"queue": "sandboxes"}
    assert routes["webapp.policies.tasks.*"] == {"queue": "sandboxes"}
    assert routes["webapp.datasets.tasks.*"] == {"queue": "datasets"}
    assert app.conf.result_backend == "django-db"


def test_beat_schedule_names_registered_tasks():
    app.loader.import_default_modules()
    for entry in app.conf.beat_schedule.values():
        assert entry["task"] in app.tasks, entry["task"]
        json.dumps(entry.get("args", []))  # arguments must survive the JSON serializer


def test_lease_reaper_runs_on_a_real_worker_through_redis(transactional_db, tmp_path):
    lease = _overdue_lease()
    name = f"test-{uuid.uuid4().hex[:8]}@localhost"
    args = [str(BIN / "celery"), "-A", "webapp", "worker", "-Q", "sandboxes", "-n", name]
    args += ["--pool", "solo", "--without-gossip", "--without-mingle", "-l", "INFO"]

    def worker_answers() -> bool:
        return bool(app.control.ping(destination=[name], timeout=0.5))

    with process(args, ready=worker_answers, env=child_db_env(), log_path=tmp_path / "worker.log"):
        result = leases_reap.apply_async()
        assert result.get(timeout=60) == 1

    lease.refresh_from_db()
    assert lease.state == Lease.State.EXPIRED
    assert lease.sandbox.__class__.objects.get(pk=lease.sandbox_id).state == Sandbox.State.RESETTING
    stored = TaskResult.objects.get(task_id=result.id)
    assert stored.status == "SUCCESS" and stored.task_name == "webapp.sandboxes.tasks.leases_reap"
    assert "worker" in (tmp_path / "worker.log").read_text()
