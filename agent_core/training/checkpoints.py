"""Where a run keeps its checkpoints: `out_dir/checkpoints/step-NNNNNN/`, complete once its trainer
state is in; and what kind of model directory a checkpoint is.

A checkpoint is written to `step-NNNNNN.tmp` and renamed (see `Trainer.save`), so `latest_checkpoint`
never returns a half-written one. It holds either full weights (a save_pretrained directory with its
config.json) or, for a LoRA run, a peft adapter (adapter_config.json + adapter_model.safetensors) whose
base is the model directory its adapter_config.json names by absolute path. `adapter_base` tells them
apart by reading that JSON, so the rest of the platform (the web app, vLLM's loader) needs no peft.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

STATE_FILE = "trainer_state.pt"
CHECKPOINTS = "checkpoints"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


class AdapterError(ValueError):
    """An adapter directory whose adapter_config.json cannot say what its base model is."""


def checkpoint_dir(out_dir: Path, step: int) -> Path:
    return Path(out_dir) / CHECKPOINTS / f"step-{step:06d}"


def adapter_base(path: str | Path) -> Path | None:
    """The base model directory of a LoRA adapter directory (absolute, as adapter_config.json names it),
    or None for a full checkpoint (no adapter_config.json). AdapterError when the file does not name
    an absolute base path. Whether that base is still on disk is for the caller to check."""
    file = Path(path) / ADAPTER_CONFIG
    if not file.is_file():
        return None
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise AdapterError(f"{file} cannot be read: {exc}") from None
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not isinstance(base, str) or not base:
        raise AdapterError(f"{file} names no base model (base_model_name_or_path)")
    if not Path(base).is_absolute():
        raise AdapterError(
            f"{file} names its base model as {base!r}: an adapter here needs the absolute path of a "
            "local model directory"
        )
    return Path(base)


def is_model_dir(path: str | Path) -> bool:
    """Whether `path` holds a model: full weights (config.json) or a LoRA adapter (adapter_config.json)."""
    return (Path(path) / "config.json").is_file() or (Path(path) / ADAPTER_CONFIG).is_file()


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run directory (one with its trainer state), or None."""
    root = Path(out_dir) / CHECKPOINTS
    if not root.is_dir():
        return None
    done = [p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp")]
    done = [p for p in done if (p / STATE_FILE).is_file() and is_model_dir(p)]
    return max(done, key=lambda p: p.name) if done else None


def prune(out_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints of a run directory (none when `keep` <= 0)."""
    if keep <= 0:
        return
    done = sorted(p for p in (out_dir / CHECKPOINTS).glob("step-*") if not p.name.endswith(".tmp"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
