"""LoRA (peft) for the trainers: a run with `lora: on` trains adapters on a frozen policy.

The policy's model gets a fresh adapter (`peft.get_peft_model`), or, when it starts from an adapter
directory, that adapter goes on top of its base, trainable (its own rank and targets kept, so its
checkpoints stay adapters of the same base). Only adapter weights reach the optimizer. A checkpoint is
the adapter as peft saves it, its adapter_config.json naming the base model directory by absolute path,
which is what vLLM's `--enable-lora` (`POST /v1/load_lora_adapter`) and `LocalPolicy` load it against.

PPO's critic gets its own adapter on the same frozen backbone, plus its full value head; the trainer
state keeps only those trainable tensors (`trainable_state`), never a copy of the backbone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core.training.checkpoints import ADAPTER_CONFIG
from agent_core.training.errors import TrainingError, lazy


@dataclass(frozen=True)
class LoraSettings:
    """A run's LoRA settings (config fields lora_r, lora_alpha, lora_dropout, lora_targets)."""

    r: int
    alpha: int
    dropout: float
    targets: tuple[str, ...]

    @classmethod
    def of(cls, cfg: Mapping[str, Any]) -> LoraSettings | None:
        """The settings of a validated config, or None when `lora` is off (full fine-tuning)."""
        if str(cfg.get("lora", "off")) != "on":
            return None
        return cls(
            r=int(cfg["lora_r"]),
            alpha=int(cfg["lora_alpha"]),
            dropout=float(cfg["lora_dropout"]),
            targets=tuple(t for t in str(cfg["lora_targets"]).split(",") if t),
        )


def _target_modules(model: Any, names: tuple[str, ...]) -> list[str]:
    """What the adapter targets: the projections by name, or, in a vision-language model, only those
    of its language model by full name (its vision tower has q_proj too, and vLLM adapts the decoder)."""
    config = getattr(model, "config", None)
    if getattr(config, "vision_config", None) is None:
        return list(names)
    found = [
        name
        for name, _ in model.named_modules()
        if "language_model." in name and name.rsplit(".", 1)[-1] in names
    ]
    if not found:
        raise TrainingError(f"lora_targets: none of {', '.join(names)} is in this model's language model")
    return found


def add_adapter(model: Any, settings: LoraSettings, base_dir: Path) -> Any:
    """`model` wrapped with a fresh, trainable LoRA adapter (its base recorded as `base_dir`)."""
    peft = lazy("peft")
    config = peft.LoraConfig(
        task_type="CAUSAL_LM",
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=_target_modules(model, settings.targets),
        bias="none",
    )
    try:
        wrapped = peft.get_peft_model(model, config)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        raise TrainingError(f"lora_targets: {exc}") from None
    wrapped.peft_config["default"].base_model_name_or_path = str(Path(base_dir).resolve())
    return wrapped


def load_adapter(model: Any, adapter_dir: Path, *, trainable: bool) -> Any:
    """`model` (the adapter's base) with the adapter of `adapter_dir` on top: trainable, or merged into
    the weights (a plain model again) when not."""
    peft = lazy("peft")
    wrapped = peft.PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=trainable)
    if trainable:
        return wrapped
    # peft froze the base when it wrapped it; merged, it is a plain model again, every weight trainable.
    return wrapped.merge_and_unload().requires_grad_(True)


def describe(model: Any) -> str:
    """The adapter's shape and size, for the run's log: "LoRA r=16 alpha=32 on q_proj, … (N params)"."""
    config = model.peft_config["default"]
    targets = sorted({str(t).rsplit(".", 1)[-1] for t in config.target_modules})
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return (
        f"LoRA r={config.r} alpha={config.lora_alpha} on {', '.join(targets)}: "
        f"{trainable:,} of {total:,} parameters trained"
    )


def save_adapter(model: Any, directory: Path, base_dir: Path) -> None:
    """The adapter as peft saves it, naming `base_dir` by absolute path (what vLLM and LocalPolicy load
    it against); no embedding layers or modules_to_save, which vLLM refuses."""
    model.peft_config["default"].base_model_name_or_path = str(Path(base_dir).resolve())
    model.save_pretrained(str(directory), save_embedding_layers=False)
    if not (Path(directory) / ADAPTER_CONFIG).is_file():
        raise TrainingError(f"peft saved no {ADAPTER_CONFIG} in {directory}")


def trainable_parameters(model: Any) -> list[Any]:
    """The parameters an optimizer updates (all of a full model; the adapter's of a LoRA one)."""
    return [p for p in model.parameters() if p.requires_grad]


def trainable_state(module: Any) -> dict[str, Any]:
    """The module's state restricted to its trainable parameters (a LoRA critic: adapter and head)."""
    names = {name for name, p in module.named_parameters() if p.requires_grad}
    return {k: v for k, v in module.state_dict().items() if k in names}


def load_trainable_state(module: Any, state: Mapping[str, Any]) -> None:
    """Restore what `trainable_state` kept; TrainingError when it does not fit the module."""
    result = module.load_state_dict(dict(state), strict=False)
    trainable = {name for name, p in module.named_parameters() if p.requires_grad}
    missing = sorted(trainable & set(result.missing_keys))
    if result.unexpected_keys or missing:
        raise TrainingError(
            "the checkpoint's critic does not fit this run's critic "
            f"(unexpected: {sorted(result.unexpected_keys)[:3]}, missing: {missing[:3]})"
        )
