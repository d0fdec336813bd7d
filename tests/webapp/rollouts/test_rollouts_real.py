"""Rollouts through the real thing: a sandbox host with desktops and browsers, Celery rollout workers
on the real Redis broker, the test database, and the built-in suites' oracles.

The full suites are checked task by task (oracle 1, do-nothing 0) in tests/sandbox_workers/
test_{desktop,miniwob}_suite.py; here a sample of each suite goes through the whole platform.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.test import override_settings

from agent_core.suites.miniwob import task_doc
from agent_core.tasks.spec import parse_task
from tests.procs import celery_worker, wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN, HostProc
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create, suite_load, task_create
from webapp.episodes.models import Episode, Step
from webapp.episodes.selectors import replay_steps
from webapp.policies.models import PolicyVersion
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.selectors import batch_progress
from webapp.rollouts.services import batch_create, rollouts_reap
from webapp.rollouts.verification import task_verify, verification_request
from webapp.sandboxes.models import Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROFILES = {
    "desktop": {**LIGHT_DESKTOP, "min_idle": 1, "max_total": 3},
    "browser": {"provider": "browser", "min_idle": 1, "max_total": 2},
}
# A sample of each suite: short oracles, different apps.
SAMPLE = {
    "miniwob": ["miniwob/click-button", "miniwob/enter-text"],
    "desktop": [
        "desktop/terminal/count-lines",
        "desktop/files/open-missing-report",
        "desktop/hybrid/mcp-ticket-into-form",  # an MCP tool's result entered through the GUI
    ],
    "games": ["games/memory"],  # scored 0..1 by the game's score (the reference player's is 1)
}
MCP_TASK = "desktop/hybrid/mcp-ticket-into-form"


def until(predicate, what: str, timeout: float = 240) -> None:
    assert wait_for(predicate, timeout=timeout, interval=0.3), f"timed out waiting for {what}"


def rollout_worker(tmp_path: Path, *, concurrency: int = 2, queues: str = "rollouts"):
    env = {"SANDBOX_HOST_TOKEN": TOKEN, "ROLLOUT_HEARTBEAT_SECONDS": "1", "ROLLOUT_LEASE_WAIT_SECONDS": "60"}
    return celery_worker(tmp_path, queues=queues, env=env, concurrency=concurrency)


@pytest.fixture
def host(live_server, tmp_path):
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        h = HostProc(
            name="rollout-host", var=tmp_path, profiles=PROFILES, web_url=live_server.url, slot_base=120
        )
        h.start()
        try:
            until(
                lambda: (
                    {"desktop", "browser"}
                    <= set(Sandbox.objects.filter(state="idle").values_list("profile", flat=True))
                ),
                "idle desktop and browser sandboxes",
            )
            yield h
        finally:
            h.stop()


@pytest.fixture
def sample_suite(host):
    """The sample tasks, verified on the real sandboxes (oracle 1, do-nothing 0) and so published."""
    for name in SAMPLE:
        suite_load(name=name)
    suite = suite_get_or_create(slug="sample", name="Sample of both suites")
    for slugs in SAMPLE.values():
        for task in Task.objects.filter(slug__in=slugs):
            result = task_verify(task=task, runs=1)
            assert result["ok"], (task.slug, result)
            suite.tasks.add(task)
    assert suite.tasks.filter(is_published=True).count() == sum(len(v) for v in SAMPLE.values())
    return suite


def wait_batch(batch: RolloutBatch, timeout: float = 400) -> None:
    until(
        lambda: RolloutBatch.objects.get(pk=batch.pk).status == RolloutBatch.Status.FINISHED,
        f"batch {batch.name} to finish",
        timeout=timeout,
    )


def test_oracle_scores_1_and_do_nothing_0_through_celery_workers(sample_suite, personas, tmp_path):
    oracle = PolicyVersion.objects.create(name="oracle", backend="oracle")
    noop = PolicyVersion.objects.create(name="noop", backend="noop")
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN), rollout_worker(tmp_path, concurrency=3):
        good = batch_create(suite=sample_suite, policy_version=oracle, episodes_per_task=1, concurrency=3,
                            created_by=personas.researcher)  # fmt: skip
        wait_batch(good)
        lazy = batch_create(suite=sample_suite, policy_version=noop, episodes_per_task=1, concurrency=3,
                            created_by=personas.researcher)  # fmt: skip
        wait_batch(lazy)
    n = sample_suite.tasks.count()
    for batch, want in ((good, 1.0), (lazy, 0.0)):
        episodes = Episode.objects.filter(batch=batch)
        assert episodes.count() == n
        wrong = [
            f"{e.task.slug}: {e.status}, reward {e.reward}, env_error {e.env_error}: {e.error}"
            for e in episodes
            if not (e.status == "finished" and e.reward == want and not e.env_error)
        ]
        # One line per wrong episode, in full (pytest cuts a long list short: the cause was lost).
        assert not wrong, f"{batch.name} (want reward {want}):\n" + "\n".join(wrong)
        assert batch_progress(batch=batch).finished == n
    steps = Step.objects.filter(episode__batch=good)
    assert steps.count() >= n
    for step in steps:
        assert step.screenshot and default_storage.exists(step.screenshot.name)
        assert step.action["type"] != "invalid"
    # Each episode keeps the screen after its last action (the result a reviewer judges).
    for episode in Episode.objects.filter(batch__in=[good, lazy]):
        assert episode.final_screenshot and default_storage.exists(episode.final_screenshot.name), episode
        assert episode.final_screen_width and episode.final_screen_height
    # Episodic memory: every oracle episode left a summary the next ones of its family can recall.
    assert all("succeeded" in e.summary for e in Episode.objects.filter(batch=good))
    # The hybrid task's tool call ran in the sandbox: its result is on the step and in the replay.
    mcp_episode = Episode.objects.get(batch=good, task__slug=MCP_TASK)
    calls = [s for s in mcp_episode.steps.order_by("index") if s.action["type"] == "mcp_call"]
    assert calls and all(s.info["result"]["content"] and not s.info["result"]["is_error"] for s in calls)
    replayed = [r for r in replay_steps(episode=mcp_episode) if r.get("result")]
    assert [r["result"]["tool"] for r in replayed] == [s.action["tool"] for s in calls]
    assert mcp_episode.prepared["tools"] and {t["server"] for t in mcp_episode.prepared["tools"]} == set(
        parse_task(mcp_episode.task.spec).mcp
    )
    game = Episode.objects.get(batch=good, task__slug="games/memory")
    assert game.check_details and game.check_details[0]["metric"] == "game_score", game.check_details
    _sft_export_teaches_real_thoughts(good, tmp_path)


def _sft_export_teaches_real_thoughts(batch: RolloutBatch, tmp_path: Path) -> None:
    """A round routes the oracle episodes into flywheel-sft; its SFT export teaches every step with
    the oracle's own thought about that task instance, never a stand-in like "oracle step 3"."""
    import json
    import re

    from agent_core.thoughts import is_placeholder_thought
    from webapp.datasets import exports
    from webapp.datasets.models import DatasetVersion
    from webapp.datasets.rounds import SFT_DATASET, flywheel_round_close

    with override_settings(EXPORTS_DIR=tmp_path / "exports"):
        flywheel_round_close()
        version = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=1)
        assert set(version.memberships.values_list("episode_id", flat=True)) >= set(
            Episode.objects.filter(batch=batch).values_list("pk", flat=True)
        )
        export = exports.export_run(
            export_id=exports.export_create(version=version, kind="sft", fmt="jsonl").pk
        )
        assert export is not None and export.status == "finished", export and export.error
        root = exports.export_root(export=export)
        records = [json.loads(line) for f in sorted((root / "data").glob("*.jsonl")) for line in f.open()]
    assert records and export.manifest["placeholder_thoughts"] == 0
    said = [
        part["text"]
        for r in records
        for m in r["messages"]
        if m["role"] == "assistant"
        for part in m["content"]
        if part["type"] == "text"
    ]
    thoughts = [re.match(r"Thought: (.*?)\nAction:", t, re.S) for t in said]
    assert all(thoughts), [t for t, m in zip(said, thoughts, strict=True) if not m][:3]
    assert not [m.group(1) for m in thoughts if m and is_placeholder_thought(m.group(1))]
    assert not any("oracle step" in t for t in said)
    # The MCP task's records: its tools in the system prompt, each tool's result before the next screen.
    mcp = [r for r in records if r["task"] == MCP_TASK]
    assert mcp and all("mcp_call" in r["messages"][0]["content"][0]["text"] for r in mcp)
    user_texts = [p["text"] for m in mcp[-1]["messages"][2:] if m["role"] == "user" for p in m["content"]
                  if p["type"] == "text"]  # fmt: skip
    assert any(t.startswith("Tool result of ") for t in user_texts), user_texts


