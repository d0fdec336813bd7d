"""Where a run keeps its checkpoints: `out_dir/checkpoints/step-NNNNNN/`, complete once its trainer
state is in.

A checkpoint is written to `step-NNNNNN.tmp` and renamed (see `Trainer.save`), so `latest_checkpoint`
never returns a half-written one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

STATE_FILE = "trainer_state.pt"
CHECKPOINTS = "checkpoints"


def checkpoint_dir(out_dir: Path, step: int) -> Path:
    return Path(out_dir) / CHECKPOINTS / f"step-{step:06d}"


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run directory (one with its trainer state), or None."""
    root = Path(out_dir) / CHECKPOINTS
    if not root.is_dir():
        return None
    done = [p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp")]
    done = [p for p in done if (p / STATE_FILE).is_file() and (p / "config.json").is_file()]
    return max(done, key=lambda p: p.name) if done else None


def prune(out_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints of a run directory (none when `keep` <= 0)."""
    if keep <= 0:
        return
    done = sorted(p for p in (out_dir / CHECKPOINTS).glob("step-*") if not p.name.endswith(".tmp"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
