"""Parameter interpolation: a weighted average of checkpoints fine-tuned from the same base model.

Averaging only makes sense between models that share an architecture and a starting point, so every
mismatch (weights, keys, shapes, dtypes, configs, declared bases) is refused with an error that names it.
A checkpoint may declare its base in `flywheel_lineage.json` ({"base": "<id>"}); the merged directory
gets one too, with where it came from.
"""

from __future__ import annotations

import importlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

LINEAGE_FILE = "flywheel_lineage.json"
SINGLE_WEIGHTS = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
# Config keys that record how a checkpoint was saved, not what the model is.
_CONFIG_IGNORED = frozenset({"_name_or_path", "transformers_version", "torch_dtype", "dtype"})
# Files of a checkpoint that are not carried into the merge: its weights and its trainer state.
_NOT_COPIED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
_NOT_COPIED = frozenset({SHARD_INDEX, "pytorch_model.bin.index.json", LINEAGE_FILE})


class InterpolationError(ValueError):
    """Checkpoints that cannot be merged (the message says why)."""


def _torch() -> Any:
    # Imported on use so that agent_core (and the web process) imports without torch.
    return importlib.import_module("torch")


def _check_weights(weights: Sequence[float], count: int) -> list[float]:
    ws = [float(w) for w in weights]
    if count == 0:
        raise InterpolationError("nothing to interpolate: no checkpoints given")
    if len(ws) != count:
        raise InterpolationError(f"{len(ws)} weights for {count} checkpoints")
    for i, w in enumerate(ws):
        if not w >= 0.0:
            raise InterpolationError(f"weight {i} is {w}: weights must be >= 0")
    total = sum(ws)
    if abs(total - 1.0) > 1e-6:
        raise InterpolationError(f"weights must sum to 1, they sum to {total:g}")
    return ws


def _check_keys(state_dicts: Sequence[Mapping[str, Any]]) -> list[str]:
    first = list(state_dicts[0].keys())
    reference = set(first)
    for i, sd in enumerate(state_dicts[1:], start=1):
        keys = set(sd.keys())
        missing = sorted(reference - keys)
        extra = sorted(keys - reference)
        if missing:
            raise InterpolationError(f"checkpoint {i} lacks tensor {missing[0]!r} that checkpoint 0 has")
        if extra:
            raise InterpolationError(f"checkpoint {i} has tensor {extra[0]!r} that checkpoint 0 lacks")
    return first


def _combine(key: str, tensors: Sequence[Any], weights: Sequence[float]) -> Any:
    torch = _torch()
    first = tensors[0]
    for i, t in enumerate(tensors[1:], start=1):
        if tuple(t.shape) != tuple(first.shape):
            raise InterpolationError(
                f"tensor {key!r} has shape {tuple(first.shape)} in checkpoint 0 "
                f"but {tuple(t.shape)} in checkpoint {i}"
            )
        if t.dtype != first.dtype:
            raise InterpolationError(
                f"tensor {key!r} has dtype {first.dtype} in checkpoint 0 but {t.dtype} in checkpoint {i}"
            )
    if not first.is_floating_point():
        # Integer buffers (position ids, masks) cannot be averaged: they must agree.
        for i, t in enumerate(tensors[1:], start=1):
            if not torch.equal(t, first):
                raise InterpolationError(f"non-floating tensor {key!r} differs between checkpoint 0 and {i}")
        return first.clone()
    # Accumulate in float64 so that bf16 / fp16 checkpoints lose nothing before the final cast.
    acc = torch.zeros(first.shape, dtype=torch.float64, device=first.device)
    for w, t in zip(weights, tensors, strict=True):
        acc += w * t.to(torch.float64)
    return acc.to(first.dtype).contiguous()


def interpolate_state_dicts(
    state_dicts: Sequence[Mapping[str, Any]], weights: Sequence[float]
) -> dict[str, Any]:
    """The weighted average sum_i w_i * sd_i of state dicts with the same keys, shapes and dtypes."""
    ws = _check_weights(weights, len(state_dicts))
    keys = _check_keys(state_dicts)
    return {key: _combine(key, [sd[key] for sd in state_dicts], ws) for key in keys}


