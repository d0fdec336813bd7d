"""LoRA runs (config `lora: on`) on the tiny policy: SFT, GRPO and PPO train an adapter on a frozen base,
their checkpoints are adapters (what vLLM's --enable-lora and LocalPolicy load), and they resume.

Figures live in bench/; these tests check what must hold whatever the numbers.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from agent_core.policies.local import LocalPolicy
from agent_core.training.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_base, latest_checkpoint
from agent_core.training.config import LORA_MODULES, ConfigError, validate_config
from agent_core.training.runner import run
from agent_core.training.sft import SFTTrainer
from agent_core.training.tiny_policy import LINEAGE_FILE, build_tiny_policy
from agent_core.training.toy import ToySource, oracle_examples
from agent_core.training.types import NullHooks, RunSpec
from tests.agent_core.test_policy_local import policy_input
from tests.agent_core.training.test_runner import TASKS, SplitToySource

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
LORA = {"lora": "on", "lora_r": 8, "lora_alpha": 16}


class LogHooks(NullHooks):
    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.lines: list[str] = []

    def on_log(self, message: str) -> None:
        self.lines.append(message)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "base"
    return build_tiny_policy(path, hidden_size=32, num_layers=1, num_heads=2, vocab_size=600)


def sft_spec(base: Path, out: Path, resume_from: Path | None = None, **cfg: Any) -> RunSpec:
    config = validate_config("sft", {**LORA, "batch_size": 4, "lr": 1e-2, "checkpoint_every": 4, **cfg})
    return RunSpec("sft", config, base, out, resume_from=resume_from)


@pytest.fixture(scope="module")
def sft_adapter(base: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, NullHooks, str]:
    """A LoRA SFT run of 8 steps: (its last checkpoint, its hooks, the base weights' digest before)."""
    before = digest(base / "model.safetensors")
    out = tmp_path_factory.mktemp("lora-sft")
    hooks = NullHooks(quiet=True)
    result = run(sft_spec(base, out, max_steps=8), hooks, examples=oracle_examples(TASKS, range(12)))
    assert result.status == "succeeded" and result.checkpoint == latest_checkpoint(out)
    return result.checkpoint, hooks, before


def test_lora_sft_trains_only_the_adapter_and_saves_it_as_vllm_loads_adapters(
    base: Path, sft_adapter: tuple[Path, NullHooks, str]
) -> None:
    last, hooks, before = sft_adapter
    losses = [m["train/loss"] for _, m in hooks.metrics]
    assert len(losses) == 8 and sum(losses[-3:]) < sum(losses[:3]), losses
    assert digest(base / "model.safetensors") == before  # the base on disk untouched
    files = {p.name for p in last.iterdir()}
    assert {
        ADAPTER_CONFIG,
        ADAPTER_WEIGHTS,
        "tokenizer.json",
        "tokenizer_config.json",
        "trainer_state.pt",
    } <= files
    assert not files & {"model.safetensors", "config.json", "pytorch_model.bin"}
    # What vLLM 0.32 reads: an absolute base, a list of targets, r and lora_alpha, no modules_to_save.
    config = json.loads((last / ADAPTER_CONFIG).read_text())
    assert config["base_model_name_or_path"] == str(base.resolve()) and adapter_base(last) == base.resolve()
    assert isinstance(config["target_modules"], list) and set(config["target_modules"]) == set(LORA_MODULES)
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (8, 16, "LORA")
    assert not config.get("modules_to_save") and config["bias"] == "none" and not config["use_dora"]
    # Only adapter tensors were trained and saved: A and B of each target of the one layer.
    weights = safetensors_torch.load_file(str(last / ADAPTER_WEIGHTS))
    assert len(weights) == 2 * len(LORA_MODULES) and all(".lora_" in k for k in weights)
    assert all(w.abs().sum() > 0 for k, w in weights.items() if "lora_B" in k)  # B starts at 0: it moved
    state = torch.load(last / "trainer_state.pt", weights_only=False)
    assert len(state["optimizer"]["state"]) == len(weights)
    lineage = json.loads((last / LINEAGE_FILE).read_text())
    assert lineage["base"] == json.loads((base / LINEAGE_FILE).read_text())["base"]


def test_a_lora_checkpoint_resumes_with_its_adapter_and_optimizer(
    base: Path, sft_adapter: tuple[Path, NullHooks, str], tmp_path: Path
) -> None:
    last, _, _ = sft_adapter
    saved = safetensors_torch.load_file(str(last / ADAPTER_WEIGHTS))
    state = torch.load(last / "trainer_state.pt", weights_only=False)
    trainer = SFTTrainer(sft_spec(base, tmp_path, resume_from=last, max_steps=10), NullHooks(quiet=True))
    assert trainer.step == 8 and trainer.lora_base == base.resolve()
    live = {k.replace(".default", ""): v for k, v in trainer.model.named_parameters() if v.requires_grad}
    assert live.keys() == saved.keys()
    assert all(torch.equal(live[k].detach(), saved[k]) for k in saved)
    restored = trainer.optimizer.state_dict()["state"]
    assert all(
        torch.equal(restored[i]["exp_avg"], s["exp_avg"]) for i, s in state["optimizer"]["state"].items()
    )
    result = trainer.run(oracle_examples(TASKS, range(12)))
    assert result.step == 10 and adapter_base(result.checkpoint) == base.resolve()


def test_local_policy_rolls_out_on_an_adapter_merged_into_its_base(
    base: Path, sft_adapter: tuple[Path, NullHooks, str]
) -> None:
    last, _, _ = sft_adapter
    adapted = LocalPolicy(model_path=last, max_new_tokens=4).act(policy_input())
    plain = LocalPolicy(model_path=base, max_new_tokens=4).act(policy_input())
    assert adapted.token_ids and adapted.prompt_token_ids == plain.prompt_token_ids
    assert adapted.logprobs[0] != pytest.approx(plain.logprobs[0])  # the adapter is applied
    src = ToySource(TASKS, policy={"temperature": 0.0})
    src.publish(0, last)
    assert src.episode(TASKS[0], 1, 1).turns[0].response_ids
    src.close()


def test_an_adapter_whose_base_is_gone_is_refused_saying_so(
    sft_adapter: tuple[Path, NullHooks, str], tmp_path: Path
) -> None:
    import shutil

    from agent_core.policies import PolicyError
    from agent_core.training.errors import TrainingError
    from agent_core.training.model_io import load_policy_model

    moved = tmp_path / "adapter"
    shutil.copytree(sft_adapter[0], moved)
    config = json.loads((moved / ADAPTER_CONFIG).read_text())
    gone = str(tmp_path / "no-such-base")
    (moved / ADAPTER_CONFIG).write_text(json.dumps({**config, "base_model_name_or_path": gone}))
    with pytest.raises(PolicyError, match=f"LoRA adapter whose base model {gone} is gone"):
        LocalPolicy(model_path=moved)
    with pytest.raises(TrainingError, match="is gone"):
        load_policy_model(moved, device="cpu")


def test_full_fine_tuning_from_an_adapter_trains_the_merged_weights(
    sft_adapter: tuple[Path, NullHooks, str], tmp_path: Path
) -> None:
    config = validate_config("sft", {"batch_size": 2, "max_steps": 1})
    result = run(RunSpec("sft", config, sft_adapter[0], tmp_path), NullHooks(quiet=True),
                 examples=oracle_examples(TASKS, range(2)))  # fmt: skip
    assert (result.checkpoint / "config.json").is_file() and adapter_base(result.checkpoint) is None
    assert not (result.checkpoint / ADAPTER_CONFIG).exists()


RL = {**LORA, "iterations": 2, "episodes_per_iteration": 2, "max_steps_per_episode": 1,
      "max_new_tokens": 16, "minibatch_size": 4, "checkpoint_every": 1}  # fmt: skip


def test_lora_grpo_trains_on_from_an_adapter_and_publishes_adapters(
    base: Path, sft_adapter: tuple[Path, NullHooks, str], tmp_path: Path
) -> None:
    source = SplitToySource(TASKS, seed_base=40_000)
    hooks = LogHooks()
    # The run's rank (16) differs from the starting adapter's (8): the adapter trains on as it is,
    # so every checkpoint stays an adapter of the original base.
    cfg = validate_config("grpo", {**RL, "lora_r": 16, "group_size": 2, "min_rollouts": 2, "max_rollouts": 2})
    result = run(RunSpec("grpo", cfg, sft_adapter[0], tmp_path / "grpo"), hooks, source=source)
    assert result.status == "succeeded" and result.step == 2
    assert any("is a LoRA adapter: training it on" in line for line in hooks.lines), hooks.lines
    assert [p.name for _, p in source.published] == ["step-000000", "step-000001", "step-000002"]
    for _, published in source.published:  # each version the rollouts ran was an adapter of the base
        assert adapter_base(published) == base.resolve()
        assert json.loads((published / ADAPTER_CONFIG).read_text())["r"] == 8
    state = torch.load(result.checkpoint / "trainer_state.pt", weights_only=False)
    assert state["turns_trained"] > 0
    moved = safetensors_torch.load_file(str(result.checkpoint / ADAPTER_WEIGHTS))
    start = safetensors_torch.load_file(str(sft_adapter[0] / ADAPTER_WEIGHTS))
    assert any(not torch.equal(moved[k], start[k]) for k in start)


def test_lora_ppo_trains_a_lora_critic_and_resumes_it(base: Path, tmp_path: Path) -> None:
    cfg = {**RL, "iterations": 1, "value_pretrain_steps": 0}
    first = run(RunSpec("ppo", validate_config("ppo", cfg), base, tmp_path), NullHooks(quiet=True),
                source=ToySource(TASKS, seed_base=50_000))  # fmt: skip
    assert first.status == "succeeded" and adapter_base(first.checkpoint) == base.resolve()
    critic = torch.load(first.checkpoint / "trainer_state.pt", weights_only=False)["critic"]
    # Its adapter and its full head, never a copy of the backbone.
    assert critic and all(".lora_" in k or k.startswith("head.") for k in critic)
    assert {"head.weight", "head.bias"} <= critic.keys()
    hooks = NullHooks(quiet=True)
    more = validate_config("ppo", {**cfg, "iterations": 2})
    resumed = run(RunSpec("ppo", more, base, tmp_path, resume_from=first.checkpoint), hooks,
                  source=ToySource(TASKS, seed_base=60_000))  # fmt: skip
    assert resumed.step == 2 and "rl/value_loss" in hooks.metrics[-1][1]


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        ({"lora": "on", "lora_r": 12}, "lora_r", "must be one of 8, 16, 32, 64, 128, 256, got 12"),
        ({"lora": True}, "lora", "must be text"),
        ({"lora": "yes"}, "lora", "must be one of off, on"),
        ({"lora_targets": "q_proj,lm_head"}, "lora_targets", "'lm_head' cannot get an adapter"),
        ({"lora_targets": "embed_tokens"}, "lora_targets", "embeddings and lm_head never do"),
        ({"lora_targets": " , "}, "lora_targets", "name at least one module"),
        ({"lora_dropout": 1.5}, "lora_dropout", "at most 0.9"),
    ],
)
def test_lora_config_is_validated_naming_the_field(config: dict[str, Any], field: str, words: str) -> None:
    for algorithm in ("sft", "grpo", "ppo"):
        with pytest.raises(ConfigError) as err:
            validate_config(algorithm, config)
        assert (
            err.value.field == field and str(err.value).startswith(f"{field}: ") and words in str(err.value)
        )


