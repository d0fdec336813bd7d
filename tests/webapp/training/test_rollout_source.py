"""The database rollout source of an RL run: published policies, requested episodes in the run's batch,
polled results as RL episodes; and the rollout settings a policy version carries (observation mode,
model directory, per-episode step cap).

Celery is replaced at one boundary (what services enqueue by name, webapp.common.queue) and episodes are
run "by hand" the way a worker records them; test_rollout_source_real.py goes through the real thing.
"""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from agent_core.policies.base import PolicyError
from agent_core.training.config import validate_config
from tests.conftest import Personas
from tests.factories import PNG_1X1, make_task
from webapp.catalog.models import TaskSuite
from webapp.catalog.services import suite_get_or_create
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_finish, step_record
from webapp.policies.models import PolicyVersion
from webapp.policies.runtime import observation_for, policy_for
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.services import _agent_config, _env_failure, batch_advance, batch_cancel
from webapp.training.models import TrainingRun
from webapp.training.rollout_source import TRAINING_SEED_BASE, DBRolloutSource

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {
    "id": "test/echo",
    "instruction": "Say hi",
    "platform": "desktop",
    "limits": {"max_steps": 12},
    "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "hi"}]},
}


@pytest.fixture
def rl_suite() -> TaskSuite:
    suite = suite_get_or_create(slug="rl-mini", name="RL mini")
    for slug, published in [("rl/a", True), ("rl/b", True), ("rl/draft", False)]:
        task = make_task(slug=slug, spec={**SPEC, "id": slug}, platform="desktop", env_profile="desktop")
        task.suites.add(suite)
        task.is_published = published
        task.save(update_fields=["is_published"])
    return suite


@pytest.fixture
def tiny_base() -> PolicyVersion:
    model = Path(settings.VAR_DIR) / "models" / "tiny-base"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    return PolicyVersion.objects.create(
        name="tiny-base",
        backend="local",
        model_name="models/tiny-base",
        config={"observation": "elements", "coords": "absolute", "temperature": 0.0, "max_new_tokens": 48},
    )


@pytest.fixture
def run(personas: Personas, rl_suite: TaskSuite, tiny_base: PolicyVersion) -> TrainingRun:
    config = validate_config("grpo", {"temperature": 0.9, "max_new_tokens": 24, "history_images": 2})
    return TrainingRun.objects.create(
        name="grpo", algorithm="grpo", config=config, base_policy=tiny_base, suite=rl_suite,
        created_by=personas.admin,
    )  # fmt: skip


def checkpoint(step: int) -> Path:
    path = Path(settings.VAR_DIR) / "training" / "run" / "checkpoints" / f"step-{step:06d}"
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def work(episode_id: int, *, reward: float = 1.0, steps: int = 2, env_error: bool = False) -> Episode:
    """Run an episode the way a rollout worker records it: claimed, steps with tokens, finished."""
    claimed = Episode.objects.filter(pk=episode_id, status="pending").update(status="running")
    assert claimed == 1
    episode = Episode.objects.select_related("batch").get(pk=episode_id)
    for i in range(steps):
        step_record(
            episode=episode,
            actor="agent",
            action={"type": "click", "x": 5 + i, "y": 5},
            action_text=f"click(start_box='({5 + i},5)')",
            thought=f"step {i}",
            screenshot_png=PNG_1X1,
            screen_size=(1, 1),
            a11y_tree=f'button "OK" @({5 + i},5)',
            raw_output=f"Thought: step {i}\nAction: click(start_box='({5 + i},5)')",
            token_ids=[10 + i, 11 + i, 12],
            logprobs=[-0.5, -0.25, -0.125],
        )
    if env_error:
        episode = _env_failure(episode, "environment: the sandbox died")
    else:
        episode = episode_finish(episode=episode, reward=reward, stop_reason="finished")
    batch_advance(batch_id=episode.batch_id)
    return episode


def test_tasks_are_the_suites_published_ones_unless_the_config_names_them(run):
    assert DBRolloutSource(run, run.config).tasks() == ["rl/a", "rl/b"]
    assert DBRolloutSource(run, {**run.config, "tasks": " rl/b, rl/a "}).tasks() == ["rl/b", "rl/a"]


