"""Policy servers through the real thing: two policy servers (the serving agent under vLLM's own python,
each starting a real vLLM engine on the tiny policy) register with the web app; a rollout batch runs on
them through a Celery rollout worker and a real browser sandbox; one server is killed with -9 mid-batch.

Its requests move to the other server (the policy's failover) or their episodes end as environment
errors and re-run; every task instance is counted once; the killed server goes offline on the page.
"""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from tests.agent_core.serving.vllm_proc import policy_server
from tests.procs import celery_worker, wait_for
from tests.sandbox_workers.hostproc import TOKEN, HostProc
from webapp.catalog.models import Task
from webapp.catalog.services import suite_load
from webapp.episodes.models import Episode, Step
from webapp.policies.models import PolicyServer, PolicyVersion
from webapp.policies.services import servers_mark_offline
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.services import batch_create
from webapp.sandboxes.models import Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.django_db(transaction=True)]
pytest.importorskip("transformers")

TASK = "miniwob/click-test"
PTOKEN = "policy-server-token-for-real-tests-0123"


def until(predicate, what: str, timeout: float = 300) -> None:
    assert wait_for(predicate, timeout=timeout, interval=0.3), f"timed out waiting for {what}"


def rollout_worker(tmp_path: Path):
    env = {
        "SANDBOX_HOST_TOKEN": TOKEN,
        "ROLLOUT_HEARTBEAT_SECONDS": "1",
        "ROLLOUT_LEASE_WAIT_SECONDS": "60",
        "POLICY_SERVER_GRACE_S": "5",
        "FLYWHEEL_VAR_DIR": str(settings.VAR_DIR),
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
    }
    return celery_worker(tmp_path, queues="rollouts", env=env)


@pytest.fixture
def host(live_server, tmp_path):
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        profiles = {"browser": {"provider": "browser", "min_idle": 2, "max_total": 2}}
        h = HostProc(name="srv-host", var=tmp_path, profiles=profiles, web_url=live_server.url, slot_base=260)
        h.start()
        try:
            until(lambda: Sandbox.objects.filter(state="idle", profile="browser").exists(), "an idle browser")
            yield h
        finally:
            h.stop()


def online(name: str) -> bool:
    return PolicyServer.objects.filter(name=name, status="online").exists()


@override_settings(POLICY_SERVER_TOKEN=PTOKEN, POLICY_SERVER_GRACE_S=5)
def test_a_server_killed_mid_batch_hands_its_requests_over_and_shows_offline(
    host, live_server, personas, tmp_path, client
):
    suite_load(name="miniwob")
    # Published by hand: its oracle check runs in tests/webapp/rollouts/test_rollouts_real.py.
    Task.objects.filter(slug=TASK).update(is_published=True)
    call_command("tiny_policy", "--name", "tiny-srv", "--served", stdout=(out := io.StringIO()))
    assert "tiny-srv-served registered" in out.getvalue()
    served = PolicyVersion.objects.get(name="tiny-srv-served")
    model = PolicyVersion.objects.get(name="tiny-srv").model_dir()
    assert model is not None
    common = {"model": model, "served_name": "tiny-srv", "web_url": live_server.url, "token": PTOKEN}
    with (
        policy_server(name="srv-a", log_dir=tmp_path, **common) as a,
        policy_server(name="srv-b", log_dir=tmp_path, **common),
    ):
        until(lambda: online("srv-a") and online("srv-b"), "both policy servers serving")
        url_a = PolicyServer.objects.get(name="srv-a").api_url
        url_b = PolicyServer.objects.get(name="srv-b").api_url
        with rollout_worker(tmp_path):
            batch = batch_create(
                suite=served_suite(),
                policy_version=served,
                tasks=Task.objects.filter(slug=TASK),
                seeds=list(range(6)),
                concurrency=2,
                created_by=personas.researcher,
                config={"max_steps": 3, "history_images": 1},
            )
            until(
                lambda: Step.objects.filter(episode__batch=batch, info__server=url_a).exists(),
                "srv-a to answer",
            )
            os.killpg(a.pid, signal.SIGKILL)  # the agent; its engine dies with it (PR_SET_PDEATHSIG)
            killed_at = time.time()
            until(
                lambda: RolloutBatch.objects.get(pk=batch.pk).status == RolloutBatch.Status.FINISHED,
                "the batch to finish",
                timeout=400,
            )

        episodes = list(Episode.objects.filter(batch=batch))
        good = [e for e in episodes if e.status == "finished" and not e.env_error]
        # Every instance counted once: one usable episode per seed, the rest re-run env errors.
        assert sorted(e.seed for e in good) == list(range(6)), [(e.seed, e.status, e.error) for e in episodes]
        for e in episodes:
            if e not in good:
                assert e.env_error and Episode.objects.filter(retry_of=e).exists(), e.error
        steps = Step.objects.filter(episode__in=good)
        servers = set(steps.values_list("info__server", flat=True))
        assert servers <= {url_a, url_b} and url_b in servers
        late = steps.filter(acted_at__gt=_dt(killed_at + 2))
        assert late.exists() and set(late.values_list("info__server", flat=True)) == {url_b}
        assert set(steps.values_list("info__model", flat=True)) == {"tiny-srv"}

        # Silent past its grace: offline, on the page too; the other one serves on.
        until(lambda: servers_mark_offline() >= 0 and not online("srv-a"), "srv-a offline", timeout=30)
        assert online("srv-b")
        client.force_login(personas.researcher)
        page = client.get("/policies/servers/").content.decode()
        row = page.split('data-server="srv-a"')[1].split("</tr>")[0]
        assert 'data-status="offline"' in row


def served_suite():
    from webapp.catalog.models import TaskSuite

    return TaskSuite.objects.get(slug="miniwob")


def _dt(epoch: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, tz=UTC)
