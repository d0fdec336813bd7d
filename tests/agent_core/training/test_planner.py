"""The memory and time planner: parameter counts against published figures and against torch on the
project's own models, the bytes per parameter the trainers spend, the activation formula, and the
suggestions that make a run fit."""

from __future__ import annotations

import json
import math

import pytest

from agent_core.training.config import validate_config
from agent_core.training.planner import (
    GIB,
    PlanError,
    model_shape,
    plan_run,
    read_model_shape,
)

# Qwen/Qwen2-7B's config.json (the dimensions that count); its safetensors hold 7,615,616,512 parameters.
QWEN2_7B = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}
# Qwen/Qwen2-VL-7B-Instruct (the UI-TARS-7B architecture): 8,291,375,616 parameters.
QWEN2_VL_7B = {
    **QWEN2_7B,
    "model_type": "qwen2_vl",
    "vision_config": {
        "depth": 32,
        "embed_dim": 1280,
        "hidden_size": 3584,
        "mlp_ratio": 4,
        "num_heads": 16,
        "in_chans": 3,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}
H100 = 80 * GIB


def plan(algorithm="sft", shape=None, **config):
    return plan_run(shape or model_shape(QWEN2_7B), algorithm, validate_config(algorithm, config))


def test_qwen2_7b_has_its_published_parameter_count():
    params = model_shape(QWEN2_7B).params
    assert abs(params - 7.6e9) / 7.6e9 < 0.02
    assert params == 7_615_616_512


def test_qwen2_vl_7b_counts_its_vision_tower_and_merger():
    assert model_shape(QWEN2_VL_7B).params == 8_291_375_616


def test_full_fine_tuning_costs_16_bytes_per_parameter_in_float32_and_8_in_bfloat16():
    # The trainers run torch's AdamW on the weights as loaded: no fp32 master copy in bfloat16.
    for dtype, per_param in (("float32", 16), ("bfloat16", 8)):
        p = plan(dtype=dtype, batch_size=1)
        assert (p.weights + p.gradients + p.optimizer) == per_param * p.params


def test_full_fine_tuning_of_7b_does_not_fit_an_80_gib_device_and_lora_r16_does():
    full = plan(dtype="float32", batch_size=1)
    assert full.total > 100 * GIB and not full.fits(H100)
    assert not plan(dtype="bfloat16").fits(H100)  # the default batch of 8 at 2048 tokens
    lora = plan(dtype="bfloat16", lora="on", lora_r=16, batch_size=1)
    assert lora.fits(H100) and lora.method == "LoRA r=16"
    assert lora.trainable == 40_370_176  # r·(in + out) over the 7 projections of 28 layers
    fields = [f.field for f in full.fixes(H100)]
    assert fields[0] == "lora" and "dtype" in fields
    assert full.suggestion(H100).startswith("use LoRA r=16: set lora to on (est. ")
    assert lora.suggestion(H100) == ""


def test_activations_follow_korthikanti_and_checkpointing_keeps_only_layer_inputs():
    eager = model_shape({**QWEN2_7B, "_attn_implementation": "eager"})
    s, b, h, a, layers = 1024, 2, 3584, 28, 28
    p = plan(shape=eager, dtype="bfloat16", batch_size=b, max_seq_len=s)
    assert p.activations == int(layers * s * b * h * (34 + 5 * a * s / h))
    sdpa = plan(dtype="bfloat16", batch_size=b, max_seq_len=s)  # no s×s scores kept
    assert sdpa.activations == layers * s * b * h * 34
    ckpt = plan(dtype="bfloat16", batch_size=b, max_seq_len=s, gradient_checkpointing="on")
    assert ckpt.activations == layers * s * b * h * 2 + s * b * h * 34
    assert ckpt.activations_other == sdpa.activations
    assert plan(dtype="float32", batch_size=b, max_seq_len=s).activations == 2 * sdpa.activations


def test_the_vision_towers_activations_are_counted_for_the_image_tokens_a_sample_can_hold():
    """Qwen2-VL-7B: 4 patches per image token through 32 layers of width 1280; at most every position
    of max_seq_len an image token. Trained (full fine-tuning) it keeps every layer's; frozen (LoRA of
    the language model) only the running layer's."""
    vl = model_shape(QWEN2_VL_7B)
    s, b = 1024, 2
    text = plan(dtype="bfloat16", batch_size=b, max_seq_len=s).activations
    layer = s * b * 4 * 1280 * 34
    full = plan(shape=vl, dtype="bfloat16", batch_size=b, max_seq_len=s)
    assert full.activations == text + 32 * layer
    lora = plan(shape=vl, dtype="bfloat16", batch_size=b, max_seq_len=s, lora="on")
    assert lora.activations == text + layer and any("frozen" in n for n in lora.notes)
    ckpt = plan(shape=vl, dtype="bfloat16", batch_size=b, max_seq_len=s, gradient_checkpointing="on")
    assert ckpt.activations - (28 * s * b * 3584 * 2 + s * b * 3584 * 34) == 32 * s * b * 4 * 1280 * 2 + layer
    assert any("upper bound" in n for n in full.notes)


def test_suggested_sequence_length_and_batch_are_the_largest_that_fit():
    p = plan(dtype="bfloat16", lora="on", batch_size=8)
    device = 40 * GIB
    fixes = {f.field: f for f in p.fixes(device)}
    seq = fixes["max_seq_len"].value
    assert plan(dtype="bfloat16", lora="on", batch_size=8, max_seq_len=seq).fits(device)
    assert not plan(dtype="bfloat16", lora="on", batch_size=8, max_seq_len=seq + 1).fits(device)
    batch = fixes["batch_size"].value
    assert plan(dtype="bfloat16", lora="on", batch_size=batch).fits(device)
    assert not plan(dtype="bfloat16", lora="on", batch_size=batch + 1).fits(device)


def test_ppo_adds_a_critic_and_a_kl_penalty_adds_a_reference_model():
    grpo = plan("grpo", dtype="bfloat16", minibatch_size=1)
    ppo = plan("ppo", dtype="bfloat16", minibatch_size=1)
    assert grpo.critic == 0 and ppo.critic > grpo.weights + grpo.gradients + grpo.optimizer
    assert plan("grpo", dtype="bfloat16", minibatch_size=1, kl_coef=0.1).reference == grpo.params * 2


def test_more_processes_split_the_batch_but_each_holds_the_whole_model():
    one = plan(dtype="bfloat16", batch_size=8)
    two = plan(dtype="bfloat16", batch_size=8, processes=2)
    assert two.micro_batch == 4 and two.weights == one.weights and two.optimizer == one.optimizer
    assert two.ddp_buckets == two.gradients  # DDP's gradient buckets: one more copy
    assert "each of the 2 holds a whole copy" in two.suggestion(10 * GIB)


def test_fsdp_splits_weights_gradients_and_moments_across_the_processes():
    ddp = plan(dtype="bfloat16", batch_size=8, processes=8)
    fsdp = plan(dtype="bfloat16", batch_size=8, processes=8, sharding="fsdp")
    shape = model_shape(QWEN2_7B)
    gathered = (2 * shape.layer_params + shape.params - shape.layers * shape.layer_params) * 2
    assert fsdp.sharded and not ddp.sharded and fsdp.ddp_buckets == 0
    assert fsdp.weights == math.ceil(ddp.weights / 8) + gathered
    assert fsdp.optimizer == math.ceil(ddp.optimizer / 8)
    assert fsdp.activations == ddp.activations  # each process still runs its share of the batch
    # Qwen2-7B full fine-tuning in bfloat16 at batch 8 × 2048: not on one 80 GiB GPU under DDP, on 8 under
    # FSDP2; the planner says so, and suggests the switch.
    assert not ddp.fits(H100) and fsdp.fits(H100)
    assert "set sharding to fsdp" in ddp.suggestion(H100)
    assert any("1/8 of the weights" in note for note in fsdp.notes)


def test_step_time_is_six_flops_per_parameter_and_token():
    p = plan(dtype="bfloat16", batch_size=2, max_seq_len=1024)
    assert p.step_flops == 6 * p.params * 2 * 1024
    assert p.step_seconds(1e15) == pytest.approx(p.step_flops / 0.35e15)


def test_a_missing_or_wrong_config_is_a_plan_error(tmp_path):
    with pytest.raises(PlanError, match="no config.json"):
        read_model_shape(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mystery", "hidden_size": 8}))
    with pytest.raises(PlanError, match="no num_attention_heads"):
        read_model_shape(tmp_path)


def test_an_adapter_directory_is_planned_on_its_base(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps(QWEN2_7B))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    assert read_model_shape(adapter).params == 7_615_616_512


# --- against torch, on the project's own models ------------------------------------------------------


@pytest.mark.slow  # imports torch, transformers and peft and builds two models: ~25 s on a busy 2-core box
def test_the_tiny_policy_and_vlm_counts_match_torch_and_lora_matches_peft(tmp_path):
    pytest.importorskip("torch")
    tfm = pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from agent_core.tiny_models import build_tiny_vlm
    from agent_core.training.lora import LoraSettings, add_adapter
    from agent_core.training.tiny_policy import build_tiny_policy

    policy_dir = build_tiny_policy(tmp_path / "policy")
    model = tfm.AutoModelForCausalLM.from_pretrained(policy_dir, local_files_only=True)
    shape = read_model_shape(policy_dir)
    assert shape.params == sum(p.numel() for p in model.parameters())
    targets = ("q_proj", "v_proj", "down_proj")
    wrapped = add_adapter(model, LoraSettings(r=8, alpha=16, dropout=0.0, targets=targets), policy_dir)
    assert shape.lora_params(8, targets) == sum(p.numel() for p in wrapped.parameters() if p.requires_grad)

    vlm_dir = build_tiny_vlm(tmp_path / "vlm")
    vlm = tfm.AutoModelForImageTextToText.from_pretrained(vlm_dir, local_files_only=True)
    assert read_model_shape(vlm_dir).params == sum(p.numel() for p in vlm.parameters())