def test_publish_makes_a_sampling_local_policy_version_of_the_checkpoint(run, tiny_base):
    source = DBRolloutSource(run, run.config)
    source.publish(0, checkpoint(0))
    v0 = PolicyVersion.objects.get(name=f"run-{run.pk}-v0")
    assert v0.backend == "local" and v0.checkpoint is None and v0.is_active
    assert v0.model_name == "training/run/checkpoints/step-000000"  # relative to the var dir
    assert v0.config == {**tiny_base.config, "temperature": 0.9, "max_new_tokens": 24, "top_p": 1.0}
    assert v0.lineage["training_run"] == run.pk and v0.lineage["version"] == 0
    policy = policy_for(v0)
    assert policy.model_path == Path(settings.VAR_DIR) / "training/run/checkpoints/step-000000"
    assert (policy.temperature, policy.max_new_tokens, policy.coords) == (0.9, 24, "absolute")
    assert observation_for(v0) == "elements"
    # Publishing again (a resumed run) updates the same row; a newer version retires the older one.
    source.publish(0, checkpoint(5))
    source.publish(1, checkpoint(10))
    v0.refresh_from_db()
    assert v0.model_name.endswith("step-000005") and not v0.is_active
    assert PolicyVersion.objects.get(name=f"run-{run.pk}-v1").is_active
    tiny_base.refresh_from_db()
    assert tiny_base.is_active


def test_requests_become_capped_episodes_of_one_batch_with_training_seeds(run, enqueued):
    source = DBRolloutSource(run, run.config)
    source.publish(0, checkpoint(0))
    # A request's rollouts share one fresh instance (a GRPO group); the next request gets the next.
    assert source.request("rl/a", 3, max_steps=4) == TRAINING_SEED_BASE
    assert source.request("rl/b", 1, max_steps=9) == TRAINING_SEED_BASE + 1
    batch = RolloutBatch.objects.get(name=f"training run {run.pk}")
    episodes = list(Episode.objects.filter(batch=batch).order_by("pk"))
    assert [(e.task.slug, e.seed, e.max_steps) for e in episodes] == [
        ("rl/a", TRAINING_SEED_BASE, 4),
        ("rl/a", TRAINING_SEED_BASE, 4),
        ("rl/a", TRAINING_SEED_BASE, 4),
        ("rl/b", TRAINING_SEED_BASE + 1, 9),
    ]
    assert all(e.policy_version.name == f"run-{run.pk}-v0" for e in episodes)
    assert batch.config == {"history_images": 2, "episodic_k": 0} and batch.concurrency == 2
    assert batch.created_by == run.created_by and batch.suite == run.suite
    assert enqueued == [episodes[0].pk, episodes[1].pk]  # up to the concurrency
    assert source.pending() == 4
    # The episode's cap applies within the task's and the batch's budgets.
    assert _agent_config(episodes[0], 12).max_steps == 4
    assert _agent_config(episodes[3], 6).max_steps == 6
    with pytest.raises(ValueError, match="unknown task"):
        source.request("rl/nope", 1, max_steps=3)


def test_poll_gives_finished_episodes_as_rl_episodes_of_the_version_that_ran_them(run, enqueued):
    source = DBRolloutSource(run, run.config)
    source.publish(0, checkpoint(0))
    source.request("rl/a", 2, max_steps=5)
    first, second = enqueued
    assert source.poll(timeout=0) == []
    work(first, reward=1.0)
    got = source.poll(timeout=2)
    assert len(got) == 1 and source.pending() == 1
    ep = got[0]
    assert (ep.task_id, ep.episode_id, ep.policy_version, ep.reward, ep.steps) == (
        "rl/a",
        str(first),
        0,
        1.0,
        2,
    )
    assert ep.seed == TRAINING_SEED_BASE
    assert [t.response_ids for t in ep.turns] == [(10, 11, 12), (11, 12, 12)]
    assert ep.turns[0].rollout_logprobs == (-0.5, -0.25, -0.125)
    assert ep.turns[1].a11y == 'button "OK" @(6,5)'
    # The policy switch: the waiting episode takes the new version; the one already running keeps its own.
    source.request("rl/b", 1, max_steps=5)
    third = Episode.objects.filter(batch__name=f"training run {run.pk}").latest("pk").pk
    Episode.objects.filter(pk=second).update(status="running")
    source.publish(1, checkpoint(10))
    versions = dict(Episode.objects.filter(pk__in=[second, third]).values_list("pk", "policy_version__name"))
    assert versions == {second: f"run-{run.pk}-v0", third: f"run-{run.pk}-v1"}
    Episode.objects.filter(pk=second).update(status="pending")
    work(second, reward=0.0)
    work(third, reward=1.0)
    got = {int(e.episode_id): e.policy_version for e in source.poll(timeout=2)}
    assert got == {second: 0, third: 1}
    assert source.pending() == 0 and source.poll(timeout=0) == []


