"""Interpolating LoRA adapters of one base: the weighted average of their tensors, an adapter again;
an adapter with a full checkpoint, adapters of different bases or shapes are refused, named."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent_core.policies.local import LocalPolicy
from agent_core.rl.interpolate import InterpolationError
from agent_core.training.adapter_merge import check_models_mergeable, interpolate_models
from agent_core.training.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_base
from agent_core.training.config import LORA_MODULES
from agent_core.training.lora import LoraSettings, add_adapter, save_adapter
from agent_core.training.tiny_policy import LINEAGE_FILE

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def make_adapter(
    base: Path, out: Path, *, seed: int, r: int = 8, targets: Sequence[str] = LORA_MODULES
) -> Path:
    """A LoRA adapter of `base` with random (non-zero) weights, saved as a LoRA run saves one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base))
    torch.manual_seed(seed)
    model = add_adapter(model, LoraSettings(r=r, alpha=2 * r, dropout=0.0, targets=tuple(targets)), base)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.05)
    save_adapter(model, out, base)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(out))
    if (base / LINEAGE_FILE).is_file():
        shutil.copy2(base / LINEAGE_FILE, out / LINEAGE_FILE)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from agent_core.tiny_models import build_tiny_causal_lm

    root = tmp_path_factory.mktemp("adapters")
    base = build_tiny_causal_lm(root / "base", seed=1, hidden_size=32, num_layers=1)
    other = build_tiny_causal_lm(root / "other-base", seed=2, hidden_size=32, num_layers=1)
    return {
        "base": base,
        "a": make_adapter(base, root / "a", seed=1),
        "b": make_adapter(base, root / "b", seed=2),
        "r16": make_adapter(base, root / "r16", seed=3, r=16),
        "other": make_adapter(other, root / "on-other", seed=4),
    }


def test_two_adapters_merge_into_their_weighted_average_which_loads(
    models: dict[str, Path], tmp_path: Path
) -> None:
    out = interpolate_models([models["a"], models["b"]], [0.25, 0.75], tmp_path / "merged")
    a = safetensors_torch.load_file(str(models["a"] / ADAPTER_WEIGHTS))
    b = safetensors_torch.load_file(str(models["b"] / ADAPTER_WEIGHTS))
    merged = safetensors_torch.load_file(str(out / ADAPTER_WEIGHTS))
    assert merged.keys() == a.keys() and any(not torch.equal(a[k], b[k]) for k in a)
    for key, tensor in merged.items():
        torch.testing.assert_close(tensor, 0.25 * a[key] + 0.75 * b[key])
    # An adapter of the same base again, nothing else: no full weights, no trainer state.
    assert adapter_base(out) == models["base"].resolve()
    assert not (out / "model.safetensors").exists() and not (out / "trainer_state.pt").exists()
    lineage = json.loads((out / LINEAGE_FILE).read_text())
    assert lineage["merged_from"] == [str(models["a"]), str(models["b"])] and lineage["weights"] == [
        0.25,
        0.75,
    ]
    policy = LocalPolicy(model_path=out, max_new_tokens=3)
    from tests.agent_core.test_policy_local import policy_input

    assert policy.act(policy_input()).token_ids


def test_an_adapter_never_merges_with_a_full_model_another_base_or_another_shape(
    models: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(InterpolationError, match=r"is a LoRA adapter and .*base a full model"):
        check_models_mergeable([models["a"], models["base"]], [0.5, 0.5])
    with pytest.raises(InterpolationError, match="adapters of different bases cannot be merged"):
        check_models_mergeable([models["a"], models["other"]], [0.5, 0.5])
    with pytest.raises(InterpolationError, match=r"differ in shape: r: 8 vs 16"):
        interpolate_models([models["a"], models["r16"]], [0.5, 0.5], tmp_path / "no")
    with pytest.raises(InterpolationError, match="weights must sum to 1"):
        check_models_mergeable([models["a"], models["b"]], [0.5, 0.6])
    assert not (tmp_path / "no").exists()


def test_adapter_base_tells_an_adapter_from_a_full_checkpoint(
    models: dict[str, Path], tmp_path: Path
) -> None:
    assert adapter_base(models["base"]) is None
    assert adapter_base(models["a"]) == models["base"].resolve()
    relative = tmp_path / "relative"
    shutil.copytree(models["a"], relative)
    config = json.loads((relative / ADAPTER_CONFIG).read_text())
    (relative / ADAPTER_CONFIG).write_text(json.dumps({**config, "base_model_name_or_path": "Qwen/Qwen2-7B"}))
    from agent_core.policies import PolicyError
    from agent_core.training.checkpoints import AdapterError

    with pytest.raises(AdapterError, match="'Qwen/Qwen2-7B': an adapter here needs the absolute path"):
        adapter_base(relative)
    with pytest.raises(PolicyError, match="absolute path"):
        LocalPolicy(model_path=relative)
