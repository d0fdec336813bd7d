"""A memory and time planner for training runs: what a run needs per device, before it is launched.

From a model directory's config.json (Qwen2 / Llama-style decoders, LLaVA-style and Qwen2-VL-style
vision-language models) and a run's config, `plan_run` estimates the bytes one training process holds:

- weights: every parameter in the run's dtype (LoRA adapters in fp32, as peft keeps them);
- gradients and AdamW's two moments of the trainable parameters, in their dtype. The trainers run
  `torch.optim.AdamW` on the weights as loaded (no fp32 master copy), so full fine-tuning costs 16
  bytes per parameter in float32 and 8 in bfloat16 (a mixed-precision recipe with fp32 masters would
  cost 16 in bfloat16 too: that is not what these trainers do);
- activations kept for the backward pass, by Korthikanti et al. 2022 ("Reducing Activation
  Recomputation in Large Transformer Models", eq. 1): s·b·h·(34 + 5·a·s/h) bytes per layer for 16-bit
  activations (twice that in float32). The 5·a·s/h term is the s×s attention scores, which SDPA
  (transformers' default attention) never keeps, so it counts only where the config asks for eager
  attention. With gradient checkpointing a layer keeps only its input (2·s·b·h) and one layer is
  recomputed at a time;
- the logits: tokens × vocab in the run's dtype, their fp32 copy and log-softmax (batching.token_logprobs)
  and the fp32 gradient of one of them in the backward pass;
- PPO's critic (a second copy of the model with its own optimizer; a LoRA run's critic is a second
  frozen backbone with its own adapter), the reference model when kl_coef > 0, DDP's gradient buckets
  with processes > 1, and an overhead (CUDA context, allocator slack).

DDP (`sharding: ddp`) replicates: every process holds the whole model, its gradients and AdamW moments,
so more processes lower only the activations (each trains on its share of the batch), and on CPU they
share one machine's RAM. FSDP2 (`sharding: fsdp`, fsdp.py) keeps 1/N of the weights, gradients and
moments per process, plus the gathered full parameters of the layers in flight (two decoder layers:
the one computing and the one prefetched) and of the unsharded root (embeddings, lm_head).
The time estimate is the usual 6 × parameters FLOPs per token (4 for
LoRA, whose frozen weights get no weight gradient) over an assumed device throughput: a rough guide,
labelled as such. Pure Python: the web app imports it without torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_core.training.checkpoints import AdapterError, adapter_base
from agent_core.training.planner_vision import tower_dims, vision_activations, vision_params

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
OVERHEAD_BYTES = GIB
"""Fixed overhead per process: the CUDA context and cuBLAS workspace (or the interpreter and torch on CPU)."""
OVERHEAD_SHARE = 0.10
"""Allocator slack and fragmentation, as a share of everything else."""
MFU = 0.35
"""The share of a device's peak throughput a training step is assumed to reach."""
# Peak dense throughput (FLOP/s) by device name, (bfloat16, float32): the vendors' data sheets.
PEAK_FLOPS = (
    ("H200", 989e12, 67e12),
    ("H100", 989e12, 67e12),
    ("A100", 312e12, 19.5e12),
    ("L40", 181e12, 90e12),
    ("A10", 125e12, 31e12),
    ("4090", 165e12, 83e12),
    ("V100", 125e12, 15.7e12),
)
GENERIC_GPU_FLOPS = (100e12, 20e12)
CPU_FLOPS = (0.2e12, 0.2e12)
# Defaults of the config classes, for keys a config.json leaves out (older transformers wrote diffs).
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, tie_word_embeddings=False),
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, tie_word_embeddings=False),
}  # fmt: skip


