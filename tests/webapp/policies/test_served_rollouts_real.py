"""The inference engine through the whole platform, every part real: a tiny Qwen2.5-VL (the architecture
of UI-TARS-1.5 and Qwen2.5-VL, reading the screenshots, up to three earlier ones in its prompt), taught the
task by SFT on the screenshots of oracle rollouts, is served by two real vLLM engines (policy servers
under the serving agent, which sizes the engine for the screenshots) with the images; a rollout batch
runs on them through Celery rollout workers and real Chromium sandboxes; a LoRA GRPO run (a real
`training` worker) trains on rollouts the engines sampled, with their token ids and logprobs, scored
with the same screenshots, each published policy hot-loaded into the running engines; its last
checkpoint is promoted while a second batch that follows the policy's line is running, and that batch's
later episodes are answered by the promoted adapter (recorded per step), with no episode lost or failed
by the switch. Last, one server is killed with -9 mid-batch: its requests move to the other (or their
episodes re-run), every task instance is counted once, and the page shows it offline.
"""

from __future__ import annotations

import io
import os
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from tests.agent_core.serving.vllm_proc import policy_server
from tests.e2e.platform import site_with_host
from tests.procs import celery_worker, wait_for
from tests.sandbox_workers.hostproc import TOKEN
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create, suite_load
from webapp.datasets.rounds import flywheel_round_close
from webapp.episodes.models import Episode, Step
from webapp.policies.models import PolicyServer, PolicyVersion
from webapp.policies.services import served_twin_create, servers_mark_offline
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.services import batch_create
from webapp.sandboxes.models import Sandbox
from webapp.training.models import Checkpoint, MetricPoint, TrainingRun
from webapp.training.promotion import checkpoint_promote
from webapp.training.services import training_run_launch

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

TASK = "miniwob/click-test"
PTOKEN = "policy-server-token-for-real-tests-0123"


def until(predicate, what: str, timeout: float = 300) -> None:
    assert wait_for(predicate, timeout=timeout, interval=0.3), f"timed out waiting for {what}"


