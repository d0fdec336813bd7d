"""A run's keep_checkpoints pruning (the trainer's own, agent_core's prune, on real directories) never
deletes a checkpoint promoted to a policy, nor one published to rollouts that may still load it; old
checkpoints nothing needs go."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from agent_core.training.checkpoints import STATE_FILE, checkpoint_dir, keep_reasons, prune
from agent_core.training.config import validate_config
from tests.conftest import Personas
from webapp.catalog.models import TaskSuite
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.training import promotion
from webapp.training.models import Checkpoint, TrainingRun
from webapp.training.promotion import checkpoint_promote
from webapp.training.rollout_source import DBRolloutSource
from webapp.training.services import TrainingRunError

pytestmark = pytest.mark.django_db

OUT = "training/runs/keep"


@pytest.fixture
def rl_run(personas: Personas, suite: TaskSuite, base_policy: PolicyVersion) -> TrainingRun:
    config = validate_config("grpo", {"temperature": 0.9, "keep_checkpoints": 1})
    return TrainingRun.objects.create(
        name="grpo", algorithm="grpo", config=config, base_policy=base_policy, suite=suite,
        created_by=personas.admin, out_dir=OUT,
    )  # fmt: skip


def out_dir() -> Path:
    return Path(settings.VAR_DIR) / OUT


def save(run: TrainingRun, step: int) -> Checkpoint:
    """A complete checkpoint directory, reported as the run's hooks report it."""
    path = checkpoint_dir(out_dir(), step)
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / STATE_FILE).write_bytes(b"state")
    return Checkpoint.objects.create(run=run, step=step, path=f"{OUT}/checkpoints/{path.name}")


def left() -> list[int]:
    return sorted(int(p.name.removeprefix("step-")) for p in (out_dir() / "checkpoints").iterdir())


def test_a_promoted_checkpoint_survives_the_runs_pruning(rl_run, personas):
    checkpoints = [save(rl_run, step) for step in (1, 2, 3, 4)]
    policy = checkpoint_promote(checkpoint=checkpoints[1], by=personas.admin)
    assert keep_reasons(rl_run.path(checkpoints[1].path)) == {"promoted": f"promoted to policy {policy.name}"}
    prune(out_dir(), 1)
    assert left() == [2, 4]
    assert policy.model_dir() is not None and (policy.model_dir() / "config.json").is_file()


def test_a_checkpoint_pruned_while_it_is_promoted_is_refused_and_no_policy_is_made(
    rl_run, personas, monkeypatch
):
    checkpoint = save(rl_run, 1)
    # Pruning takes it between promotion's look at the directory and its marker.
    monkeypatch.setattr(promotion, "checkpoint_problem", lambda path: None)
    prune_target = rl_run.path(checkpoint.path)
    prune_target.rename(prune_target.with_name(prune_target.name + ".pruning.tmp"))
    with pytest.raises(TrainingRunError) as refused:
        checkpoint_promote(checkpoint=checkpoint, by=personas.admin)
    assert refused.value.field == "checkpoint" and "is gone" in str(refused.value)
    assert not PolicyVersion.objects.filter(checkpoint=checkpoint).exists()


def test_a_promotion_that_loses_a_race_for_its_name_leaves_no_marker(rl_run, personas, monkeypatch):
    checkpoint = save(rl_run, 1)
    PolicyVersion.objects.create(name="taken", backend="noop")
    monkeypatch.setattr(promotion, "free_policy_name", lambda wanted: "taken")  # taken meanwhile
    with pytest.raises(TrainingRunError, match="a policy called 'taken' exists already"):
        checkpoint_promote(checkpoint=checkpoint, by=personas.admin)
    assert keep_reasons(rl_run.path(checkpoint.path)) == {}
    save(rl_run, 2)
    prune(out_dir(), 1)
    assert left() == [2]


def test_published_checkpoints_survive_while_rollouts_may_load_them(rl_run, enqueued):
    saved = {step: rl_run.path(save(rl_run, step).path) for step in (0, 1, 2, 3)}
    source = DBRolloutSource(rl_run, rl_run.config)
    source.publish(0, saved[0])
    source.request("miniwob/click-a", 2, max_steps=4)
    running, waiting = Episode.objects.filter(batch__name=f"training run {rl_run.pk}").order_by("pk")
    Episode.objects.filter(pk=running.pk).update(status="running")  # a worker claimed it: loads v0
    source.publish(1, saved[1])  # the waiting episode moves to v1
    source.publish(2, saved[2])  # ... and to v2: nothing runs v1 any more
    prune(out_dir(), 1)  # step 3: saved by checkpoint_every, not published
    assert left() == [0, 2, 3]
    assert keep_reasons(saved[0]) == {"rollouts": f"published to rollouts as run-{rl_run.pk}-v0"}
    assert Episode.objects.get(pk=waiting.pk).policy_version.name == f"run-{rl_run.pk}-v2"
    # The running episode ends; the next publish releases v0 and v2, which no rollout can load now.
    Episode.objects.filter(pk=running.pk).update(status="finished", finished_at=timezone.now())
    source.publish(3, saved[3])
    saved[4] = rl_run.path(save(rl_run, 4).path)
    prune(out_dir(), 1)
    assert left() == [3, 4]  # v3 is the current policy: kept though older than the newest
    assert keep_reasons(saved[3]) == {"rollouts": f"published to rollouts as run-{rl_run.pk}-v3"}
