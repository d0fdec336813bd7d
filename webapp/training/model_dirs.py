"""What the web app checks of a local model directory before a run starts from it or a checkpoint
becomes a policy: full weights, or a LoRA adapter whose base model is still on disk.

Adapters are told apart by their adapter_config.json (agent_core.training.checkpoints.adapter_base),
so the web process reads them without peft or torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_core.training.checkpoints import AdapterError, adapter_base


def model_dir_problem(path: Path | None) -> str | None:
    """Why a local policy's model directory cannot be loaded, said after its name ("has no model
    directory"); None when nothing is known to be wrong. Only an adapter is read: a full directory's
    weights are the loader's to check."""
    if path is None:
        return "has no model directory"
    try:
        base = adapter_base(path)
    except AdapterError as exc:
        return f"is a LoRA adapter that cannot be loaded: {exc}"
    if base is not None and not (base / "config.json").is_file():
        return f"is a LoRA adapter whose base model {base} is gone (no config.json there)"
    return None


def checkpoint_problem(path: Path) -> str | None:
    """Why a checkpoint directory cannot become a policy (it is gone, or an adapter whose base is)."""
    if not path.is_dir():
        return f"its directory {path} is gone (deleted, or pruned by keep_checkpoints)"
    problem = model_dir_problem(path)
    return f"it {problem}" if problem else None


def adapter_lineage(path: Path) -> dict[str, Any]:
    """What a policy's lineage records of its model directory: the base of an adapter (else nothing)."""
    try:
        base = adapter_base(path)
    except AdapterError:
        return {}
    return {"lora_adapter": True, "adapter_base": str(base)} if base is not None else {}
