"""Where a run keeps its checkpoints: `out_dir/checkpoints/step-NNNNNN/`, complete once its trainer
state is in; and what kind of model directory a checkpoint is.

A checkpoint is written to `step-NNNNNN.tmp` and renamed (see `Trainer.save`), so `latest_checkpoint`
never returns a half-written one. It holds either full weights (a save_pretrained directory with its
config.json) or, for a LoRA run, a peft adapter (adapter_config.json + adapter_model.safetensors) whose
base is the model directory its adapter_config.json names by absolute path. `adapter_base` tells them
apart by reading that JSON, so the rest of the platform (the web app, vLLM's loader) needs no peft.

`keep_checkpoints` prunes old checkpoints (`prune`), except those something outside the trainer still
needs: a checkpoint carries a `KEEP.<tag>` marker file per reason (`keep_mark`: promoted to a policy,
published to rollouts that may still load it), written by whichever process knows the reason (the
trainer cannot ask the web app), and removed by it when the reason ends (`keep_unmark`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

STATE_FILE = "trainer_state.pt"
CHECKPOINTS = "checkpoints"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
KEEP = "KEEP."
"""A marker file `KEEP.<tag>` in a checkpoint directory: pruning leaves it alone (its text: why)."""
ASIDE = ".pruning.tmp"
"""A directory pruning set aside (renamed) before deleting it; ends in .tmp, so nothing reads it."""
_TAG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


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


def install(tmp: Path, final: Path) -> None:
    """Put a finished checkpoint directory `tmp` in place as `final`. One already there (this step saved
    again: a stop right after a save) is replaced, and its KEEP markers go to the new one."""
    if not final.exists():
        tmp.rename(final)
        return
    aside = final.with_name(final.name + ASIDE)
    shutil.rmtree(aside, ignore_errors=True)
    final.rename(aside)  # a keep_mark from now on fails or lands on the new one: none is lost
    for tag, reason in keep_reasons(aside).items():
        keep_mark(tmp, tag, reason)
    tmp.rename(final)
    shutil.rmtree(aside, ignore_errors=True)


def keep_mark(path: str | Path, tag: str, reason: str) -> None:
    """Protect a checkpoint directory from pruning for one reason: writes `KEEP.<tag>` holding `reason`,
    atomically (a temporary file renamed into place). FileNotFoundError when the directory is not
    there (pruned meanwhile): then nothing was protected. Once this returns, `prune` never deletes it."""
    if not _TAG.fullmatch(tag):
        raise ValueError(f"keep tag {tag!r}: lowercase letters, digits, '-' and '_' (up to 64)")
    directory = Path(path)
    tmp = directory / f".{KEEP}{tag}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(reason.strip() + "\n")
    try:
        os.replace(tmp, directory / f"{KEEP}{tag}")
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def keep_unmark(path: str | Path, tag: str) -> bool:
    """Remove one reason to keep a checkpoint (`keep_mark`'s marker); False if it was not there."""
    try:
        (Path(path) / f"{KEEP}{tag}").unlink()
    except FileNotFoundError:
        return False
    return True


def keep_reasons(path: str | Path) -> dict[str, str]:
    """Why a checkpoint directory must not be pruned: {tag: reason} of its markers ({} when none)."""
    reasons: dict[str, str] = {}
    for marker in Path(path).glob(f"{KEEP}*"):
        try:
            reasons[marker.name.removeprefix(KEEP)] = marker.read_text().strip()
        except OSError:  # removed meanwhile (keep_unmark)
            continue
    return reasons


def prune(out_dir: Path, keep: int) -> list[Path]:
    """Delete a run's old checkpoints: all but the newest `keep` (none when `keep` <= 0), never the
    newest complete one (a resume starts there) nor one with a KEEP marker (`keep_mark`). Returns the
    directories deleted.

    Another process may mark a checkpoint while this prunes it: a candidate is first renamed aside
    (`step-N.pruning.tmp`) and its markers are read after the rename; a marked one goes back. A marker
    written before the rename is seen; one written after it fails (the directory is not there), so a
    `keep_mark` that returned is never followed by a deletion."""
    if keep <= 0:
        return []
    root = Path(out_dir) / CHECKPOINTS
    _recover(root)
    done = sorted(p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp"))
    newest = latest_checkpoint(out_dir)
    deleted: list[Path] = []
    for old in done[:-keep]:
        if old == newest or keep_reasons(old):
            continue
        aside = old.with_name(old.name + ASIDE)
        try:
            old.rename(aside)
        except OSError:  # gone meanwhile
            continue
        if keep_reasons(aside):
            aside.rename(old)
            continue
        shutil.rmtree(aside, ignore_errors=True)
        deleted.append(old)
    return deleted


def _recover(root: Path) -> None:
    """What a pruning that died left aside: a marked directory goes back, the rest is deleted."""
    for aside in root.glob(f"step-*{ASIDE}"):
        original = aside.with_name(aside.name.removesuffix(ASIDE))
        if keep_reasons(aside) and not original.exists():
            aside.rename(original)
        else:
            shutil.rmtree(aside, ignore_errors=True)
