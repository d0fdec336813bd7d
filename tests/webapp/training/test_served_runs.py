"""Training on a policy the platform's servers serve: an RL run's published policies are adapters the
servers hot-load, and rollouts switch to one only once a server has it; a promoted checkpoint of such a
run stays served (an adapter on the base's servers, or full weights rolled onto them) and joins the
base's line. Servers are rows here (their heartbeats' mirror); the real engine is in
tests/webapp/policies/test_served_rollouts_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings

from agent_core.training.config import validate_config
from tests.factories import make_task
from tests.webapp.policies.helpers import served_version, server
from webapp.catalog.services import suite_get_or_create
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyServer, PolicyVersion
from webapp.policies.runtime import policy_for
from webapp.policies.selectors import adapters_wanted, line_of
from webapp.rollouts.models import RolloutBatch
from webapp.training.models import Checkpoint, TrainingRun
from webapp.training.promotion import checkpoint_promote
from webapp.training.rollout_source import DBRolloutSource
from webapp.training.services import TrainingRunError, training_run_launch

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {
    "id": "rl/a",
    "instruction": "Say hi",
    "platform": "desktop",
    "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "hi"}]},
}


@pytest.fixture
def base() -> PolicyVersion:
    weights = Path(settings.VAR_DIR) / "models" / "tiny"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text("{}")
    return served_version(
        "tiny-served",
        kind="base",
        model_name="tiny",
        base="tiny",
        path="models/tiny",
        config={"observation": "elements", "coords": "absolute", "text_only": True, "temperature": 0.0},
    )


@pytest.fixture
def suite():
    s = suite_get_or_create(slug="rl-mini", name="RL mini")
    task = make_task(slug="rl/a", spec=SPEC, platform="desktop", env_profile="desktop")
    task.suites.add(s)
    s.tasks.update(is_published=True)
    return s


@pytest.fixture
def run(personas, suite, base) -> TrainingRun:
    config = validate_config("grpo", {"temperature": 0.9, "max_new_tokens": 24, "lora": "on"})
    return TrainingRun.objects.create(
        name="grpo", algorithm="grpo", config=config, base_policy=base, suite=suite, created_by=personas.admin
    )


def adapter(step: int, base_dir: Path) -> Path:
    path = Path(settings.VAR_DIR) / "training" / "run" / "checkpoints" / f"step-{step:06d}"
    path.mkdir(parents=True)
    cfg = {"base_model_name_or_path": str(base_dir), "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    (path / "adapter_config.json").write_text(json.dumps(cfg))
    (path / "adapter_model.safetensors").write_bytes(b"")
    (path / "trainer_state.pt").write_bytes(b"")
    return path


def test_a_served_policy_is_a_base_a_run_can_start_from_but_rl_on_it_trains_an_adapter(personas, suite, base):
    assert base.model_dir() == Path(settings.VAR_DIR) / "models" / "tiny"
    with pytest.raises(TrainingRunError) as refused:
        training_run_launch(
            algorithm="grpo", name="full", config={}, created_by=personas.admin, dataset_pin=None,
            base_policy=base, suite=suite,
        )  # fmt: skip
    assert [f for f, _ in refused.value.errors] == ["lora"] and "set lora to on" in str(refused.value)
    run = training_run_launch(
        algorithm="grpo", name="lora", config={"lora": "on"}, created_by=personas.admin, dataset_pin=None,
        base_policy=base, suite=suite,
    )  # fmt: skip
    assert run.base_policy == base


def test_a_published_adapter_goes_to_the_servers_and_rollouts_switch_once_one_has_it(run, base, enqueued):
    server("s1", models=["tiny"])
    source = DBRolloutSource(run, run.config)
    source.request("rl/a", 2, max_steps=3)
    batch = RolloutBatch.objects.get(name=f"training run {run.pk}")
    assert set(Episode.objects.filter(batch=batch).values_list("policy_version__name", flat=True)) == {
        "tiny-served"
    }

    source.publish(1, adapter(1, base.model_dir()))
    v1 = PolicyVersion.objects.get(name=f"run-{run.pk}-v1")
    assert v1.is_platform_served() and v1.serving == {
        "base": "tiny",
        "kind": "lora",
        "path": "training/run/checkpoints/step-000001",
    }
    assert v1.config["temperature"] == 0.9 and v1.config["max_new_tokens"] == 24 and v1.config["text_only"]
    assert line_of(v1) == f"training-run-{run.pk}"
    # The servers of the base are asked to load it; until one has, nothing switches.
    assert {
        "name": v1.model_name,
        "path": str(Path(settings.VAR_DIR) / v1.serving["path"]),
    } in adapters_wanted(base_model="tiny")
    source.request("rl/a", 1, max_steps=3)
    assert Episode.objects.filter(batch=batch, policy_version=v1).count() == 0
    assert RolloutBatch.objects.get(pk=batch.pk).policy_version == base

    PolicyServer.objects.filter(name="s1").update(
        models=[{"id": "tiny", "kind": "base"}, {"id": v1.model_name, "kind": "lora"}]
    )
    source.poll(timeout=0)  # a poll notices it is served now
    pending = Episode.objects.filter(batch=batch, status="pending")
    assert pending.count() == 3 and set(pending.values_list("policy_version", flat=True)) == {v1.pk}
    assert RolloutBatch.objects.get(pk=batch.pk).policy_version == v1
    assert policy_for(v1).model == v1.model_name  # type: ignore[attr-defined]

    # v2 published: v1 stays on offer (rollouts run it) until v2 is loaded, then retires.
    source.publish(2, adapter(2, base.model_dir()))
    v1.refresh_from_db()
    assert v1.is_active
    PolicyServer.objects.filter(name="s1").update(
        models=[{"id": "tiny", "kind": "base"}, {"id": f"run-{run.pk}-v2", "kind": "lora"}]
    )
    source.poll(timeout=0)
    v1.refresh_from_db()
    assert not v1.is_active and [a["name"] for a in adapters_wanted(base_model="tiny")] == [
        f"run-{run.pk}-v2"
    ]


def test_a_promoted_checkpoint_of_a_run_on_a_served_policy_stays_served_on_its_line(run, base, personas):
    path = adapter(7, base.model_dir())
    ckpt = Checkpoint.objects.create(run=run, step=7, path=str(path))
    promoted = checkpoint_promote(checkpoint=ckpt, name="tiny-grpo-7", by=personas.admin)
    assert promoted.is_platform_served() and promoted.checkpoint == ckpt
    assert promoted.serving == {
        "base": "tiny",
        "kind": "lora",
        "path": "training/run/checkpoints/step-000007",
    }
    assert promoted.model_name == "tiny-grpo-7" and line_of(promoted) == "tiny-served"
    assert "tiny-grpo-7" in [a["name"] for a in adapters_wanted(base_model="tiny")]

    # Full weights of such a run: a base of their own, rolled onto the line's servers.
    full = Path(settings.VAR_DIR) / "training" / "run" / "checkpoints" / "step-000009"
    full.mkdir(parents=True)
    (full / "config.json").write_text("{}")
    (full / "trainer_state.pt").write_bytes(b"")
    weights = checkpoint_promote(
        checkpoint=Checkpoint.objects.create(run=run, step=9, path=str(full)),
        name="tiny-full-9",
        by=personas.admin,
    )
    assert weights.serving["kind"] == "base" and weights.serving["base"] == "tiny-full-9"
    assert line_of(weights) == "tiny-served"