def test_an_env_error_is_answered_by_its_rerun_and_a_final_one_comes_back_with_no_turns(run, enqueued):
    source = DBRolloutSource(run, run.config)
    source.publish(0, checkpoint(0))
    source.request("rl/a", 1, max_steps=5)
    failed = work(enqueued[0], env_error=True)
    assert failed.status == "failed" and source.poll(timeout=0) == []
    assert source.pending() == 1  # the re-run answers the request
    rerun = Episode.objects.get(retry_of=failed)
    assert rerun.max_steps == 5 and rerun.policy_version.name == f"run-{run.pk}-v0"
    work(rerun.pk, env_error=True)
    last = work(Episode.objects.get(retry_of=rerun).pk, env_error=True)  # the batch's third attempt
    assert last.attempt == 3 and not Episode.objects.filter(retry_of=last).exists()
    # Given up on: it comes back once, turnless and failed, so the trainer's group stops waiting on it.
    (lost,) = source.poll(timeout=0)
    assert (lost.task_id, lost.seed, lost.reward, lost.turns, lost.policy_version) == (
        "rl/a",
        TRAINING_SEED_BASE,
        0.0,
        (),
        0,
    )
    assert lost.episode_id == str(last.pk)
    assert source.poll(timeout=0) == [] and source.pending() == 0


def test_episodes_deleted_with_a_cancelled_batch_come_back_lost_with_their_request(run, enqueued):
    source = DBRolloutSource(run, run.config)
    source.publish(0, checkpoint(0))
    seed = source.request("rl/a", 3, max_steps=5)
    work(enqueued[0], reward=1.0)
    # Somebody cancels the run's batch from the Rollouts page: its pending episodes are deleted.
    assert batch_cancel(batch=RolloutBatch.objects.get(name=f"training run {run.pk}")) == 2
    got = source.poll(timeout=2)
    assert sorted((e.task_id, e.seed, e.reward, len(e.turns)) for e in got) == [
        ("rl/a", seed, 0.0, 0),
        ("rl/a", seed, 0.0, 0),
        ("rl/a", seed, 1.0, 2),
    ]
    assert source.pending() == 0 and source.poll(timeout=0) == []


def test_the_batch_reopens_for_new_requests_and_close_cancels_it(run, enqueued):
    source = DBRolloutSource(run, run.config)
    source.publish(0, checkpoint(0))
    source.request("rl/a", 1, max_steps=5)
    work(enqueued[0])
    batch = RolloutBatch.objects.get(name=f"training run {run.pk}")
    assert batch.status == "finished"  # nothing left: the worker's batch_advance finished it
    assert len(source.poll(timeout=1)) == 1
    source.request("rl/b", 2, max_steps=5)
    batch.refresh_from_db()
    assert batch.status == "running" and len(enqueued) == 3
    assert RolloutBatch.objects.filter(name=f"training run {run.pk}").count() == 1
    # A batch that finished under a request (a race with a worker) is reopened by the next poll.
    RolloutBatch.objects.filter(pk=batch.pk).update(status="finished")
    Episode.objects.filter(pk__in=enqueued[1:]).update(queued_at=None)
    source.poll(timeout=0)
    batch.refresh_from_db()
    assert batch.status == "running" and len(enqueued) == 5
    source.close()
    batch.refresh_from_db()
    assert batch.status == "cancelled" and not Episode.objects.filter(batch=batch, status="pending").exists()
    assert source.pending() == 0
    with pytest.raises(RuntimeError):
        source.request("rl/a", 1, max_steps=5)


