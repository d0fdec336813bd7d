"""The in-process rollout source through the real thing: confined Chromium sandboxes running MiniWoB
pages, a tiny LLaVA-style VLM sampled on their real screenshots, and the trainer scoring and updating on
those screenshots; a sandbox whose browser dies is relaunched; pools in two processes stay apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_core.suites import miniwob as suite
from agent_core.training.batching import token_logprobs
from agent_core.training.config import validate_config
from agent_core.training.model_io import load_policy_model
from agent_core.training.runner import run
from agent_core.training.types import NullHooks, RunSpec
from sandbox_workers.base import Profile
from sandbox_workers.local_rollouts import BrowserPool, LocalRolloutSource, _traversable
from sandbox_workers.providers.browser import BrowserProvider
from tests.procs import worker_slot

pytestmark = pytest.mark.slow
pytest.importorskip("transformers")
TASK = "miniwob/click-test"


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent_core.tiny_models import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "base")


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserPool]:
    p = BrowserPool(1, tmp_path_factory.mktemp("pool") / "sandboxes", slot_base=290)
    try:
        yield p
    finally:
        p.close()


def source_for(pool: BrowserPool) -> LocalRolloutSource:
    specs = {TASK: next(s for s in suite.tasks() if s.id == TASK)}
    policy = {"temperature": 1.0, "max_new_tokens": 16, "seed": None}
    return LocalRolloutSource(specs, pool, policy=policy, history_images=1)


def poll(source: LocalRolloutSource, n: int) -> list:
    episodes: list = []
    for _ in range(120):
        episodes += source.poll(timeout=1.0)
        if len(episodes) == n:
            break
    return episodes


def test_vlm_rollouts_on_real_screens_are_scored_by_the_trainer_as_sampled_and_train(
    vlm: Path, pool: BrowserPool, tmp_path: Path
) -> None:
    import torch

    source = source_for(pool)
    try:
        source.publish(0, vlm)
        seed = source.request(TASK, 2, max_steps=1)
        episodes = poll(source, 2)
        assert len(episodes) == 2 and all(ep.turns for ep in episodes), episodes
        assert {ep.seed for ep in episodes} == {seed}
        codec, model = load_policy_model(vlm, device="cpu")
        for ep in episodes:
            turn = ep.turns[0]
            # The prompt carries the page's real screenshot...
            images = [
                p["image_url"]["url"]
                for m in turn.messages
                if isinstance(m["content"], list)
                for p in m["content"]
                if p.get("type") == "image_url"
            ]
            assert len(images) == 1 and images[0].startswith("data:image/png;base64,")
            pixels = codec.images(turn.messages)["pixel_values"]
            assert pixels.shape[0] == 1 and float(pixels.std()) > 0  # a page, not a blank frame
            # ...and the trainer, encoding it as the policy did, gives the sampled tokens their logprobs.
            prompt = codec.prompt_ids(turn.messages, turn.a11y)
            ids = torch.tensor([prompt + list(turn.response_ids)])
            with torch.no_grad():
                lp, _ = token_logprobs(model, ids, torch.ones_like(ids), images=codec.images(turn.messages))
            n = len(turn.response_ids)
            assert lp[0, -n:].tolist() == pytest.approx(list(turn.rollout_logprobs), abs=1e-3)

        # A PPO run on the same source: the critic reads the screens too (GRPO would skip the groups of
        # a random policy, which all fail alike); it saves a VLM checkpoint the next rollouts use.
        ppo = {"iterations": 1, "episodes_per_iteration": 2, "max_steps_per_episode": 1, "max_new_tokens": 16,
               "minibatch_size": 2, "value_pretrain_steps": 0, "checkpoint_every": 1}  # fmt: skip
        cfg = validate_config("ppo", ppo)
        hooks = NullHooks(quiet=True)
        result = run(RunSpec("ppo", cfg, vlm, tmp_path / "ppo"), hooks, source=source)
        assert result.status == "succeeded" and result.checkpoint is not None
        (step, metrics), *_ = hooks.metrics
        assert metrics["rl/turns_trained"] >= 2 and "rl/policy_loss" in metrics and "rl/value_loss" in metrics
        assert (result.checkpoint / "preprocessor_config.json").is_file() or (
            result.checkpoint / "processor_config.json"
        ).is_file()
    finally:
        source.close()


def test_a_sandbox_whose_browser_died_is_relaunched_and_rolls_out_again(vlm: Path, pool: BrowserPool) -> None:
    provider = pool.providers[0]
    chromium = provider._procs.chromium if provider._procs is not None else None
    assert chromium is not None and provider.health().ok
    chromium.kill()
    chromium.wait(10)
    assert not provider.health().ok
    source = source_for(pool)
    try:
        source.publish(0, vlm)
        source.request(TASK, 2, max_steps=1)
        episodes = poll(source, 2)
    finally:
        source.close()
    # The first attempt met the dead browser; the sandbox was relaunched and both episodes ran.
    assert source.errors >= 1
    assert len(episodes) == 2 and all(ep.turns for ep in episodes), episodes
    assert provider.health().ok


def test_a_sandbox_of_the_same_name_in_another_root_is_confined_apart(
    pool: BrowserPool, tmp_path: Path
) -> None:
    mine = pool.providers[0]
    assert mine.health().ok
    # Another process's sandbox of the same name (another pool, a host): its own cgroup, so stopping it
    # (which kills everything in its cgroup) leaves this one running.
    profile = Profile(name="train-browser", provider="browser", width=1280, height=720)
    root = tmp_path / "other"
    root.mkdir()
    _traversable(root)
    other = BrowserProvider(sandbox_id=mine.sandbox_id, profile=profile, root=root)
    other.slot = worker_slot(291)
    other.start()
    try:
        assert other.health().ok
        if mine._spec is not None and mine._spec.cgroup is not None:
            assert other._spec is not None and other._spec.cgroup is not None
            assert set(mine._spec.cgroup.dirs).isdisjoint(other._spec.cgroup.dirs)
    finally:
        other.stop()
    assert mine.health().ok