def test_lora_is_off_by_default_and_its_settings_normalised() -> None:
    cfg = validate_config("sft", {})
    assert (cfg["lora"], cfg["lora_r"], cfg["lora_alpha"], cfg["lora_dropout"]) == ("off", 16, 32, 0.0)
    assert cfg["lora_targets"] == "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    cfg = validate_config("ppo", {"lora": "on", "lora_r": "64", "lora_targets": " v_proj, q_proj,v_proj "})
    assert (cfg["lora_r"], cfg["lora_targets"]) == (64, "v_proj,q_proj")


@pytest.mark.slow
def test_lora_on_a_vision_language_model_adapts_only_its_language_model(tmp_path: Path) -> None:
    from agent_core.tiny_models import build_tiny_vlm
    from agent_core.training.types import SFTExample
    from tests.agent_core.training.test_vlm_training import TARGETS, messages
    from tests.agent_core.training.test_vlm_training import policy_input as vlm_input

    vlm = build_tiny_vlm(tmp_path / "vlm", vocab_corpus=list(TARGETS.values()))
    examples = [SFTExample(messages(c), TARGETS[c], source=c) for c in TARGETS]
    cfg = validate_config("sft", {**LORA, "max_steps": 2, "batch_size": 2})
    result = run(RunSpec("sft", cfg, vlm, tmp_path / "run"), NullHooks(quiet=True), examples=examples)
    targets = json.loads((result.checkpoint / ADAPTER_CONFIG).read_text())["target_modules"]
    assert targets and all(".language_model." in t for t in targets)
    policy = LocalPolicy(model_path=result.checkpoint, max_new_tokens=3)
    assert policy.vision and policy.act(vlm_input("red")).token_ids