class PlanError(ValueError):
    """The model's config cannot be read or is not a shape this planner knows."""


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs of a model: its decoder's dimensions and its other parameters."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool
    extra_params: int = 0
    """Parameters outside the decoder: a vision tower and its projector."""
    eager_attention: bool = False
    vision: bool = False
    vision_hidden: int = 0
    """The vision tower's width (Qwen-VL embed_dim / hidden_size, a ViT's hidden_size)."""
    vision_layers: int = 0
    patches_per_token: int = 1
    """Vision positions per image token in the decoder (Qwen-VL merges spatial_merge_size² patches)."""

    @property
    def layer_params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        return attention + 3 * h * self.intermediate + 2 * h

    @property
    def params(self) -> int:
        """Every parameter (a tied lm_head counted once, as torch's `parameters()` does)."""
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return embeddings + self.layers * self.layer_params + self.hidden + self.extra_params

    def module_dims(self, name: str) -> tuple[int, int]:
        """(in, out) features of a decoder projection (Qwen2 / Llama names)."""
        h, q, kv, i = (
            self.hidden,
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
            self.intermediate,
        )
        dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}  # fmt: skip
        if name not in dims:
            raise PlanError(f"lora_targets: {name!r} is not a decoder projection ({', '.join(dims)})")
        return dims[name]

    def lora_params(self, r: int, targets: tuple[str, ...]) -> int:
        """A LoRA adapter's parameters: r·(in + out) per targeted projection of every decoder layer."""
        return self.layers * sum(r * sum(self.module_dims(t)) for t in targets)


