"""Training a vision-language policy: the same trainers, on the screenshots its prompts carry.

A tiny Qwen2.5-VL (`build_tiny_qwen2_5_vl`), the architecture of UI-TARS-1.5, Qwen2.5-VL and OpenCUA:
loaded with its processor (agent_core.policies.qwen_vl) + AutoModelForImageTextToText, prompts encoded by
the chat template with each image's tokens, exactly as `LocalPolicy` encodes them at rollout time, and
scored with the model's multimodal rotary positions (mm_token_type_ids over prompt and response).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from agent_core.env import Obs
from agent_core.memory import build_messages
from agent_core.policies.base import PolicyInput
from agent_core.policies.local import LocalPolicy
from agent_core.prompts import system_prompt
from agent_core.rl.episodes import RLEpisode, RLTurn
from agent_core.training.batching import token_logprobs
from agent_core.training.checkpoints import latest_checkpoint
from agent_core.training.config import validate_config
from agent_core.training.errors import TrainingError
from agent_core.training.model_io import load_policy_model, response_ids
from agent_core.training.runner import run
from agent_core.training.types import NullHooks, RunSpec, SFTExample

pytest.importorskip("torch")
SCREEN = (112, 84)
INSTRUCTION = "Click the coloured square."
# The same instruction and text for both screens: only the image tells which answer is right.
TARGETS = {"red": "Action: click(start_box='(20,30)')", "blue": "Action: click(start_box='(90,60)')"}


def png(colour: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", SCREEN, colour).save(buf, "PNG")
    return buf.getvalue()


def messages(colour: str) -> list[Any]:
    obs = Obs(png(colour), *SCREEN)
    return build_messages(
        system=system_prompt("browser"), instruction=INSTRUCTION, observation=obs, history=[], images=1
    )


def policy_input(colour: str) -> PolicyInput:
    obs = Obs(png(colour), *SCREEN)
    return PolicyInput(INSTRUCTION, obs, 0, (), messages=messages(colour), screen=SCREEN)


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent_core.tiny_models import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("vlm") / "base", vocab_corpus=list(TARGETS.values()))


@pytest.fixture(scope="module")
def sft_vlm(vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, NullHooks]:
    out = tmp_path_factory.mktemp("vlm-sft")
    examples = [SFTExample(messages(c), TARGETS[c], source=c) for c in TARGETS] * 2
    cfg = validate_config("sft", {"max_steps": 60, "batch_size": 4, "lr": 3e-3, "warmup_steps": 5,
                                  "checkpoint_every": 1000})  # fmt: skip
    hooks = NullHooks(quiet=True)
    result = run(RunSpec("sft", cfg, vlm, out), hooks, examples=examples)
    assert result.status == "succeeded" and result.checkpoint is not None
    return result.checkpoint, hooks


def test_sft_teaches_a_vlm_an_answer_only_its_screenshot_tells_apart(sft_vlm: tuple[Path, NullHooks]) -> None:
    checkpoint, hooks = sft_vlm
    losses = [m["train/loss"] for _, m in hooks.metrics]
    assert sum(losses[-5:]) < 0.2 * sum(losses[:5]), losses
    # The checkpoint is a vision-language policy again (processor saved with it) and answers each
    # screen with what it was taught for that screen: the images reached the trainer.
    policy = LocalPolicy(model_path=checkpoint, max_new_tokens=24)
    assert policy.vision
    for colour, target in TARGETS.items():
        assert policy.act(policy_input(colour)).text.strip() == target, colour


def test_the_trainer_scores_a_sampled_vlm_response_as_the_sampler_did(vlm: Path) -> None:
    import torch

    policy = LocalPolicy(model_path=vlm, temperature=1.0, seed=3, max_new_tokens=12)
    out = policy.act(policy_input("red"))
    assert out.token_ids and out.logprobs and out.prompt_token_ids
    codec, model = load_policy_model(vlm, device="cpu")
    assert codec.vision
    # The trainer builds the prompt the policy sent, image tokens included, to the token...
    prompt = codec.prompt_ids(messages("red"), None)
    assert tuple(prompt) == out.prompt_token_ids
    ids = torch.tensor([prompt + list(out.token_ids)])
    attn = torch.ones_like(ids)
    n = len(out.token_ids)

    def scored(colour: str) -> list[float]:
        with torch.no_grad():
            lp, _ = token_logprobs(model, ids, attn, images=codec.images(messages(colour)))
        return lp[0, -n:].tolist()

    # ...and scores the response with its image as the sampler did (truncated IS compares these)...
    assert scored("red") == pytest.approx(list(out.logprobs), abs=1e-4)
    # ...which it could not do without the image: another screenshot gives other logprobs.
    assert max(abs(a - b) for a, b in zip(scored("blue"), out.logprobs, strict=True)) > 1e-3


def test_the_policy_never_says_an_image_placeholder_and_the_trainer_scores_what_it_said(vlm: Path) -> None:
    """A response holding the image placeholder token cannot be re-scored (the forward pass counts it as
    an image without features): a random tiny model drew it now and then. With the model pushed to say
    it above everything else, the policy still never does, and the trainer scores the same distribution."""
    import torch

    from agent_core.training.sampling import placeholder_ids

    policy = LocalPolicy(model_path=vlm, temperature=1.0, seed=5, max_new_tokens=12)
    policy.load()
    model = policy._model
    placeholders = placeholder_ids(model)  # image and video pads
    image_id = model.config.image_token_id
    assert image_id in placeholders
    head = model.get_output_embeddings()
    with torch.no_grad():  # the placeholder's row of the output head points along every hidden state
        head.weight[image_id] = head.weight.abs().max() * 50 * torch.sign(head.weight.mean(dim=0))
    out = policy.act(policy_input("red"))
    assert not set(placeholders) & set(out.token_ids) and len(out.token_ids) == 12
    ids = torch.tensor([list(out.prompt_token_ids) + list(out.token_ids)])
    codec, _ = load_policy_model(vlm, device="cpu")
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.ones_like(ids), images=codec.images(messages("red")))
    assert lp[0, -12:].tolist() == pytest.approx(list(out.logprobs), abs=1e-4)


class ColourSource:
    """One-turn episodes on the red screen: the taught red answer succeeds, the blue one fails.

    Each rollout's tokens and logprobs are the published policy's own (scored, not sampled, so the
    test knows both answers occur in every group)."""

    def __init__(self) -> None:
        self.queue: list[tuple[str, int]] = []
        self.version = 0
        self.model_dir: Path | None = None
        self.n = 0
        self.seed = 0

    def tasks(self) -> list[str]:
        return ["colour/red"]

    def publish(self, version: int, model_dir: Path) -> None:
        self.version, self.model_dir = version, model_dir

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        self.seed += 1
        self.queue += [(task_id, self.seed)] * n
        return self.seed

    def pending(self) -> int:
        return len(self.queue)

    def utilisation(self) -> float | None:
        return None

    def close(self) -> None: ...

    def logprobs(self, text: str) -> tuple[list[int], list[float]]:
        import torch

        assert self.model_dir is not None
        codec, model = load_policy_model(self.model_dir, device="cpu")
        prompt = codec.prompt_ids(messages("red"), None)
        resp = response_ids(codec.tokenizer, text)
        ids = torch.tensor([prompt + resp])
        with torch.no_grad():
            lp, _ = token_logprobs(model, ids, torch.ones_like(ids), images=codec.images(messages("red")))
        return resp, lp[0, -len(resp) :].tolist()

    def poll(self, timeout: float) -> list[RLEpisode]:
        out = []
        while self.queue:
            task_id, seed = self.queue.pop(0)
            good = self.n % 2 == 0
            self.n += 1
            ids, lps = self.logprobs(TARGETS["red"] if good else TARGETS["blue"])
            turn = RLTurn(messages("red"), None, tuple(ids), tuple(lps), parsed=True)
            out.append(RLEpisode(task_id, seed, float(good), (turn,), self.version, steps=1))
        return out


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_rl_on_a_vlm_raises_the_successful_answer_over_the_failed_one(
    algorithm: str, vlm: Path, tmp_path: Path
) -> None:
    source = ColourSource()
    source.publish(0, vlm)
    before = sum(source.logprobs(TARGETS["red"])[1]) - sum(source.logprobs(TARGETS["blue"])[1])
    extra = (
        {"value_pretrain_steps": 0, "critic_lr": 1e-2, "kl_coef": 0.05}
        if algorithm == "ppo"
        else {"max_rollouts": 2, "min_rollouts": 2, "entropy_top": 1.0, "kl_coef": 0.05}
    )
    cfg = validate_config(algorithm, {"iterations": 3, "episodes_per_iteration": 4, "lr": 3e-3,
                                      "minibatch_size": 4, "checkpoint_every": 1, **extra})  # fmt: skip
    hooks = NullHooks(quiet=True)
    result = run(RunSpec(algorithm, cfg, vlm, tmp_path / algorithm), hooks, source=source)
    assert result.status == "succeeded"
    after = sum(source.logprobs(TARGETS["red"])[1]) - sum(source.logprobs(TARGETS["blue"])[1])
    assert after > before + 0.5, (before, after)
    trained = [m for _, m in hooks.metrics]
    assert all(m["rl/turns_trained"] > 0 and "rl/kl_ref" in m for m in trained)
    if algorithm == "grpo":
        # Rollout logprobs were the published policy's, scored with the image: the trainer's π_old, also
        # with the image, matches them, so every per-token IS ratio is 1 (without the image it is not).
        ratios = [(m["rl/is_weight_min"], m["rl/is_weight_max"]) for m in trained]
        assert all(abs(lo - 1) < 1e-4 and abs(hi - 1) < 1e-4 for lo, hi in ratios), ratios
    else:
        assert all("rl/value_loss" in m for m in trained)
    # Each published checkpoint is a vision-language policy LocalPolicy loads.
    assert LocalPolicy(model_path=result.checkpoint).vision


def test_a_vlm_prompt_too_long_for_max_seq_len_is_skipped_not_cut(vlm: Path, tmp_path: Path) -> None:
    codec, _ = load_policy_model(vlm, device="cpu")
    length = len(codec.prompt_ids(messages("red"), None))
    examples = [SFTExample(messages("red"), TARGETS["red"])]
    hooks = NullHooks(quiet=True)
    cfg = validate_config("sft", {"max_steps": 1, "batch_size": 1, "max_seq_len": length - 1})
    with pytest.raises(TrainingError, match="max_seq_len: every example is longer"):
        run(RunSpec("sft", cfg, vlm, tmp_path / "short"), hooks, examples=examples)
    # With room for it, the same example trains.
    cfg = validate_config("sft", {"max_steps": 1, "batch_size": 1, "max_seq_len": length + 64})
    assert run(RunSpec("sft", cfg, vlm, tmp_path / "long"), hooks, examples=examples).status == "succeeded"
    assert latest_checkpoint(tmp_path / "long") is not None


def test_lora_sft_on_screenshots_trains_an_adapter_of_the_language_model_that_loads_as_a_vlm(
    vlm: Path, tmp_path: Path
) -> None:
    """LoRA on a Qwen-VL adapts its language model only (vLLM adapts the decoder; the vision tower has
    projections of the same names): the adapter learns the screen-dependent answers and loads as a VLM."""
    import json

    examples = [SFTExample(messages(c), TARGETS[c], source=c) for c in TARGETS] * 2
    cfg = validate_config("sft", {"lora": "on", "lora_r": 16, "max_steps": 40, "batch_size": 4, "lr": 5e-3,
                                  "warmup_steps": 5, "checkpoint_every": 1000})  # fmt: skip
    result = run(RunSpec("sft", cfg, vlm, tmp_path / "lora"), NullHooks(quiet=True), examples=examples)
    assert result.status == "succeeded" and result.checkpoint is not None
    targets = json.loads((result.checkpoint / "adapter_config.json").read_text())["target_modules"]
    assert targets and all("language_model" in t for t in targets), targets
    policy = LocalPolicy(model_path=result.checkpoint, max_new_tokens=24)
    assert policy.vision
    for colour, target in TARGETS.items():
        assert policy.act(policy_input(colour)).text.strip() == target, colour
