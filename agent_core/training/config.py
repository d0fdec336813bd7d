"""Training run configurations: every field with its default, bounds and meaning, and validation.

A run's config is a flat JSON object. `validate_config(algorithm, raw)` fills in the defaults and
refuses anything wrong with a `ConfigError` that names the field ("ppo.eps_high: must be at least
eps_low (0.2), got 0.1"), so the launch form and the API can point at it. Pure Python: the webapp
validates without importing torch.
"""

# ruff: noqa: E501 - the field tables read best one field per line
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

ALGORITHMS = ("sft", "ppo", "grpo")


class ConfigError(ValueError):
    """A config field is missing, unknown, of the wrong type or out of range; `field` names it.

    Validation reports every bad field at once: `errors` holds one ConfigError per field at fault
    (`field` and `message` are the first one's)."""

    def __init__(self, field: str, message: str, *, errors: Sequence[ConfigError] = ()) -> None:
        self.field = field
        self.message = message
        self.errors: tuple[ConfigError, ...] = tuple(errors) or (self,)
        super().__init__("; ".join(f"{e.field}: {e.message}" for e in self.errors))

    @classmethod
    def of(cls, errors: Sequence[ConfigError]) -> ConfigError:
        """One error that carries every one of `errors` (at least one)."""
        flat = [e for error in errors for e in error.errors]
        return cls(flat[0].field, flat[0].message, errors=flat)


@dataclass(frozen=True)
class FieldSpec:
    """One config field: its type, default, bounds and what it does."""

    name: str
    type: type
    default: Any
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    """The values allowed (as text; a whole-number field's too), shown as a select by the launch form."""


def _f(name: str, typ: type, default: Any, help: str, lo: float | None = None, hi: float | None = None,
       choices: tuple[str, ...] = ()) -> FieldSpec:  # fmt: skip
    return FieldSpec(name, typ, default, help, lo, hi, choices)


COMMON = (
    _f("seed", int, 0, "Random seed of the run (weights init of new heads, sampling, shuffling)", 0, 2**31),
    _f("lr", float, 1e-3, "Learning rate of the policy (AdamW)", 1e-8, 1.0),
    _f("weight_decay", float, 0.0, "AdamW weight decay", 0.0, 1.0),
    _f("grad_clip", float, 1.0, "Clip the gradient norm to this (0: no clipping)", 0.0, 1e6),
    _f("max_seq_len", int, 2048, "Longest prompt + response in tokens (longer: an SFT text example keeps the end of its prompt, as it has no sampler to disagree with; an RL turn or a VLM example is skipped and counted)", 16, 131072),
    _f("checkpoint_every", int, 50, "Save a checkpoint every this many optimizer steps", 1, 1_000_000),
    _f("keep_checkpoints", int, 0, "Keep only the newest N checkpoint directories (0: keep all)", 0, 10_000),
    _f("device", str, "auto", "Where to train: auto (cuda when there is one), cpu or cuda", choices=("auto", "cpu", "cuda")),
    _f("dtype", str, "float32", "Weights dtype while training", choices=("float32", "bfloat16")),
    _f("processes", int, 1, "Training processes (torchrun, DDP or FSDP2 as sharding says: gloo on CPU, nccl on CUDA, one GPU each); SFT only for now", 1, 64),
    _f("sharding", str, "ddp", "How processes > 1 hold the model: ddp (each a whole replica; enough for LoRA and for models one device holds) or fsdp (FSDP2: weights, gradients and AdamW moments split across the processes, for full fine-tuning of a model one device cannot hold)", choices=("ddp", "fsdp")),
    _f("gradient_checkpointing", str, "off", "Recompute activations in the backward pass instead of keeping them (less memory, slower; for big models on GPUs)", choices=("off", "on")),
)  # fmt: skip