def test_a_restarted_trainer_cancels_the_batch_its_predecessor_left(run, enqueued):
    dead = DBRolloutSource(run, run.config)
    dead.publish(0, checkpoint(0))
    dead.request("rl/a", 3, max_steps=5)
    work(enqueued[0])
    fresh = DBRolloutSource(run, run.config)
    old = RolloutBatch.objects.get(name=f"training run {run.pk}")
    assert old.status == "cancelled" and fresh.pending() == 0
    fresh.publish(0, checkpoint(5))
    fresh.request("rl/a", 1, max_steps=5)
    new = RolloutBatch.objects.exclude(pk=old.pk).get(name=f"training run {run.pk}")
    # Seeds go on after the ones already used: a resumed run does not replay the same instances.
    assert Episode.objects.get(batch=new).seed == TRAINING_SEED_BASE + 1


def test_utilisation_is_the_share_of_slot_time_spent_on_steps(run, enqueued):
    source = DBRolloutSource(run, run.config)
    assert source.utilisation() is None  # no batch yet
    source.publish(0, checkpoint(0))
    source.request("rl/a", 1, max_steps=5)
    t0 = time.time() - 100
    source._clock = lambda: t0
    source.utilisation()  # the window starts at t0
    Episode.objects.filter(pk=enqueued[0]).update(status="running")
    episode = Episode.objects.get(pk=enqueued[0])
    at = lambda s: datetime.fromtimestamp(t0 + s, tz=UTC)  # noqa: E731
    for observed, acted in [(-9, -5), (-5, 10), (20, 40)]:  # before the window, across its start, inside
        step_record(
            episode=episode,
            actor="agent",
            action={"type": "wait"},
            observed_at=at(observed),
            acted_at=at(acted),
        )
    source._clock = lambda: t0 + 50
    # (10 + 20) s of steps over 50 s of 2 slots.
    assert source.utilisation() == pytest.approx(0.3)
    source._clock = lambda: t0 + 60
    assert source.utilisation() == 0.0


# --- rollout settings of a policy version --------------------------------------------------------


def test_a_local_policy_without_a_checkpoint_loads_its_model_directory(tmp_path):
    model = tmp_path / "abs-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    absolute = PolicyVersion.objects.create(
        name="abs",
        backend="local",
        model_name=str(model),
        config={"observation": "a11y", "max_new_tokens": 7},
    )
    policy = policy_for(absolute)
    assert policy.model_path == model and policy.max_new_tokens == 7  # "observation" is not the policy's
    assert observation_for(absolute) is True
    missing = PolicyVersion.objects.create(name="missing", backend="local", model_name="models/nowhere")
    with pytest.raises(PolicyError, match="not a model directory"):
        policy_for(missing)


def test_a_seeded_policy_samples_differently_in_each_episode_and_alike_in_a_rerun(tmp_path):
    # The audit's defect: one seed for every episode gave a GRPO group identical rollouts.
    model = tmp_path / "seeded"
    model.mkdir()
    (model / "config.json").write_text("{}")
    version = PolicyVersion.objects.create(
        name="seeded", backend="local", model_name=str(model), config={"seed": 5, "temperature": 1.0}
    )
    seeds = [policy_for(version, episode=pk).seed for pk in (11, 12, 13, 11)]
    assert len(set(seeds[:3])) == 3 and seeds[3] == seeds[0] and 5 not in seeds
    assert policy_for(version).seed == 5  # outside an episode: the version's own seed
    unseeded = PolicyVersion.objects.create(name="unseeded", backend="local", model_name=str(model))
    assert policy_for(unseeded, episode=11).seed is None