@pytest.fixture
def platform(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """daphne (taking policy-server heartbeats), a rollouts/datasets worker, a browser host and a
    `training` worker, all resolving model directories where this test does."""
    shared = {
        "FLYWHEEL_VAR_DIR": str(settings.VAR_DIR),
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "ROLLOUT_HEARTBEAT_SECONDS": "1",
        "ROLLOUT_LEASE_WAIT_SECONDS": "90",
        "POLICY_SERVER_TOKEN": PTOKEN,
        "POLICY_SERVER_GRACE_S": "10",
        "OMP_NUM_THREADS": "1",
    }
    with (
        override_settings(SANDBOX_HOST_TOKEN=TOKEN, POLICY_SERVER_GRACE_S=10),
        site_with_host(
            tmp_path,
            host_name="served-host",
            profiles={"browser": {"provider": "browser", "min_idle": 2, "max_total": 2}},
            slot_base=280,
            queues="rollouts,sandboxes,datasets",
            concurrency=2,
            env=shared,
            ready=lambda host: Sandbox.objects.filter(state="idle", profile="browser").count() >= 2,
        ) as (url, _),
        celery_worker(
            tmp_path,
            queues="training",
            pool="solo",
            label="served-training",
            env={"SANDBOX_HOST_TOKEN": TOKEN, **shared},
        ),
    ):
        yield url


def finished(batch: RolloutBatch, timeout: float = 600) -> None:
    until(lambda: RolloutBatch.objects.get(pk=batch.pk).status == "finished", f"batch {batch.name}", timeout)


def run_done(run: TrainingRun, timeout: float = 900) -> TrainingRun:
    until(
        lambda: TrainingRun.objects.get(pk=run.pk).status in ("finished", "failed"),
        f"run {run.name}",
        timeout,
    )
    run.refresh_from_db()
    assert run.status == "finished", run.error
    return run


def online(name: str) -> bool:
    return PolicyServer.objects.filter(name=name, status="online").exists()


def turns(steps) -> list[Step]:
    """The steps that began a policy turn (a turn's further actions are marked `continued`)."""
    return [s for s in steps.order_by("episode", "index") if not s.info.get("continued")]


def outcomes(batch: RolloutBatch) -> list[tuple[object, ...]]:
    return [
        (e.pk, e.seed, e.status, e.env_error, e.policy_version_id, e.error)
        for e in Episode.objects.filter(batch=batch).order_by("pk")
    ]


def test_rollouts_and_grpo_on_vllm_a_promoted_adapter_hot_loaded_mid_batch_and_a_server_killed(
    platform: str, personas, tmp_path, client
):
    suite_load(name="miniwob")
    Task.objects.filter(slug=TASK).update(is_published=True)  # its oracle check: test_rollouts_real.py
    suite = suite_get_or_create(slug="served", name="Served")
    suite.tasks.add(Task.objects.get(slug=TASK))
    oracle = PolicyVersion.objects.create(
        name="oracle-elements", backend="oracle", config={"observation": "elements"}
    )
    # A tiny Qwen2.5-VL, under a name no other test's text policy uses (they share the var dir).
    call_command("tiny_policy", "--name", "tiny-vlm", "--vision", stdout=io.StringIO())
    tiny = PolicyVersion.objects.get(name="tiny-vlm")

    # 1. The tiny policy learns the task from the oracle (SFT), in-process weights as usual.
    demos = batch_create(
        suite=suite, policy_version=oracle, seeds=list(range(6)), concurrency=2,
        created_by=personas.researcher, config={"history_images": 3},
    )  # fmt: skip
    finished(demos)
    flywheel_round_close(created_by=personas.admin)
    sft = training_run_launch(
        algorithm="sft", name="sft", created_by=personas.admin, dataset_pin="flywheel-sft@v1",
        base_policy=tiny, suite=None,
        config={"max_steps": 40, "batch_size": 6, "lr": 0.003, "warmup_steps": 10, "checkpoint_every": 40,
                "history_images": 3},
    )  # fmt: skip
    run_done(sft)
    sft_local = checkpoint_promote(
        checkpoint=Checkpoint.objects.filter(run=sft).latest("step"), by=personas.admin
    )

    # 2. Its weights on two policy servers (vLLM, CPU build) that register with the web app.
    served = served_twin_create(local=sft_local, served_name="tiny-sft")
    # The SFT checkpoint is a vision-language policy again: its twin sends the screenshots, and reads
    # clicks in the space its processor resizes them into.
    assert "text_only" not in served.config and served.config["coords"].startswith("smart_resize:")
    model = sft_local.model_dir()
    common = {
        "model": model,
        "served_name": "tiny-sft",
        "web_url": platform,
        "token": PTOKEN,
        "log_dir": tmp_path,
    }
    # Each engine on a core of its own (the CPU build binds the first core by default); the two start
    # side by side.
    with (
        policy_server(name="srv-a", cpu_cores="0", wait=False, **common) as srv_a,
        policy_server(name="srv-b", cpu_cores="1", wait=False, **common) as srv_b,
    ):
        until(
            lambda: (
                PolicyServer.objects.filter(status="online").count() == 2
                or not (srv_a.poll() is None and srv_b.poll() is None)
            ),
            "both servers serving",
        )
        assert srv_a.poll() is None and srv_b.poll() is None, f"a server exited: see {tmp_path}/srv-*.log"
        urls = set(PolicyServer.objects.values_list("api_url", flat=True))

        # 3. A batch on the engines: every step answered by one of them, with the tokens it sampled.
        first = batch_create(
            suite=suite, policy_version=served, seeds=list(range(4)), concurrency=2,
            created_by=personas.researcher, config={"history_images": 3, "max_steps": 4},
        )  # fmt: skip
        finished(first)
        eps = Episode.objects.filter(batch=first)
        # Every instance finished once; one that hit an environment error (a sandbox slow under load)
        # re-ran, never lost and never the agent's failure.
        good = [e for e in eps if e.status == "finished" and not e.env_error]
        assert sorted(e.seed for e in good) == list(range(4)), outcomes(first)
        assert all(Episode.objects.filter(retry_of=e).exists() for e in eps if e.env_error), outcomes(first)
        steps = turns(Step.objects.filter(episode__in=good))
        print("first batch on the engines:", [(s.action_text, s.raw_output[:80]) for s in steps][:8])
        assert steps and {s.info["server"] for s in steps} <= urls
        assert {s.info["model"] for s in steps} == {"tiny-sft"}
        assert all(s.token_ids and len(s.token_ids) == len(s.logprobs or ()) for s in steps)

        # 4. LoRA GRPO from the served policy: its rollouts are sampled by the engines.
        rl = training_run_launch(
            algorithm="grpo", name="grpo", created_by=personas.admin, dataset_pin=None, base_policy=served,
            suite=suite,
            config={"lora": "on", "lora_r": 8, "iterations": 2, "episodes_per_iteration": 4, "group_size": 4,
                    "minibatch_size": 4, "checkpoint_every": 1, "max_steps_per_episode": 2,
                    "max_new_tokens": 96, "history_images": 3, "lr": 0.002},
        )  # fmt: skip
        run_done(rl)
        rl_batch = RolloutBatch.objects.get(name=f"training run {rl.pk}")
        rl_steps = turns(Step.objects.filter(episode__batch=rl_batch, episode__status="finished"))
        answered_by = {s.info["model"] for s in rl_steps}
        # The run's published adapters, and the base itself (version 0: the adapter starts at zero) for
        # the rollouts asked for before a server had loaded the first one.
        published = {f"run-{rl.pk}-v{n}" for n in range(4)}
        assert answered_by & published and answered_by <= published | {"tiny-sft"}, answered_by
        assert {s.info["server"] for s in rl_steps} <= urls
        # π_old (the trainer) over π_rollout (the engine) on the sampled tokens: the same policy.
        ratios = list(
            MetricPoint.objects.filter(run=rl, name="rl/is_weight_mean").values_list("value", flat=True)
        )
        assert ratios and 0.8 < statistics.mean(ratios) < 1.25, ratios
        # Token in, token out: every sampled turn kept the stamp of the prompt the engine read (images
        # expanded), the trainer's rebuild equalled every one (none counted as differing), and the
        # engine/trainer mismatch of what it trained on is on record, by turn index.
        assert all(
            s.info["prompt"]["tokens"] > 0 and s.info["prompt"]["family"] == "platform" for s in rl_steps
        )
        names = set(MetricPoint.objects.filter(run=rl).values_list("name", flat=True))
        assert (
            "rl/rebuild_differs" not in names
            and {"rl/logprob_mismatch_mean", "rl/logprob_mismatch/turn_0"} <= names
        )
        gaps = MetricPoint.objects.filter(run=rl, name__regex=r"^rl/(logprob_mismatch|policy_lag)")
        print("engine/trainer mismatch:", sorted(gaps.values_list("step", "name", "value")))

        # 5. A batch that follows the line; the GRPO checkpoint promoted while it runs.
        second = batch_create(
            suite=suite, policy_version=served, seeds=list(range(100, 108)), concurrency=2,
            created_by=personas.researcher, config={"history_images": 3, "max_steps": 2}, follow_newest=True,
        )  # fmt: skip
        until(lambda: Episode.objects.filter(batch=second, status="finished").count() >= 2, "two episodes")
        promoted = checkpoint_promote(
            checkpoint=Checkpoint.objects.filter(run=rl).latest("step"), by=personas.admin
        )
        assert promoted.serving["kind"] == "lora" and promoted.serving["base"] == "tiny-sft"
        until(
            lambda: all(
                promoted.model_name in s.model_ids() for s in PolicyServer.objects.filter(status="online")
            ),
            "the adapter hot-loaded by both servers",
            timeout=60,
        )
        finished(second)
        episodes = list(Episode.objects.filter(batch=second).order_by("started_at"))
        assert all(e.status == "finished" and not e.env_error for e in episodes), outcomes(second)
        assert sorted(e.seed for e in episodes) == list(range(100, 108))  # none lost, none twice
        versions = [e.policy_version_id for e in episodes]
        assert versions[0] == served.pk and versions[-1] == promoted.pk, outcomes(second)
        late = turns(Step.objects.filter(episode__batch=second, episode__policy_version=promoted))
        assert late and {s.info["model"] for s in late} == {promoted.model_name}
        early = turns(Step.objects.filter(episode__batch=second, episode__policy_version=served))
        assert early and {s.info["model"] for s in early} == {"tiny-sft"}

        # 6. A server killed with -9 mid-batch: its requests move to the other one (or their episodes
        # re-run), every instance counted once, later steps answered by the survivor; offline on the page.
        a = PolicyServer.objects.get(name="srv-a")
        url_a, url_b = a.api_url, PolicyServer.objects.get(name="srv-b").api_url
        third = batch_create(
            suite=suite, policy_version=served, seeds=list(range(200, 206)), concurrency=2,
            created_by=personas.researcher, config={"history_images": 3, "max_steps": 3},
        )  # fmt: skip
        until(
            lambda: Step.objects.filter(episode__batch=third, info__server=url_a).exists(), "srv-a to answer"
        )
        os.killpg(srv_a.pid, signal.SIGKILL)  # the agent; its engine dies with it (PR_SET_PDEATHSIG)
        killed_at = time.time()
        finished(third)
        episodes = list(Episode.objects.filter(batch=third))
        # The killed server's requests in flight fail at once (its process group ends with its agent):
        # none waits out a timeout, no episode runs into its time limit.
        assert not [e for e in episodes if e.stop_reason == "max_seconds"], outcomes(third)
        good = [e for e in episodes if e.status == "finished" and not e.env_error]
        assert sorted(e.seed for e in good) == list(range(200, 206)), outcomes(third)
        for e in episodes:
            if e not in good:  # an env error, re-run: never the agent's failure, never counted twice
                assert e.env_error and Episode.objects.filter(retry_of=e).exists(), e.error
        steps = Step.objects.filter(episode__in=good)
        assert {s.info["server"] for s in steps} <= {url_a, url_b}
        late = [s for s in steps if s.acted_at.timestamp() > killed_at + 2]
        assert late and {s.info["server"] for s in late} == {url_b}
        until(lambda: servers_mark_offline() >= 0 and not online("srv-a"), "srv-a offline", timeout=30)
        assert online("srv-b")
        client.force_login(personas.researcher)
        page = client.get("/policies/servers/").content.decode()
        assert 'data-status="offline"' in page.split('data-server="srv-a"')[1].split("</tr>")[0]