LORA_RANKS = ("8", "16", "32", "64", "128", "256")
"""The LoRA ranks a run may use: those vLLM serves."""
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The decoder projections (Qwen2 names) a LoRA adapter may target, as vLLM loads adapters on them.
Never the embeddings or lm_head: the tiny models tie them, and vLLM serves no adapter on them here."""

LORA = (
    _f("lora", str, "off", "Train a LoRA adapter on the frozen policy (on) instead of every weight (off): checkpoints are then adapters vLLM can hot-load", choices=("off", "on")),
    _f("lora_r", int, 16, "LoRA rank (vLLM serves ranks 8, 16, 32, 64, 128 and 256 only)", choices=LORA_RANKS),
    _f("lora_alpha", int, 32, "LoRA alpha: the adapter's update is scaled by alpha / r", 1, 4096),
    _f("lora_dropout", float, 0.0, "Dropout on the adapter's input while training", 0.0, 0.9),
    _f("lora_targets", str, ",".join(LORA_MODULES), f"Comma-separated modules that get an adapter, of {', '.join(LORA_MODULES)}"),
)  # fmt: skip

SFT = (
    _f("epochs", float, 3.0, "Passes over the dataset version (fractions allowed)", 0.01, 1000),
    _f("batch_size", int, 8, "Samples per optimizer step", 1, 4096),
    _f("warmup_steps", int, 0, "Linear learning-rate warm-up", 0, 1_000_000),
    _f("max_steps", int, 0, "Stop after this many optimizer steps (0: as many as the epochs take)", 0, 10_000_000),
    _f("history_images", int, 3, "Recent turns that keep their screenshot in the prompt (as the agent does)", 0, 64),
)  # fmt: skip

_RL = (
    _f("iterations", int, 20, "RL iterations (one policy update on a batch of finished episodes each)", 1, 1_000_000),
    _f("tasks", str, "", "Comma-separated task slugs to roll out on (empty: the suite's published tasks)"),
    _f("suite", str, "", "The task suite rollouts draw from (live rollouts)"),
    _f("episodes_per_iteration", int, 8, "Finished episodes consumed per iteration", 1, 100_000),
    _f("temperature", float, 1.0, "Sampling temperature of rollouts; the trainer scores every log-probability at it too", 0.01, 5.0),
    _f("top_p", float, 1.0, "Nucleus sampling of rollouts: draw from the likeliest tokens whose probability sums to top_p (1: all); the trainer scores within the same nucleus", 0.01, 1.0),
    _f("max_new_tokens", int, 64, "Longest response per turn", 1, 32768),
    _f("max_policy_lag", int, 1, "Use only episodes from policies at most this many versions behind", 0, 1000),
    _f("is_cap", float, 2.0, "Truncated importance sampling against the rollouts' sampler (an older policy version, another engine): each token's loss weighted by min(pi_old / pi_rollout, C)", 1.0, 1000.0),
    _f("publish_every", int, 1, "Publish a new policy version for rollouts every N iterations", 1, 1_000_000),
    _f("eps_low", float, 0.2, "Clip ratio below 1 (1 - eps_low)", 0.0, 1.0),
    _f("eps_high", float, 0.28, "Clip ratio above 1 (1 + eps_high); asymmetric: at least eps_low", 0.0, 10.0),
    _f("ppo_epochs", int, 1, "Passes over each batch", 1, 100),
    _f("minibatch_size", int, 8, "Turns per gradient step", 1, 100_000),
    _f("format_reward", float, -1.0, "Reward added for a turn whose action does not parse", -100.0, 0.0),
    _f("kl_coef", float, 0.0, "KL penalty to the reference (initial) policy; 0 disables it", 0.0, 100.0),
    _f("history_images", int, 3, "Recent turns that keep their screenshot in the prompt", 0, 64),
    _f("max_steps_per_episode", int, 15, "Step budget of an episode (DART's cap for GRPO starts here)", 1, 1000),
)  # fmt: skip

PPO = _RL + (
    _f("gamma", float, 1.0, "Discount", 0.0, 1.0),
    _f("lambda_value", float, 1.0, "GAE lambda of the value targets (1: Monte-Carlo returns)", 0.0, 1.0),
    _f("alpha", float, 0.05, "Length-adaptive policy lambda = max(lambda_policy_min, 1 - 1/(alpha * length)): VAPO's 0.05 lifts lambda towards 1 on sequences of hundreds of tokens and more", 1e-6, 100.0),
    _f("lambda_policy_min", float, 0.95, "Floor of the policy's lambda: on a short episode the formula falls to 0 (20 tokens at alpha 0.05), and the outcome reward would then reach an action's earlier tokens only through the critic", 0.0, 0.999),
    _f("critic_lr", float, 1e-3, "Learning rate of the critic", 1e-8, 1.0),
    _f("critic_min_ev", float, 0.2, "Explained variance of the returns (on each batch's fresh episodes, before the critic trains on them) at which the critic counts as learned: value pre-training ends there, and below it the policy's advantages do not bootstrap from the critic (lambda 1: it is only a baseline)", 0.0, 1.0),
    _f("value_pretrain_steps", int, 3, "At most this many first iterations train only the critic, on Monte-Carlo returns (fewer once it reaches critic_min_ev)", 0, 1_000_000),
    _f("value_clip", float, 0.0, "Clip value updates to this range around the old values (0: off)", 0.0, 1e6),
    _f("whiten_advantages", str, "on", "Whiten the policy's advantages over each batch's response tokens (mean 0, variance 1)", choices=("on", "off")),
)  # fmt: skip


def _with_defaults(fields: tuple[FieldSpec, ...], **defaults: Any) -> tuple[FieldSpec, ...]:
    """`fields` with the defaults named in `defaults` replaced: an algorithm's own recipe on shared fields."""
    unknown = set(defaults) - {f.name for f in fields}
    if unknown:
        raise ValueError(f"no such field to override: {', '.join(sorted(unknown))}")
    return tuple(replace(f, default=defaults[f.name]) if f.name in defaults else f for f in fields)


