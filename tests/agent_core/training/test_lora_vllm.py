"""A LoRA run's checkpoint served by the real inference engine: vLLM (the CPU build here) hot-loads it
with `POST /v1/load_lora_adapter` against the base its adapter_config.json names, and answers with the
logprobs that peft and the in-process LocalPolicy give."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agent_core.env import Obs
from agent_core.policies.base import PolicyInput
from agent_core.policies.local import LocalPolicy
from agent_core.training.config import validate_config
from agent_core.training.runner import run
from agent_core.training.tiny_policy import build_tiny_policy
from agent_core.training.toy import oracle_examples
from agent_core.training.types import NullHooks, RunSpec
from tests.agent_core.serving.test_vllm_real import model_logprobs
from tests.agent_core.serving.vllm_proc import vllm_engine

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
pytest.importorskip("peft")

MESSAGES = [{"role": "user", "content": "Click the button that reads OK."}]


def test_vllm_hot_loads_a_lora_run_checkpoint_and_answers_as_peft_and_local_policy(tmp_path: Path) -> None:
    # The CPU engine's attention needs a head size of 32 or more: the tiny policy's default shape.
    base = build_tiny_policy(tmp_path / "base")
    cfg = validate_config("sft", {"lora": "on", "lora_r": 16, "batch_size": 4, "lr": 1e-2, "max_steps": 6})
    result = run(RunSpec("sft", cfg, base, tmp_path / "run"), NullHooks(quiet=True),
                 examples=oracle_examples(["toy/buttons-2"], range(8)))  # fmt: skip
    adapter = result.checkpoint
    assert adapter is not None
    body = {
        "messages": MESSAGES,
        "max_tokens": 6,
        "temperature": 0.0,
        "logprobs": True,
        "return_token_ids": True,
    }
    with vllm_engine(base, "tiny", tmp_path, max_loras=1) as engine:
        engine.load_adapter("run-lora", adapter)
        assert {"id": "run-lora", "kind": "lora", "path": str(adapter)} in engine.models()
        url = engine.spec.base_url + "/chat/completions"
        plain = httpx.post(url, json={**body, "model": "tiny"}, timeout=120).json()
        lora = httpx.post(url, json={**body, "model": "run-lora"}, timeout=120).json()
    assert lora["model"] == "run-lora", lora
    lora_lp = [c["logprob"] for c in lora["choices"][0]["logprobs"]["content"]]
    plain_lp = [c["logprob"] for c in plain["choices"][0]["logprobs"]["content"]]
    assert lora_lp != pytest.approx(plain_lp, abs=1e-3)  # the adapter is applied
    prompt, response = lora["prompt_token_ids"], lora["choices"][0]["token_ids"]
    # vLLM applies LoRA with its own kernels: agreement to a hundredth of a nat.
    assert model_logprobs(base, prompt, response, adapter) == pytest.approx(lora_lp, abs=1e-2)
    local = LocalPolicy(model_path=adapter, max_new_tokens=6).act(
        PolicyInput("Click OK", Obs(b"", 320, 200), 0, messages=MESSAGES)
    )
    assert list(local.prompt_token_ids) == prompt
    assert local.logprobs[0] == pytest.approx(lora_lp[0], abs=1e-2)