def test_worker_killed_mid_episode_is_rerun_elsewhere_and_counted_once(host, personas, tmp_path):
    suite_load(name="desktop")
    task = Task.objects.get(slug="desktop/terminal/count-lines")
    assert task_verify(task=task, runs=1)["ok"]
    suite = suite_get_or_create(slug="one", name="One task")
    suite.tasks.add(task)
    # A thinking oracle: the episode lasts long enough to be caught in the middle.
    oracle = PolicyVersion.objects.create(name="slow-oracle", backend="oracle", config={"think_s": 2.0})
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN, ROLLOUT_STALE_SECONDS=4):
        with rollout_worker(tmp_path, concurrency=1) as doomed:
            batch = batch_create(suite=suite, policy_version=oracle, episodes_per_task=1, concurrency=1,
                                 created_by=personas.researcher)  # fmt: skip
            first = Episode.objects.get(batch=batch)
            until(lambda: Step.objects.filter(episode=first).exists(), "the first step")
            os.killpg(doomed.pid, signal.SIGKILL)  # the machine is gone: no clean shutdown, no ack
            doomed.wait(timeout=30)
        assert Episode.objects.get(pk=first.pk).status == "running"
        with rollout_worker(tmp_path, concurrency=1):
            until(lambda: rollouts_reap()["reaped"] == 1 or Episode.objects.get(pk=first.pk).is_done,
                  "the reaper to notice the silent worker", timeout=60)  # fmt: skip
            wait_batch(batch)
    first.refresh_from_db()
    assert first.status == "failed" and first.env_error and first.reward is None
    retry = Episode.objects.get(retry_of=first)
    assert retry.status == "finished" and retry.reward == 1.0 and retry.attempt == 2
    assert Episode.objects.filter(batch=batch).count() == 2
    progress = batch_progress(batch=batch)
    assert (progress.total, progress.finished, progress.successes) == (1, 1, 1)
    # The dead worker's episode can never be finished late: it is no longer running.
    assert rollouts_reap() == {"reaped": 0, "requeued": 0}