# DART's recipe: clip-higher at [1 - 0.1, 1 + 0.28] and a dual clip at 10 (PPO keeps eps_low 0.2).
GRPO = _with_defaults(_RL, eps_low=0.1, eps_high=0.28) + (
    _f("group_size", int, 4, "Rollouts per task in a group (DART raises or lowers it per task)", 2, 1024),
    _f("min_rollouts", int, 2, "Fewest rollouts per task once it is mostly solved", 1, 1024),
    _f("max_rollouts", int, 8, "Most rollouts per task while it is mostly failed", 1, 1024),
    _f("dual_clip", float, 10.0, "Dual-clip bound c on the loss of negative advantages: above 1, or 0 for off", 0.0, 100.0),
    _f("ratio_level", str, "token", "Importance ratio per token (GRPO) or per sequence (GSPO: a turn's mean log-ratio, clipped as one; GSPO's paper clips it far tighter, eps_low 3e-4, eps_high 4e-4)", choices=("token", "sequence")),
    _f("entropy_top", float, 0.8, "Train on this share of steps with the highest entropy", 0.01, 1.0),
    _f("latest_k", int, 2, "Use only trajectories from the latest K policy versions", 1, 1000),
    _f("success_window", int, 8, "Recent episodes per task DART's curation follows", 1, 10_000),
    _f("length_margin", int, 2, "Per-task step cap = longest recent success + this margin", 0, 1000),
    _f("min_steps_cap", int, 2, "Smallest per-task step cap", 1, 1000),
    _f("pool_size", int, 4, "Successes kept per task instance (task and seed) in the experience pool", 0, 10_000),
    _f("pool_max_age", int, 2, "Inject a pooled success into an all-failed group of its own instance only while its policy is at most this many versions behind", 0, 1000),
)  # fmt: skip

FIELDS: dict[str, tuple[FieldSpec, ...]] = {
    "sft": COMMON + LORA + SFT,
    "ppo": COMMON + LORA + PPO,
    "grpo": COMMON + LORA + GRPO,
}


