"""Parameter interpolation that also takes LoRA adapters: full checkpoints merge as agent_core.rl.interpolate
does, and adapters of one base merge into an adapter of that base.

Two adapters merge by the weighted average of their adapter tensors (each lora_A and lora_B on its own),
so the result is an adapter of the same shape that vLLM and LocalPolicy load like any other. That is the
average of the weight updates B·A only where the adapters share their A (as runs from one starting
adapter nearly do); it is what "interpolating adapters" means here. An adapter never merges with a
full checkpoint, nor with an adapter of another base or of another shape: each is refused, named.
"""

from __future__ import annotations

import importlib
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_core.rl.interpolate import (
    LINEAGE_FILE,
    InterpolationError,
    check_mergeable,
    interpolate_checkpoints,
    interpolate_state_dicts,
)
from agent_core.training.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, AdapterError, adapter_base

# What makes two adapters the same shape (and the same computation) besides their tensors.
_SHAPE_KEYS = ("peft_type", "r", "lora_alpha", "use_rslora", "use_dora", "bias")
# Files of an adapter directory that are not carried into the merge: weights, trainer state, lineage.
_NOT_COPIED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def _bases(paths: Sequence[Path]) -> list[Path | None]:
    try:
        return [adapter_base(p) for p in paths]
    except AdapterError as exc:
        raise InterpolationError(str(exc)) from None


def _adapter_config(path: Path) -> dict[str, Any]:
    config = json.loads((path / ADAPTER_CONFIG).read_text())
    targets = config.get("target_modules")
    config["target_modules"] = sorted(targets) if isinstance(targets, list) else targets
    return {k: config.get(k) for k in (*_SHAPE_KEYS, "target_modules")}


def _check_adapters(paths: Sequence[Path], bases: Sequence[Path], weights: Sequence[float]) -> None:
    interpolate_state_dicts([{} for _ in paths], weights)  # the weights alone (no tensor is read yet)
    for path, base in zip(paths[1:], bases[1:], strict=True):
        if base.resolve() != bases[0].resolve():
            raise InterpolationError(
                f"adapters of different bases cannot be merged: {paths[0]} adapts {bases[0]}, "
                f"{path} adapts {base}"
            )
    reference = _adapter_config(paths[0])
    for path in paths[1:]:
        other = _adapter_config(path)
        differing = [k for k in reference if reference[k] != other[k]]
        if differing:
            details = "; ".join(f"{k}: {reference[k]!r} vs {other[k]!r}" for k in differing)
            raise InterpolationError(f"adapters {paths[0]} and {path} differ in shape: {details}")


def check_models_mergeable(paths: Sequence[Path], weights: Sequence[float]) -> None:
    """The checks a merge makes before it reads a tensor, for full checkpoints or adapters alike
    (InterpolationError naming what does not fit)."""
    paths = [Path(p) for p in paths]
    bases = _bases(paths)
    adapters = [p for p, b in zip(paths, bases, strict=True) if b is not None]
    full = [p for p, b in zip(paths, bases, strict=True) if b is None]
    if not adapters:
        check_mergeable(paths, weights)
    elif full:
        raise InterpolationError(
            f"{adapters[0]} is a LoRA adapter and {full[0]} a full model: an adapter merges only with "
            "adapters of the same base"
        )
    else:
        _check_adapters(paths, [b for b in bases if b is not None], weights)


def interpolate_models(paths: Sequence[Path], weights: Sequence[float], out: Path) -> Path:
    """Merge full checkpoints (interpolate_checkpoints) or adapters of one base with `weights` into
    `out`, which appears whole or not at all; returns `out`."""
    paths = [Path(p) for p in paths]
    out = Path(out)
    if all(b is None for b in _bases(paths)):
        return interpolate_checkpoints(paths, weights, out)
    check_models_mergeable(paths, weights)
    if out.exists() and any(out.iterdir()):
        raise InterpolationError(f"{out} already exists and is not empty")
    if any(out.resolve() == p.resolve() for p in paths):
        raise InterpolationError(f"{out} is one of the adapters being merged")
    load_file = importlib.import_module("safetensors.torch").load_file
    try:
        merged = interpolate_state_dicts([load_file(str(p / ADAPTER_WEIGHTS)) for p in paths], weights)
    except InterpolationError as exc:
        numbered = ", ".join(f"{i} = {p}" for i, p in enumerate(paths))
        raise InterpolationError(f"{exc} (adapter {numbered})") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_file = importlib.import_module("safetensors.torch").save_file
        save_file(merged, str(tmp / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        for file in sorted(paths[0].iterdir()):
            if file.is_file() and file.name != LINEAGE_FILE and not file.name.endswith(_NOT_COPIED_SUFFIXES):
                shutil.copy2(file, tmp / file.name)  # adapter_config.json (its absolute base), tokenizer
        lineage: dict[str, Any] = {"base": _declared_base(paths[0]), "merged_from": [str(p) for p in paths]}
        lineage["weights"] = [float(w) for w in weights]
        (tmp / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2) + "\n")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _declared_base(path: Path) -> str | None:
    """The base id the adapter's lineage file declares (the same base directory means the same id)."""
    try:
        base = json.loads((path / LINEAGE_FILE).read_text()).get("base")
    except (OSError, ValueError, AttributeError):
        return None
    return str(base) if base is not None else None
