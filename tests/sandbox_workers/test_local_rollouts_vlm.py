"""A vision-language policy's RL through the real thing: a confined Xvfb + Chromium sandbox running a
MiniWoB page, the in-process rollout source sampling a tiny LLaVA-style VLM on its real screenshots, and
the trainer scoring and updating on those screenshots.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.suites import miniwob as suite
from agent_core.training.config import validate_config
from agent_core.training.runner import _token_logprobs, load_policy_model, run
from agent_core.training.types import NullHooks, RunSpec
from sandbox_workers.local_rollouts import BrowserPool, LocalRolloutSource

pytestmark = pytest.mark.slow
pytest.importorskip("transformers")
TASK = "miniwob/click-test"


def test_vlm_rollouts_on_real_screens_are_scored_by_the_trainer_as_sampled_and_train(tmp_path: Path) -> None:
    import torch

    from agent_core.tiny_models import build_tiny_vlm

    vlm = build_tiny_vlm(tmp_path / "vlm")
    specs = {TASK: next(s for s in suite.tasks() if s.id == TASK)}
    pool = BrowserPool(1, tmp_path / "sandboxes", slot_base=290)
    source = LocalRolloutSource(
        specs, pool, policy={"temperature": 1.0, "max_new_tokens": 16, "seed": None}, history_images=1
    )
    try:
        source.publish(0, vlm)
        seed = source.request(TASK, 2, max_steps=1)
        episodes: list = []
        for _ in range(120):
            episodes += source.poll(timeout=1.0)
            if len(episodes) == 2:
                break
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
                lp, _ = _token_logprobs(model, ids, torch.ones_like(ids), images=codec.images(turn.messages))
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
        pool.close()