def config_fields(algorithm: str) -> tuple[FieldSpec, ...]:
    """The fields of `algorithm`'s config, in display order."""
    if algorithm not in FIELDS:
        raise ConfigError("algorithm", f"unknown algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    return FIELDS[algorithm]


def defaults(algorithm: str) -> dict[str, Any]:
    """`algorithm`'s config with every field at its default."""
    return {f.name: f.default for f in config_fields(algorithm)}


def _coerce(spec: FieldSpec, value: Any) -> Any:
    field = spec.name
    if spec.type is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(field, f"must be true or false, got {value!r}")
    if spec.type is int:
        if isinstance(value, bool):
            raise ConfigError(field, f"must be a whole number, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigError(field, f"must be a whole number, got {value!r}") from None
        if not isinstance(value, int):
            raise ConfigError(field, f"must be a whole number, got {value!r}")
        if spec.choices and str(value) not in spec.choices:
            raise ConfigError(field, f"must be one of {', '.join(spec.choices)}, got {value!r}")
    elif spec.type is float:
        if isinstance(value, bool):
            raise ConfigError(field, f"must be a number, got {value!r}")
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ConfigError(field, f"must be a number, got {value!r}") from None
        if not isinstance(value, int | float) or value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(field, f"must be a finite number, got {value!r}")
        value = float(value)
    elif spec.type is str:
        if not isinstance(value, str):
            raise ConfigError(field, f"must be text, got {value!r}")
        value = value.strip()
        if spec.choices and value not in spec.choices:
            raise ConfigError(field, f"must be one of {', '.join(spec.choices)}, got {value!r}")
    if spec.min is not None and value < spec.min:
        raise ConfigError(field, f"must be at least {spec.min:g}, got {value!r}")
    if spec.max is not None and value > spec.max:
        raise ConfigError(field, f"must be at most {spec.max:g}, got {value!r}")
    return value


def _lora_targets(value: str) -> str:
    """The comma-separated module names, each one of LORA_MODULES, without repeats."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise ConfigError("lora_targets", f"name at least one module, of {', '.join(LORA_MODULES)}")
    wrong = [n for n in names if n not in LORA_MODULES]
    if wrong:
        raise ConfigError(
            "lora_targets",
            f"{', '.join(repr(n) for n in wrong)} cannot get an adapter (the embeddings and lm_head "
            f"never do); valid: {', '.join(LORA_MODULES)}",
        )
    return ",".join(dict.fromkeys(names))


def _process_problems(algorithm: str, out: Mapping[str, Any]) -> list[ConfigError]:
    """What is wrong with `processes` for this algorithm and batch size (valid fields only)."""
    processes = out.get("processes")
    errors = []
    if out.get("sharding") == "fsdp":
        if out.get("lora") == "on":
            why = "fsdp shards full fine-tuning; a LoRA adapter is small enough for ddp to replicate: set ddp"
            errors.append(ConfigError("sharding", f"{why} (or lora off)"))
        elif processes == 1:
            errors.append(ConfigError("sharding", "fsdp splits the model across processes: set processes "
                                      "above 1, or sharding ddp"))  # fmt: skip
    if processes is None or processes == 1:
        return errors
    if algorithm in ("ppo", "grpo"):
        # The RL loop (rollout source, curation, critic) runs in one process; only SFT is sharded.
        why = f"{algorithm} trains in one process for now (its rollout loop is not distributed); set 1"
        return [*errors, ConfigError("processes", f"{why}, got {processes}")]
    batch = out.get("batch_size")
    if batch is not None and batch < processes:
        why = f"must be at least processes ({processes}): each process trains on a share of every batch"
        errors.append(ConfigError("batch_size", f"{why}, got {batch}"))
    return errors


def _grpo_problems(out: Mapping[str, Any]) -> list[ConfigError]:
    """What is wrong across GRPO's fields, or with its dual clip (valid fields only)."""
    errors = []
    if {"min_rollouts", "max_rollouts"} <= set(out):
        if out["min_rollouts"] > out["max_rollouts"]:
            errors.append(
                ConfigError(
                    "min_rollouts",
                    f"must not exceed max_rollouts ({out['max_rollouts']}), got {out['min_rollouts']}",
                )
            )
        if out["max_rollouts"] < 2:
            errors.append(
                ConfigError("max_rollouts", "must be at least 2: a group needs two rollouts to compare")
            )
    dual = out.get("dual_clip")
    if dual is not None and 0 < dual <= 1:
        # A bound at or below 1 would cap the loss of every negative advantage whose ratio passed it.
        why = "must exceed 1 (or be 0 for off): the dual clip bounds the loss at -advantage * c"
        errors.append(ConfigError("dual_clip", f"{why}, got {dual:g}"))
    return errors


def validate_config(algorithm: str, raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """`raw` with defaults filled in and every value checked; a ConfigError names every bad field
    (its `errors`), so a form can show each message beside its field at once."""
    fields = {f.name: f for f in config_fields(algorithm)}
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError("config", "must be a JSON object")
    raw = dict(raw or {})
    errors: list[ConfigError] = [
        ConfigError(name, f"unknown field for {algorithm}; valid fields: {', '.join(sorted(fields))}")
        for name in sorted(set(raw) - set(fields), key=str)
    ]
    out: dict[str, Any] = {}
    for name, spec in fields.items():
        try:
            out[name] = _coerce(spec, raw[name]) if name in raw else spec.default
        except ConfigError as exc:
            errors.append(exc)
    if "lora_targets" in out:
        try:
            out["lora_targets"] = _lora_targets(out["lora_targets"])
        except ConfigError as exc:
            errors.append(exc)
    # Checks across fields, only between fields that are valid on their own.
    if (
        algorithm in ("ppo", "grpo")
        and {"eps_low", "eps_high"} <= set(out)
        and out["eps_high"] < out["eps_low"]
    ):
        errors.append(
            ConfigError(
                "eps_high",
                f"must be at least eps_low ({out['eps_low']:g}): the clipping is asymmetric, "
                f"got {out['eps_high']:g}",
            )
        )
    errors += _process_problems(algorithm, out)
    pretrain = out.get("value_pretrain_steps")
    if algorithm == "ppo" and "iterations" in out and pretrain is not None and pretrain >= out["iterations"]:
        errors.append(
            ConfigError(
                "value_pretrain_steps",
                f"must be below iterations ({out['iterations']}): until the critic is learned, that many "
                f"first iterations train only the critic, so the policy might never train, got {pretrain}",
            )
        )
    if algorithm == "grpo":
        errors += _grpo_problems(out)
    if errors:
        raise ConfigError.of(errors)
    return out


@dataclass(frozen=True)
class SftLength:
    """How long an SFT run trains, as agent_core.training.sft counts it: `max_steps` optimizer steps
    when it is above 0, else ceil(epochs × examples / batch_size) (at least one)."""

    by: str
    """The field that decides: "max_steps" or "epochs"."""
    steps: int | None
    """Optimizer steps (None: epochs decide and the number of examples is not known)."""
    epochs: float | None
    """The passes over the examples those steps make (None without the number of examples)."""
    epochs_steps: int | None
    """The steps the epochs asked for would take (None without the number of examples)."""
    said: str
    """One line for the launch form."""

    @property
    def disagree(self) -> bool:
        """max_steps overrides epochs and the two do not give the same run (or cannot be compared)."""
        return self.by == "max_steps" and self.steps != self.epochs_steps


def sft_length(config: Mapping[str, Any], examples: int | None = None) -> SftLength:
    """The length of an SFT run with the validated `config` over about `examples` examples (None:
    not known yet), and which of `epochs` and `max_steps` decides it, said in one line."""
    batch, epochs, cap = int(config["batch_size"]), float(config["epochs"]), int(config["max_steps"])
    known = examples is not None and examples > 0
    n = int(examples or 0)
    by_epochs = max(1, math.ceil(epochs * n / batch)) if known else None
    of = f"~{n:,} example(s)" if known else "the dataset"
    if not cap:
        said = (
            f"epochs decide: {epochs:g} epoch(s) of {of} = {by_epochs:,} optimizer step(s) of {batch}"
            if by_epochs is not None
            else f"epochs decide: {epochs:g} epoch(s); the steps depend on the dataset's size"
        )
        made = epochs if known else None
        return SftLength("epochs", by_epochs, made, by_epochs, said)
    made = cap * batch / n if known else None
    said = f"max_steps wins over epochs: training stops after {cap:,} optimizer step(s) of {batch}"
    if by_epochs is None:
        said += f", whatever the {epochs:g} epoch(s) would take (the dataset's size is not known)"
    elif cap < by_epochs:
        said += (
            f" = {made:.3g} epoch(s) of {of}, short of the {epochs:g} asked ({by_epochs:,} steps); "
            "set max_steps to 0 to train every epoch"
        )
    elif cap > by_epochs:
        said += (
            f" = {made:.3g} epoch(s) of {of}: the {epochs:g} asked end after {by_epochs:,} steps and it "
            "goes on past them; set max_steps to 0 to stop there"
        )
    else:
        said += f" = the {epochs:g} epoch(s) asked of {of}"
    return SftLength("max_steps", cap, made, by_epochs, said)