def test_a_check_started_before_any_host_is_up_waits_for_one_and_passes(live_server, tmp_path):
    # The first start of `make run`: checks are enqueued while the host is still warming its pools.
    task = task_create(slug="miniwob/click-button", title="MiniWoB++ click-button",
                       instruction="{{start.utterance}}", platform="browser", env_profile="browser",
                       spec=task_doc("click-button", oracle=True))  # fmt: skip
    # The catalog's checks have a queue of their own (webapp.celery): a worker on it, as make run has.
    with (
        override_settings(SANDBOX_HOST_TOKEN=TOKEN),
        rollout_worker(tmp_path, concurrency=1, queues="checks"),
    ):
        verification_request(task=task, runs=1)
        status = lambda: Task.objects.get(pk=task.pk).verification_status  # noqa: E731
        until(lambda: status() == "waiting", "the check to find no host")
        task.refresh_from_db()
        assert "no live host serves this profile" in task.verification_reason and not task.is_published
        host = HostProc(name="late-host", var=tmp_path, profiles={"browser": PROFILES["browser"]},
                        web_url=live_server.url, slot_base=130)  # fmt: skip
        host.start()
        try:
            until(lambda: status() == "passed", "the retried check")
        finally:
            host.stop()
    task.refresh_from_db()
    assert task.is_published and task.verification["oracle"] == [1.0] and task.verification["noop"] == [0.0]