class _LazyWeights(Mapping[str, Any]):
    """A checkpoint's tensors read one at a time from its safetensors file(s), so merges fit in memory."""

    def __init__(self, path: Path) -> None:
        if (path / SINGLE_WEIGHTS).is_file():
            self._handles = {SINGLE_WEIGHTS: self._open(path / SINGLE_WEIGHTS)}
            self._where: dict[str, str] = dict.fromkeys(self._handles[SINGLE_WEIGHTS].keys(), SINGLE_WEIGHTS)
        elif (path / SHARD_INDEX).is_file():
            self._where = dict(json.loads((path / SHARD_INDEX).read_text())["weight_map"])
            self._handles = {name: self._open(path / name) for name in sorted(set(self._where.values()))}
        else:
            raise InterpolationError(f"{path} has no {SINGLE_WEIGHTS} or {SHARD_INDEX}")

    @staticmethod
    def _open(file: Path) -> Any:
        safetensors = importlib.import_module("safetensors")
        return safetensors.safe_open(str(file), framework="pt", device="cpu")

    def __getitem__(self, key: str) -> Any:
        return self._handles[self._where[key]].get_tensor(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def _flat_config(path: Path) -> dict[str, Any]:
    file = path / "config.json"
    if not file.is_file():
        raise InterpolationError(f"{path} has no config.json: not a save_pretrained directory")
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k not in _CONFIG_IGNORED:
                    walk(f"{prefix}{k}.", v)
        else:
            flat[prefix[:-1]] = value

    walk("", json.loads(file.read_text()))
    return flat


def _check_configs(paths: Sequence[Path]) -> None:
    reference = _flat_config(paths[0])
    for path in paths[1:]:
        other = _flat_config(path)
        differing = sorted(k for k in reference.keys() | other.keys() if reference.get(k) != other.get(k))
        if differing:
            details = "; ".join(
                f"{k}: {reference.get(k, '(absent)')!r} vs {other.get(k, '(absent)')!r}"
                for k in differing[:5]
            )
            more = f" (and {len(differing) - 5} more)" if len(differing) > 5 else ""
            raise InterpolationError(
                f"configs of {paths[0]} and {path} differ in the architecture: {details}{more}"
            )


def _shared_base(paths: Sequence[Path]) -> str | None:
    # A checkpoint without a lineage file declares nothing (a base model itself): the configs must do.
    declared: list[tuple[Path, str]] = []
    for path in paths:
        file = path / LINEAGE_FILE
        if file.is_file():
            base = json.loads(file.read_text()).get("base")
            if base is not None:
                declared.append((path, str(base)))
    for path, base in declared[1:]:
        if base != declared[0][1]:
            raise InterpolationError(
                f"checkpoints come from different bases: {declared[0][1]!r} ({declared[0][0]}) "
                f"and {base!r} ({path})"
            )
    return declared[0][1] if declared else None


def _copied(file: Path) -> bool:
    return file.is_file() and file.name not in _NOT_COPIED and not file.name.endswith(_NOT_COPIED_SUFFIXES)


def check_mergeable(paths: Sequence[Path], weights: Sequence[float]) -> str | None:
    """The checks a merge makes before it reads a tensor (weights, architectures, declared bases), from
    the configs alone: cheap enough to refuse a request at once. Returns the shared declared base."""
    paths = [Path(p) for p in paths]
    _check_weights(weights, len(paths))
    _check_configs(paths)
    return _shared_base(paths)


def interpolate_checkpoints(paths: Sequence[Path], weights: Sequence[float], out: Path) -> Path:
    """Merge save_pretrained checkpoints of the same base with `weights` into `out`; returns `out`."""
    paths = [Path(p) for p in paths]
    out = Path(out)
    base = check_mergeable(paths, weights)
    ws = [float(w) for w in weights]
    if out.exists() and any(out.iterdir()):
        raise InterpolationError(f"{out} already exists and is not empty")
    if any(out.resolve() == p.resolve() for p in paths):
        raise InterpolationError(f"{out} is one of the checkpoints being merged")

    try:
        merged = interpolate_state_dicts([_LazyWeights(p) for p in paths], ws)
    except InterpolationError as exc:
        numbered = ", ".join(f"{i} = {p}" for i, p in enumerate(paths))
        raise InterpolationError(f"{exc} (checkpoint {numbered})") from None

    # Written next to `out` and renamed in, so that a crash never leaves a half-merged model behind.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_file = importlib.import_module("safetensors.torch").save_file
        save_file(merged, str(tmp / SINGLE_WEIGHTS), metadata={"format": "pt"})
        for file in sorted(paths[0].iterdir()):
            if _copied(file):
                shutil.copy2(file, tmp / file.name)
        lineage = {"base": base, "merged_from": [str(p) for p in paths], "weights": ws}
        (tmp / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2) + "\n")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
