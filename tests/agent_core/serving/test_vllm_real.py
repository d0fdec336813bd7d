"""The real inference engine: vLLM (the CPU build here) serving the tiny policy.

What RL on the engine's rollouts rests on is checked against transformers in this process: the prompt
vLLM tokenized is the one a trainer rebuilds (`model_io.prompt_ids`), and the logprobs it returns are
the model's (within float tolerance). A LoRA adapter is hot-loaded into the running server and
answers requests that name it, through the policy-server agent's heartbeat reply."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import pytest
from PIL import Image

from agent_core.env import Obs
from agent_core.policies import PolicyInput, make_policy
from agent_core.serving.agent import ServerAgent
from tests.agent_core.serving.vllm_proc import vllm_engine
from tests.agent_core.serving.webapp_stub import WebApp

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.vllm_main]
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from agent_core.training.tiny_policy import build_tiny_policy

    return build_tiny_policy(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def engine(tiny, tmp_path_factory):
    with vllm_engine(tiny, "tiny-policy", tmp_path_factory.mktemp("logs"), max_loras=2) as e:
        yield e


def screen_input() -> PolicyInput:
    buf = io.BytesIO()
    Image.new("RGB", (320, 200), "white").save(buf, format="PNG")
    url = "data:image/png;base64," + __import__("base64").b64encode(buf.getvalue()).decode()
    messages = (
        {"role": "system", "content": "You are a GUI agent."},
        {
            "role": "user",
            "content": (
                {"type": "text", "text": "Click OK"},
                {"type": "image_url", "image_url": {"url": url}},
            ),
        },
    )
    obs = Obs(screenshot=b"", width=320, height=200, a11y='button "OK" @(160,100)')
    return PolicyInput(instruction="Click OK", observation=obs, step_index=0, messages=messages)


def model_logprobs(
    model_dir: Path, prompt: list[int], response: list[int], adapter: Path | None = None
) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True).eval()
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0].float()
    return [float(torch.log_softmax(logits[len(prompt) + k - 1], -1)[t]) for k, t in enumerate(response)]


def test_the_engine_serves_the_tiny_policy_with_the_prompt_and_logprobs_a_trainer_computes(engine, tiny):
    from transformers import AutoTokenizer

    from agent_core.training.model_io import prompt_ids

    policy = make_policy(
        "openai",
        base_url=engine.spec.base_url,
        model="tiny-policy",
        text_only=True,
        max_new_tokens=12,
        temperature=1.0,
        coords="absolute",
        extra_body={"return_token_ids": True, "seed": 3},
    )
    inp = screen_input()
    out = policy.act(inp)
    assert out.token_ids and out.logprobs and out.prompt_token_ids
    assert len(out.token_ids) == len(out.logprobs) <= 12
    assert out.meta["server"] == engine.spec.base_url and out.meta["model"] == "tiny-policy"
    # The prompt vLLM read is the one the trainer rebuilds from the same messages.
    tokenizer = AutoTokenizer.from_pretrained(str(tiny), local_files_only=True)
    assert list(out.prompt_token_ids) == prompt_ids(tokenizer, inp.messages, inp.observation.a11y)
    # π_rollout (vLLM) against π_old (transformers) on the sampled tokens: the same model. vLLM's CPU
    # kernels differ from transformers' by up to ~3e-3 nats (measured: 3.0e-3 on a loaded machine, where
    # oneDNN blocks its sums differently): a ratio within 0.5 % of 1, far inside any clip range.
    ours = model_logprobs(tiny, list(out.prompt_token_ids), list(out.token_ids))
    assert ours == pytest.approx(list(out.logprobs), abs=5e-3)
    # The engine counted what it generated.
    metrics = engine.metrics()
    assert metrics["generation_tokens_total"] >= len(out.token_ids) and metrics["running"] == 0
    assert engine.models() == [{"id": "tiny-policy", "kind": "base"}]


def make_adapter(base: Path, out: Path) -> Path:
    """A LoRA adapter of the base with non-zero weights (so it answers differently), saved by peft."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), local_files_only=True)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(model, config)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    peft_model.save_pretrained(str(out))
    cfg = json.loads((out / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(base)
    (out / "adapter_config.json").write_text(json.dumps(cfg))
    return out


def test_an_adapter_the_web_app_names_is_hot_loaded_and_answers(engine, tiny, tmp_path):
    pytest.importorskip("peft")
    adapter = make_adapter(tiny, tmp_path / "adapter")
    web = WebApp([{"name": "tiny-lora-1", "path": str(adapter)}])
    agent = ServerAgent(engine, name="real-1", web_url=web.url, token="t", engine_label="vllm-cpu")
    try:
        agent._watch_engine()
        assert agent.state == "serving"
        reply = agent.beat()
        assert reply is not None
        agent.apply(reply)
        assert {"id": "tiny-lora-1", "kind": "lora", "path": str(adapter)} in engine.models()
        agent.beat()
        assert any(m["id"] == "tiny-lora-1" for m in web.beats[-1]["models"])
        assert not agent.errors

        body = {
            "messages": [{"role": "user", "content": "Click OK"}],
            "max_tokens": 6,
            "temperature": 0.0,
            "logprobs": True,
            "return_token_ids": True,
        }
        base = httpx.post(
            engine.spec.base_url + "/chat/completions", json={**body, "model": "tiny-policy"}, timeout=60
        ).json()
        lora = httpx.post(
            engine.spec.base_url + "/chat/completions", json={**body, "model": "tiny-lora-1"}, timeout=60
        ).json()
        assert lora["model"] == "tiny-lora-1"
        base_lp = [c["logprob"] for c in base["choices"][0]["logprobs"]["content"]]
        lora_lp = [c["logprob"] for c in lora["choices"][0]["logprobs"]["content"]]
        assert base_lp != pytest.approx(lora_lp, abs=1e-3)
        # The adapter's logprobs are the adapter's: transformers + peft agree with the engine.
        prompt, response = lora["prompt_token_ids"], lora["choices"][0]["token_ids"]
        # (vLLM applies LoRA with its own kernels: agreement to a few thousandths of a nat)
        assert model_logprobs(tiny, prompt, response, adapter) == pytest.approx(lora_lp, abs=1e-2)

        # Retired by the web app: unloaded at the next reply.
        web.reply["adapters"] = []
        agent.apply({"adapters": []})
        assert [m["id"] for m in engine.models()] == ["tiny-policy"]
    finally:
        web.close()


def test_a_lora_run_checkpoint_is_hot_loaded_and_answers_as_peft_and_the_local_policy(engine, tiny, tmp_path):
    """A LoRA SFT run's checkpoint (the trainer's own adapter files) against the base it names."""
    pytest.importorskip("peft")
    from agent_core.policies.local import LocalPolicy
    from agent_core.training.config import validate_config
    from agent_core.training.runner import run
    from agent_core.training.toy import oracle_examples
    from agent_core.training.types import NullHooks, RunSpec

    messages = [{"role": "user", "content": "Click the button that reads OK."}]
    cfg = validate_config("sft", {"lora": "on", "lora_r": 16, "batch_size": 4, "lr": 1e-2, "max_steps": 6})
    result = run(RunSpec("sft", cfg, tiny, tmp_path / "run"), NullHooks(quiet=True),
                 examples=oracle_examples(["toy/buttons-2"], range(8)))  # fmt: skip
    adapter = result.checkpoint
    assert adapter is not None
    body = {
        "messages": messages,
        "max_tokens": 6,
        "temperature": 0.0,
        "logprobs": True,
        "return_token_ids": True,
    }
    engine.load_adapter("run-lora", adapter)
    try:
        assert {"id": "run-lora", "kind": "lora", "path": str(adapter)} in engine.models()
        url = engine.spec.base_url + "/chat/completions"
        plain = httpx.post(url, json={**body, "model": "tiny-policy"}, timeout=120).json()
        lora = httpx.post(url, json={**body, "model": "run-lora"}, timeout=120).json()
    finally:
        engine.unload_adapter("run-lora")
    assert lora["model"] == "run-lora", lora
    lora_lp = [c["logprob"] for c in lora["choices"][0]["logprobs"]["content"]]
    plain_lp = [c["logprob"] for c in plain["choices"][0]["logprobs"]["content"]]
    assert lora_lp != pytest.approx(plain_lp, abs=1e-3)  # the adapter is applied
    prompt, response = lora["prompt_token_ids"], lora["choices"][0]["token_ids"]
    # vLLM applies LoRA with its own kernels: agreement to a hundredth of a nat.
    assert model_logprobs(tiny, prompt, response, adapter) == pytest.approx(lora_lp, abs=1e-2)
    local = LocalPolicy(model_path=adapter, max_new_tokens=6).act(
        PolicyInput("Click OK", Obs(b"", 320, 200), 0, messages=messages)
    )
    assert list(local.prompt_token_ids or ()) == prompt
    assert local.logprobs is not None and local.logprobs[0] == pytest.approx(lora_lp[0], abs=1e-2)


def test_the_engine_returns_the_logprobs_the_trainer_computes_at_a_temperature_and_top_p(engine, tiny):
    """With --logprobs-mode processed_logprobs the engine's log-probs are those of the distribution it
    sampled from (temperature, top-p nucleus): the trainer's π_old at the run's sampling, not the raw."""
    from agent_core.training.batching import Sample, gather, pad_batch, token_logprobs
    from agent_core.training.model_io import load_policy_model

    torch = pytest.importorskip("torch")
    sampling = {"temperature": 0.7, "top_p": 0.9}
    policy = make_policy(
        "openai",
        base_url=engine.spec.base_url,
        model="tiny-policy",
        text_only=True,
        max_new_tokens=12,
        temperature=sampling["temperature"],
        extra_body={"return_token_ids": True, "seed": 3, "top_p": sampling["top_p"], "top_k": 0},
    )
    out = policy.act(screen_input())
    assert out.token_ids and out.logprobs and out.prompt_token_ids
    model = load_policy_model(tiny, device="cpu")[1]
    ids, attn, mask, plen = pad_batch([Sample(list(out.prompt_token_ids), list(out.token_ids))], 0, "cpu")
    n = len(out.token_ids)
    with torch.no_grad():
        ours = gather(token_logprobs(model, ids, attn, mask=mask, sampling=sampling)[0], mask, plen, [n])[0]
        raw = gather(token_logprobs(model, ids, attn, mask=mask)[0], mask, plen, [n])[0]
    # vLLM's CPU kernels differ from transformers' by ~2e-3 to 3e-3 at temperature 1 (above); the temperature
    # scales that by 1/0.7, and the nucleus's edge can differ by a token. The raw distribution's
    # log-probabilities are off by far more.
    gap = max(abs(a - b) for a, b in zip(ours, out.logprobs, strict=True))
    raw_gap = max(abs(a - b) for a, b in zip(raw, out.logprobs, strict=True))
    assert gap < 1e-2 < 5e-2 < raw_gap, f"processed: {gap:.4f} from vLLM's; raw: {raw_gap:.4f}"
