"""The real inference engine serving the architecture labs bring: a tiny Qwen2.5-VL on vLLM (CPU build).

The engine is started as `python -m agent_core.serving` starts it (agent_core.serving.engine's
vision_engine_args: a context for the current screenshot and three in the history at the profile's screen,
the checkpoint's pixel limits, four images a prompt). What RL on its rollouts rests on is checked against
the trainer in this process: the prompt ids vLLM built, image tokens expanded, are the ones the trainer
rebuilds (QwenVLProcessor), and the log-probs it returns are the ones the trainer computes for the
sampled tokens with the same screenshots (figures printed)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_core.actions import Click
from agent_core.data.trajectory import StepRecord
from agent_core.env import Obs
from agent_core.memory import build_messages
from agent_core.serving.engine import vision_engine_args
from tests.agent_core.serving.vllm_proc import vllm_engine

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
pytest.importorskip("transformers")
SCREEN = (1280, 720)
HISTORY_IMAGES = 3


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent_core.tiny_models import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("qvl") / "model", max_pixels=28 * 28 * 256)


@pytest.fixture(scope="module")
def engine(qwen: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    context, args = vision_engine_args(qwen, screen=SCREEN, history_images=HISTORY_IMAGES)
    # Room for four screenshots' tokens (252 each at this checkpoint's pixel cap), the text and the reply.
    assert context is not None and context >= 4 * (252 + 2) + 2048 + 512
    with vllm_engine(
        qwen,
        "tiny-qwen-vl",
        tmp_path_factory.mktemp("logs"),
        max_model_len=context,
        extra_args=tuple(args),
        dtype="float32",
        max_loras=1,
    ) as e:
        yield e


def screenshot(step: int) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", SCREEN, "white")
    draw = ImageDraw.Draw(img)
    for x in range(0, SCREEN[0], 40):
        draw.line([(x, 0), (SCREEN[0] - x, SCREEN[1])], fill=((x * 7 + step * 50) % 256, 90, 200), width=3)
    draw.rectangle([200 + 150 * step, 300, 300 + 150 * step, 380], fill="red")
    draw.text((40, 40), f"Step {step}: press Submit", fill="black")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def prompt(steps: int) -> list[Any]:
    """The agent's own prompt after `steps` clicks: the screenshots of the last three kept, then the
    current screen (agent_core.memory.build_messages)."""
    history = [
        StepRecord(
            index=i,
            observation=Obs(screenshot(i), *SCREEN),
            thought=f"The red box is at step {i}'s place, I click it.",
            action=Click(x=100 + i, y=200 + i),
            action_text=f"click(start_box='({100 + i},{200 + i})')",
        )
        for i in range(steps)
    ]
    obs = Obs(screenshot(steps), *SCREEN)
    return build_messages(
        system="You are a GUI agent.", instruction="Press Submit.", observation=obs, history=history,
        images=HISTORY_IMAGES,
    )  # fmt: skip


def chat(engine: Any, messages: list[Any], **extra: Any) -> httpx.Response:
    body: dict[str, Any] = {
        "model": "tiny-qwen-vl",
        "messages": messages,
        "max_tokens": 12,
        "temperature": 1.0,
    }
    body.update({"logprobs": True, "return_token_ids": True, **extra})
    return httpx.post(engine.spec.base_url + "/chat/completions", json=body, timeout=300)


def test_a_fourth_step_with_three_history_screenshots_is_served_as_the_trainer_rebuilds_and_scores_it(
    engine: Any, qwen: Path
) -> None:
    import torch

    from agent_core.policies.vision import image_spec
    from agent_core.training.batching import token_logprobs
    from agent_core.training.model_io import load_policy_model
    from agent_core.training.sampling import placeholder_ids_in

    messages = prompt(5)  # five steps done: three keep their screenshot, and the current one
    images = sum(
        1
        for m in messages
        for p in (m["content"] if isinstance(m["content"], list) else ())
        if p.get("type") == "image_url"
    )
    assert images == HISTORY_IMAGES + 1
    # As a served twin asks (webapp.policies.services): the image placeholders are never sampled, so
    # the engine's distribution is the trainer's, which excludes them (sampling.without_placeholders).
    config = json.loads((qwen / "config.json").read_text())
    bias = {str(i): -100 for i in placeholder_ids_in(config)}
    reply = chat(engine, messages, seed=11, logit_bias=bias)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    choice = data["choices"][0]
    engine_prompt = list(data["prompt_token_ids"])
    sampled = list(choice["token_ids"])
    engine_lps = [c["logprob"] for c in choice["logprobs"]["content"]]

    codec, model = load_policy_model(qwen, device="cpu")
    assert codec.vision
    rebuilt = codec.prompt_ids(messages, None)
    pad = codec.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    per_image = image_spec(qwen).image_tokens(*SCREEN)  # type: ignore[union-attr]
    assert per_image == 252 and engine_prompt.count(pad) == 4 * per_image
    assert rebuilt == engine_prompt  # token in: the engine's ids are the trainer's, image tokens and all

    ids = torch.tensor([rebuilt + sampled])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.ones_like(ids), images=codec.images(messages))
    trainer_lps = lp[0, -len(sampled) :].tolist()
    gaps = [abs(a - b) for a, b in zip(trainer_lps, engine_lps, strict=True)]
    print(
        f"\nVLM engine vs trainer log-probs over {len(gaps)} sampled tokens, 4 screenshots {SCREEN}: "
        f"mean {sum(gaps) / len(gaps):.6f}, max {max(gaps):.6f} nats"
    )
    # Measured here: mean 0.00003, max 0.00006 (float32); 1-D positions instead of the model's
    # multimodal ones gave mean 0.00075, max 0.0024.
    assert max(gaps) < 5e-4, gaps

    # The same seed draws the same tokens (and a seeded request leaves the CPU engine serving).
    again = chat(engine, messages, seed=11, logit_bias=bias).json()["choices"][0]["token_ids"]
    assert again == sampled and engine.alive()


def test_a_prompt_over_the_image_limit_is_refused_clearly_and_the_engine_serves_on(engine: Any) -> None:
    messages = prompt(2)
    extra = base64.b64encode(screenshot(9)).decode()
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{extra}"}}
    last = messages[-1]
    too_many = [*messages[:-1], {**last, "content": [*last["content"], part, part]}]
    refused = chat(engine, too_many)
    assert refused.status_code == 400 and "image" in refused.text.lower(), refused.text
    assert chat(engine, messages).status_code == 200 and engine.alive()


def test_a_vlm_lora_run_checkpoint_is_hot_loaded_and_answers_as_the_trainer_scores_it(
    engine: Any, qwen: Path, tmp_path: Path
) -> None:
    """A LoRA SFT run on screenshots (the trainer's own adapter of the language model) is loaded into the
    running engine; with the same screenshots its answers are the adapter's, as the trainer scores them."""
    import torch

    from agent_core.training.batching import token_logprobs
    from agent_core.training.config import validate_config
    from agent_core.training.model_io import load_policy_model
    from agent_core.training.runner import run
    from agent_core.training.sampling import placeholder_ids_in
    from agent_core.training.types import NullHooks, RunSpec, SFTExample

    messages = prompt(1)
    examples = [
        SFTExample(messages, "Thought: Submit is the red box.\nAction: click(start_box='(300,340)')")
    ] * 4
    cfg = validate_config("sft", {"lora": "on", "lora_r": 16, "batch_size": 4, "lr": 2e-2, "max_steps": 6})
    result = run(RunSpec("sft", cfg, qwen, tmp_path / "run"), NullHooks(quiet=True), examples=examples)
    adapter = result.checkpoint
    assert result.status == "succeeded" and adapter is not None
    bias = {str(i): -100 for i in placeholder_ids_in(json.loads((qwen / "config.json").read_text()))}
    engine.load_adapter("vl-lora", adapter)
    try:
        plain = chat(engine, messages, temperature=0.0, logit_bias=bias).json()
        lora = chat(engine, messages, model="vl-lora", temperature=0.0, logit_bias=bias).json()
    finally:
        engine.unload_adapter("vl-lora")
    assert lora["model"] == "vl-lora", lora
    lora_lp = [c["logprob"] for c in lora["choices"][0]["logprobs"]["content"]]
    plain_lp = [c["logprob"] for c in plain["choices"][0]["logprobs"]["content"]]
    assert lora_lp != pytest.approx(plain_lp, abs=1e-3)  # the adapter is applied
    codec, model = load_policy_model(adapter, device="cpu")  # the adapter merged onto its base
    assert list(lora["prompt_token_ids"]) == codec.prompt_ids(messages, None)
    sampled = list(lora["choices"][0]["token_ids"])
    ids = torch.tensor([list(lora["prompt_token_ids"]) + sampled])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.ones_like(ids), images=codec.images(messages))
    # vLLM applies LoRA with its own kernels: agreement to a hundredth of a nat, as for the text model.
    assert lp[0, -len(sampled) :].tolist() == pytest.approx(lora_lp, abs=1e-2)
