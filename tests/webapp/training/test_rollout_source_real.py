"""The rollout source of an RL run through the real thing: a sandbox host with a browser, a Celery
rollout worker on the real Redis broker, the tiny demo policy (built by `manage.py tiny_policy`)
reading the "elements" observation of a MiniWoB page, and the test database.

What a trainer polls must be what the policy did: the turns' token ids and logprobs are the steps',
and the prompts rebuilt from the database give the model the same logprobs it sampled with.
"""

from __future__ import annotations

import io
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.storage import default_storage
from django.core.management import call_command
from django.test import override_settings

from agent_core.rl.episodes import RLEpisode
from agent_core.training.config import validate_config
from tests.procs import celery_worker, wait_for
from tests.sandbox_workers.hostproc import TOKEN, HostProc
from webapp.catalog.models import Task
from webapp.catalog.services import suite_load
from webapp.episodes.models import Episode, Step
from webapp.policies.models import PolicyVersion
from webapp.rollouts.models import RolloutBatch
from webapp.sandboxes.models import Sandbox
from webapp.training.models import TrainingRun
from webapp.training.rollout_source import DBRolloutSource

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
pytest.importorskip("transformers")

TASK = "miniwob/click-test"


def until(predicate, what: str, timeout: float = 240) -> None:
    assert wait_for(predicate, timeout=timeout, interval=0.3), f"timed out waiting for {what}"


def rollout_worker(tmp_path: Path):
    """A rollout worker that resolves model directories and media where this test process does."""
    env = {
        "SANDBOX_HOST_TOKEN": TOKEN,
        "ROLLOUT_HEARTBEAT_SECONDS": "1",
        "ROLLOUT_LEASE_WAIT_SECONDS": "60",
        "FLYWHEEL_VAR_DIR": str(settings.VAR_DIR),
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
    }
    return celery_worker(tmp_path, queues="rollouts", env=env)


@pytest.fixture
def host(live_server, tmp_path):
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        profiles = {"browser": {"provider": "browser", "min_idle": 1, "max_total": 2}}
        h = HostProc(name="rl-host", var=tmp_path, profiles=profiles, web_url=live_server.url, slot_base=240)
        h.start()
        try:
            until(lambda: Sandbox.objects.filter(state="idle", profile="browser").exists(), "an idle browser")
            yield h
        finally:
            h.stop()


def poll_all(source: DBRolloutSource, n: int, timeout: float = 300) -> list[RLEpisode]:
    got: list[RLEpisode] = []
    until(lambda: bool(got.extend(source.poll(timeout=2.0))) or len(got) >= n, f"{n} episodes", timeout)
    return got


def recomputed_logprobs(model_dir: Path, turn) -> list[float]:
    """The model's logprobs of the turn's response given the prompt rebuilt from the database."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent_core.policies.local import text_prompt

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True).eval()
    text, special = text_prompt(tokenizer, turn.messages, turn.a11y)
    prompt = tokenizer(text, add_special_tokens=special)["input_ids"]
    ids = torch.tensor([list(prompt) + list(turn.response_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    out = []
    for k, token in enumerate(turn.response_ids):
        out.append(float(torch.log_softmax(logits[len(prompt) + k - 1], dim=-1)[token]))
    return out


def test_rollouts_of_a_run_come_back_as_the_policy_made_them_and_follow_a_new_policy(
    host, personas, tmp_path
):
    suite, _, _ = suite_load(name="miniwob")
    out = io.StringIO()
    call_command("tiny_policy", "--name", "tiny-rl", stdout=out)
    assert "registered" in out.getvalue()
    base = PolicyVersion.objects.get(name="tiny-rl")
    model_dir = base.model_dir()
    assert (
        model_dir == Path(settings.VAR_DIR) / "models" / "tiny-rl" and (model_dir / "config.json").is_file()
    )
    assert base.config["observation"] == "elements"
    call_command("tiny_policy", "--name", "tiny-rl", stdout=(again := io.StringIO()))
    assert "exists" in again.getvalue()

    config = validate_config(
        "grpo", {"tasks": TASK, "temperature": 1.0, "max_new_tokens": 12, "history_images": 1}
    )
    run = TrainingRun.objects.create(
        name="rl", algorithm="grpo", config=config, base_policy=base, suite=suite, created_by=personas.admin
    )
    source = DBRolloutSource(run, config)
    assert source.tasks() == [TASK]
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN), rollout_worker(tmp_path):
        source.publish(0, model_dir)
        source.request(TASK, 2, max_steps=2)
        first = poll_all(source, 2)
        # A new policy (a copy of the model, under the var dir): the next rollouts use it.
        v1_dir = Path(settings.VAR_DIR) / "training" / "rl" / "checkpoints" / "step-000001"
        shutil.copytree(model_dir, v1_dir)
        source.publish(1, v1_dir)
        source.request(TASK, 1, max_steps=2)
        second = poll_all(source, 1)
        source.close()

    assert [e.policy_version for e in first] == [0, 0] and [e.policy_version for e in second] == [1]
    assert first[0].seed == first[1].seed != second[0].seed  # a request's rollouts: one instance
    v1 = PolicyVersion.objects.get(name=f"run-{run.pk}-v1")
    assert v1.model_name == "training/rl/checkpoints/step-000001" and v1.config["temperature"] == 1.0
    assert RolloutBatch.objects.get(name=f"training run {run.pk}").status in ("finished", "cancelled")
    for ep in first + second:
        episode = Episode.objects.get(pk=int(ep.episode_id))
        assert episode.policy_version.name == f"run-{run.pk}-v{ep.policy_version}"
        assert episode.status == "finished" and not episode.env_error, episode.error
        assert 1 <= ep.steps <= 2 and episode.num_steps == ep.steps  # the per-episode cap
        # The instruction the seed drew was kept, and the prompt starts from it.
        instruction = episode.prepared["instruction"]
        assert instruction and "{{" not in instruction
        assert instruction in ep.turns[0].messages[1]["content"][0]["text"]
        steps = list(Step.objects.filter(episode=episode).order_by("index"))
        turns = [s for s in steps if not s.info.get("continued")]
        assert len(ep.turns) == len(turns) >= 1
        for turn, step in zip(ep.turns, turns, strict=True):
            assert list(turn.response_ids) == step.token_ids and list(turn.rollout_logprobs) == step.logprobs
            # The observation was the element list of the page, stored with the step.
            with default_storage.open(step.a11y_tree.name, "rb") as f:
                assert turn.a11y == f.read().decode()
            assert turn.a11y.startswith('button "') and "@(" in turn.a11y
    # The prompt rebuilt from the database is the one the model sampled from.
    turn = first[0].turns[0]
    assert recomputed_logprobs(model_dir, turn) == pytest.approx(list(turn.rollout_logprobs), abs=1e-3)
    # (and the comparison tells prompts apart: without the element list the logprobs move)
    blind = recomputed_logprobs(model_dir, replace(turn, a11y=None))
    assert blind != pytest.approx(list(turn.rollout_logprobs), abs=1e-3)
    assert Task.objects.get(slug=TASK).episodes.filter(seed__lt=10_000).count() == 0