def _text_shape(config: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(config.get("model_type") or top.get("model_type") or "")
    defaults = _TEXT_DEFAULTS.get(kind, {})

    def get(key: str) -> Any:
        value = config.get(key, defaults.get(key))
        if value is None:
            raise PlanError(f"config.json has no {key} for its {kind or 'text'} model")
        return value

    heads = int(get("num_attention_heads"))
    hidden = int(get("hidden_size"))
    kv = config.get("num_key_value_heads") or heads
    tied = config.get(
        "tie_word_embeddings", top.get("tie_word_embeddings", defaults.get("tie_word_embeddings"))
    )
    return dict(
        vocab=int(get("vocab_size")),
        hidden=hidden,
        intermediate=int(get("intermediate_size")),
        layers=int(get("num_hidden_layers")),
        heads=heads,
        kv_heads=int(kv),
        head_dim=int(config.get("head_dim") or hidden // heads),
        tied=bool(tied),
        # Qwen2 always has q/k/v biases; Llama-style configs say so with attention_bias.
        qkv_bias=kind.startswith("qwen2") or bool(config.get("attention_bias", False)),
    )


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """The shape of a model from its config.json (text-only or vision-language)."""
    text = config.get("text_config") or config
    if not isinstance(text, Mapping):
        raise PlanError("config.json: text_config is not an object")
    shape = _text_shape(text, config)
    vision = config.get("vision_config")
    extra = vision_params(vision, shape["hidden"], config) if isinstance(vision, Mapping) else 0
    attention = config.get("_attn_implementation") or config.get("attn_implementation")
    hidden, layers, merge = tower_dims(vision) if isinstance(vision, Mapping) else (0, 0, 1)
    return ModelShape(
        **shape,
        extra_params=extra,
        eager_attention=attention == "eager",
        vision=extra > 0,
        vision_hidden=hidden,
        vision_layers=layers,
        patches_per_token=merge,
    )


def read_model_shape(model_dir: str | Path) -> ModelShape:
    """The shape of the model in a directory: its config.json, or its base's for a LoRA adapter."""
    root = Path(model_dir)
    try:
        base = adapter_base(root)
    except AdapterError as exc:
        raise PlanError(str(exc)) from None
    path = (base or root) / "config.json"
    try:
        config = json.loads(path.read_text())
    except OSError:
        raise PlanError(f"{path.parent} has no config.json to plan from") from None
    except ValueError as exc:
        raise PlanError(f"{path} is not JSON: {exc}") from None
    if not isinstance(config, Mapping):
        raise PlanError(f"{path} is not a JSON object")
    try:
        return model_shape(config)
    except (TypeError, ValueError, KeyError) as exc:
        raise PlanError(f"{path}: {exc}") from None


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass(frozen=True)
class Fix:
    """A change to one config field that makes the run fit, with the estimate it would have."""

    field: str
    value: Any
    total: int
    text: str


@dataclass(frozen=True)
class Plan:
    """The estimated memory of one training process (bytes) and time of one optimizer step."""

    params: int
    trainable: int
    method: str
    dtype: str
    micro_batch: int
    seq_len: int
    processes: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    activations_other: int
    """The activations with gradient checkpointing the other way round (on if off, off if on)."""
    logits: int
    critic: int
    reference: int
    ddp_buckets: int
    step_flops: float
    notes: tuple[str, ...]
    shape: ModelShape = field(repr=False)
    config: Mapping[str, Any] = field(repr=False, compare=False)
    algorithm: str = "sft"

    @property
    def subtotal(self) -> int:
        return (
            self.weights + self.gradients + self.optimizer + self.activations + self.logits
            + self.critic + self.reference + self.ddp_buckets
        )  # fmt: skip

    @property
    def overhead(self) -> int:
        return OVERHEAD_BYTES + int(OVERHEAD_SHARE * self.subtotal)

    @property
    def total(self) -> int:
        """Bytes per process (per device on GPUs; on CPU every process takes its share of the RAM)."""
        return self.subtotal + self.overhead

    @property
    def sharded(self) -> bool:
        """Whether the processes shard the model (FSDP2) rather than each holding a replica (DDP)."""
        return _sharded(self.config, self.processes, lora=self.method != "full")

    @property
    def checkpointing(self) -> bool:
        return str(self.config.get("gradient_checkpointing", "off")) == "on"

    def parts(self) -> list[tuple[str, int]]:
        """(what, bytes) of every non-empty part, the overhead last."""
        act = "activations (gradient checkpointing)" if self.checkpointing else "activations"
        named = [
            ("weights", self.weights), ("gradients", self.gradients), ("AdamW moments", self.optimizer),
            (act, self.activations), ("logits", self.logits), ("critic", self.critic),
            ("reference model", self.reference), ("DDP gradient buckets", self.ddp_buckets),
            ("overhead", self.overhead),
        ]  # fmt: skip
        return [(name, n) for name, n in named if n]

    def fits(self, device_bytes: int) -> bool:
        """Whether one process fits in `device_bytes`."""
        return self.total <= device_bytes

    def step_seconds(self, flops_per_s: float) -> float:
        """A rough time of one optimizer step at the longest sequences, at MFU of `flops_per_s`."""
        return self.step_flops / (flops_per_s * MFU)

    def fixes(self, device_bytes: int) -> list[Fix]:
        """Single config changes that would make the run fit in `device_bytes`, the smallest change first."""
        return suggest(self, device_bytes)

    def suggestion(self, device_bytes: int) -> str:
        """What would fit, said in words ("" when it fits already)."""
        if self.fits(device_bytes):
            return ""
        fixes = self.fixes(device_bytes)
        said = "; or ".join(f.text for f in fixes) if fixes else (
            "nothing in the config makes it fit: choose a smaller base model or a device with more memory"
        )  # fmt: skip
        if self.processes > 1 and not self.sharded:
            said += (
                f". More processes only split the batch: under DDP each of the {self.processes} holds "
                "a whole copy of the model, its gradients and AdamW moments"
            )
        return said


def _sharded(cfg: Mapping[str, Any], processes: int, *, lora: bool) -> bool:
    """Whether the run's processes shard the model (FSDP2: full fine-tuning, processes > 1)."""
    return processes > 1 and str(cfg.get("sharding", "ddp")) == "fsdp" and not lora


def _micro_batch(algorithm: str, cfg: Mapping[str, Any], processes: int) -> int:
    if algorithm == "sft":
        # Each process trains on its share of every batch (agent_core.training.distributed).
        return max(1, math.ceil(int(cfg.get("batch_size", 8)) / processes))
    return max(1, int(cfg.get("minibatch_size", 8)))


def _activations(shape: ModelShape, tokens: int, seq: int, width: int, checkpointing: bool) -> int:
    """Korthikanti et al. 2022, eq. 1 (the s×s scores term only with eager attention), per layer."""
    h, a = shape.hidden, shape.heads
    full_layer = tokens * h * (34 + (5 * a * seq / h if shape.eager_attention else 0)) * width / 2
    if checkpointing:  # each layer keeps its input; one layer is recomputed at a time
        return int(shape.layers * tokens * h * width + full_layer)
    return int(shape.layers * full_layer)


def plan_run(shape: ModelShape, algorithm: str, cfg: Mapping[str, Any]) -> Plan:
    """The memory per process and the FLOPs per step of a run of `algorithm` with config `cfg`
    (a validated config: agent_core.training.config.validate_config)."""
    width = DTYPE_BYTES[str(cfg.get("dtype", "float32"))]
    processes = max(1, int(cfg.get("processes", 1)))
    lora = str(cfg.get("lora", "off")) == "on"
    params = shape.params
    checkpointing = str(cfg.get("gradient_checkpointing", "off")) == "on"
    if lora:
        r = int(cfg.get("lora_r", 16))
        targets = tuple(t for t in str(cfg.get("lora_targets", "")).split(",") if t)
        trainable = shape.lora_params(r, targets)
        method, train_width = f"LoRA r={r}", 4  # peft keeps adapter weights in fp32
        weights = params * width + trainable * train_width
    else:
        trainable, method, train_width = params, "full", width
        weights = params * width
    # Gradients and AdamW's exp_avg / exp_avg_sq take the trainable parameters' dtype.
    gradients, optimizer = trainable * train_width, 2 * trainable * train_width
    micro = _micro_batch(algorithm, cfg, processes)
    seq = int(cfg.get("max_seq_len", 2048))
    tokens = micro * seq
    activations = _activations(shape, tokens, seq, width, checkpointing)
    other = _activations(shape, tokens, seq, width, not checkpointing)
    # Image tokens are at most every position of max_seq_len: the tower's activations at that bound.
    activations += vision_activations(shape, tokens, width, trained=not lora, checkpointing=checkpointing)
    other += vision_activations(shape, tokens, width, trained=not lora, checkpointing=not checkpointing)
    logits = tokens * shape.vocab * (width + 12)  # dtype logits, fp32 copy, log-softmax, one fp32 grad
    critic = 0
    if algorithm == "ppo":  # a value model of the policy's architecture (a LoRA one: a second frozen
        # backbone with its own adapter), its own AdamW, and an fp32 value head; its activations come
        # after the policy's have been freed, so they are not counted again.
        critic = weights + gradients + optimizer + (shape.hidden + 1) * 4 * 4
    reference = params * width if float(cfg.get("kl_coef", 0.0) or 0.0) > 0 else 0
    fsdp = _sharded(cfg, processes, lora=lora)
    ddp = gradients if processes > 1 and not fsdp else 0
    if fsdp:  # 1/N of each per process, plus the full parameters of what is being computed
        gathered = (2 * shape.layer_params + (params - shape.layers * shape.layer_params)) * width
        weights = math.ceil(weights / processes) + gathered
        gradients = math.ceil(gradients / processes) + gathered
        optimizer = math.ceil(optimizer / processes)
        if critic:
            critic = math.ceil(critic / processes) + 2 * gathered
    flops_per_token = (4 if lora else 6) * params * (2 if algorithm == "ppo" else 1)
    flops_per_token += 2 * params if reference else 0
    notes = []
    if fsdp:
        notes.append(
            f"under FSDP2 each process holds 1/{processes} of the weights, gradients and AdamW moments, "
            "plus the full weights of the layers being computed"
        )
    elif processes > 1:
        notes.append(
            "under DDP each process holds a whole copy of the model: processes lower only the activations"
        )
    if shape.vision:
        notes.append(
            "the vision tower's activations are counted as if every position of max_seq_len were an "
            f"image token ({shape.patches_per_token} patch(es) each): an upper bound"
            + ("; LoRA leaves the tower frozen, so it keeps none for the backward pass" if lora else "")
        )
    return Plan(
        params=params, trainable=trainable, method=method, dtype=str(cfg.get("dtype", "float32")),
        micro_batch=micro, seq_len=seq, processes=processes, weights=weights, gradients=gradients,
        optimizer=optimizer, activations=activations, activations_other=other, logits=logits,
        critic=critic, reference=reference, ddp_buckets=ddp, step_flops=float(flops_per_token * tokens),
        notes=tuple(notes), shape=shape, config=dict(cfg), algorithm=algorithm,
    )  # fmt: skip


def _largest_fitting(plan: Plan, key: str, low: int, high: int, device_bytes: int) -> int | None:
    """The largest value of the whole-number field `key` in [low, high) with which the run fits."""

    def total(v: int) -> int:
        return plan_run(plan.shape, plan.algorithm, {**plan.config, key: v}).total

    if high <= low or total(low) > device_bytes:
        return None
    while high - low > 1:  # total(low) fits, total(high) does not
        mid = (low + high) // 2
        low, high = (mid, high) if total(mid) <= device_bytes else (low, mid)
    return low


def suggest(plan: Plan, device_bytes: int) -> list[Fix]:
    """Single changes to the config that make `plan`'s run fit in `device_bytes`."""
    cfg, fixes = plan.config, []

    def attempt(name: str, value: Any, text: str) -> None:
        total = plan_run(plan.shape, plan.algorithm, {**cfg, name: value}).total
        if total <= device_bytes:
            fixes.append(Fix(name, value, total, f"{text} (est. {_gib(total)})"))

    if str(cfg.get("lora", "off")) != "on":
        if str(cfg.get("sharding", "ddp")) == "fsdp":
            attempt("lora", "on", f"use LoRA r={cfg.get('lora_r', 16)}: set lora to on, sharding to ddp")
        else:
            attempt("lora", "on", f"use LoRA r={cfg.get('lora_r', 16)}: set lora to on")
        if plan.processes > 1 and str(cfg.get("sharding", "ddp")) != "fsdp":
            attempt("sharding", "fsdp", f"split the model across the {plan.processes} processes: set "
                    "sharding to fsdp")  # fmt: skip
    if str(cfg.get("dtype", "float32")) == "float32":
        attempt("dtype", "bfloat16", "train in bfloat16: set dtype to bfloat16")
    if "gradient_checkpointing" in cfg and cfg["gradient_checkpointing"] != "on":
        attempt("gradient_checkpointing", "on", "set gradient_checkpointing to on")
    seq = _largest_fitting(plan, "max_seq_len", 16, plan.seq_len, device_bytes)
    if seq is not None:
        total = plan_run(plan.shape, plan.algorithm, {**cfg, "max_seq_len": seq}).total
        fixes.append(Fix("max_seq_len", seq, total, f"lower max_seq_len to {seq} (est. {_gib(total)})"))
    key = "batch_size" if plan.algorithm == "sft" else "minibatch_size"
    if key in cfg and plan.micro_batch > 1:
        floor = plan.processes if key == "batch_size" else 1  # every process needs a sample
        n = _largest_fitting(plan, key, floor, int(cfg[key]), device_bytes)
        if n is not None:
            total = plan_run(plan.shape, plan.algorithm, {**cfg, key: n}).total
            fixes.append(Fix(key, n, total, f"lower {key} to {n} (est. {_gib(total)})"))
    return fixes


def assumed_flops(kind: str, name: str, dtype: str) -> float:
    """An assumed peak throughput (FLOP/s) of a device, from its kind and name (data-sheet figures)."""
    index = 0 if dtype == "bfloat16" else 1
    if kind != "cuda":
        return CPU_FLOPS[index]
    for key, bf16, fp32 in PEAK_FLOPS:
        if key.lower() in name.lower():
            return (bf16, fp32)[index]
    return GENERIC_GPU_FLOPS[index]


def with_changes(plan: Plan, **changes: Any) -> Plan:
    """The plan of the same run with some config fields changed."""
    return plan_run(plan.shape, plan.algorithm, {**plan.config, **changes})