def test_the_observation_mode_defaults_to_the_screenshot_and_refuses_unknown_ones():
    oracle = PolicyVersion.objects.create(name="oracle-obs", backend="oracle", config={})
    assert observation_for(oracle) is False and observation_for(None) is False
    bad = PolicyVersion.objects.create(name="bad-obs", backend="oracle", config={"observation": "pixels"})
    with pytest.raises(PolicyError, match="observation must be one of screenshot, a11y, elements"):
        observation_for(bad)
    # Policies never see the rollout keys.
    assert (
        policy_for(PolicyVersion(name="o2", backend="oracle", config={"observation": "elements"})) is not None
    )


@override_settings(TRAINING_ROLLOUT_CONCURRENCY=5)
def test_the_concurrency_follows_the_setting(run, enqueued):
    source = DBRolloutSource(run, run.config)
    source.publish(0, checkpoint(0))
    source.request("rl/a", 6, max_steps=3)
    assert RolloutBatch.objects.get(name=f"training run {run.pk}").concurrency == 5 and len(enqueued) == 5


def test_tiny_policy_command_registers_once_and_rebuilds_on_force(monkeypatch):
    from django.core.management import CommandError, call_command

    from agent_core.training import tiny_policy

    built: list[tuple[Path, list[str], int]] = []

    def build(path, *, corpus=(), seed=0):
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        built.append((path, list(corpus), seed))
        return path

    monkeypatch.setattr(tiny_policy, "build_tiny_policy", build)
    make_task(slug="rl/t1", instruction="Click the OK button.")
    make_task(slug="rl/t2", instruction="{{start.utterance}}")  # a template: not text the policy reads
    out = io.StringIO()
    call_command("tiny_policy", "--name", "tiny-x", "--seed", "3", stdout=out)
    assert "policy tiny-x registered" in out.getvalue()
    path = Path(settings.VAR_DIR) / "models" / "tiny-x"
    assert built == [(path, ["Click the OK button."], 3)]
    policy = PolicyVersion.objects.get(name="tiny-x")
    assert (policy.backend, policy.model_name, policy.is_active) == ("local", "models/tiny-x", True)
    assert policy.config == tiny_policy.POLICY_CONFIG and policy.model_dir() == path
    call_command("tiny_policy", "--name", "tiny-x", stdout=(again := io.StringIO()))
    assert "exists" in again.getvalue() and len(built) == 1
    # A model folder whose version row was lost is registered as it is; --force rebuilds it.
    policy.delete()
    call_command("tiny_policy", "--name", "tiny-x", stdout=io.StringIO())
    assert len(built) == 1 and PolicyVersion.objects.filter(name="tiny-x").exists()
    call_command("tiny_policy", "--name", "tiny-x", "--force", "--seed", "4", stdout=io.StringIO())
    assert len(built) == 2 and built[-1][2] == 4
    with pytest.raises(CommandError, match="slug"):
        call_command("tiny_policy", "--name", "../evil")


def test_tiny_policy_vision_registers_a_qwen2_5_vl_served_with_its_images():
    """--vision --served: a real tiny Qwen2.5-VL (built here), a local policy that reads screenshots and
    clicks in its processor's space, and its served twin asking the engine with the images."""
    from django.core.management import CommandError, call_command

    out = io.StringIO()
    call_command("tiny_policy", "--name", "tiny-vl", "--vision", "--served", stdout=out)
    policy = PolicyVersion.objects.get(name="tiny-vl")
    config = json.loads((policy.model_dir() / "config.json").read_text())
    assert config["model_type"] == "qwen2_5_vl" and policy.config["observation"] == "screenshot"
    twin = PolicyVersion.objects.get(name="tiny-vl-served")
    assert "text_only" not in twin.config and twin.config["coords"] == "smart_resize:3136:200704"
    assert set(twin.config["extra_body"]["logit_bias"]) == {
        str(config["image_token_id"]),
        str(config["video_token_id"]),
    }
    # Its folder, its row lost, is not registered as a text policy (nor a text folder as a VLM).
    PolicyVersion.objects.filter(name__startswith="tiny-vl").delete()
    with pytest.raises(CommandError, match="holds a vision-language model; --force rebuilds it"):
        call_command("tiny_policy", "--name", "tiny-vl", stdout=io.StringIO())
