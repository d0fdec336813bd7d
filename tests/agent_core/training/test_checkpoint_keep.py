"""keep_checkpoints pruning: the newest N stay, and so do the newest complete checkpoint and every one
with a KEEP marker (promoted, published to rollouts), even when it is marked while pruning runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.training import checkpoints
from agent_core.training.checkpoints import (
    ASIDE,
    STATE_FILE,
    checkpoint_dir,
    install,
    keep_mark,
    keep_reasons,
    keep_unmark,
    latest_checkpoint,
    prune,
)


def saved(out: Path, step: int, *, complete: bool = True) -> Path:
    """A checkpoint directory as Trainer.save leaves it (config.json, and the trainer state if complete)."""
    path = checkpoint_dir(out, step)
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if complete:
        (path / STATE_FILE).write_bytes(b"state")
    return path


def left(out: Path) -> list[str]:
    return sorted(p.name for p in (out / checkpoints.CHECKPOINTS).iterdir())


def test_the_newest_n_stay_and_older_unmarked_ones_are_deleted(tmp_path: Path) -> None:
    paths = [saved(tmp_path, s) for s in (1, 2, 3, 4)]
    assert prune(tmp_path, 2) == paths[:2]
    assert left(tmp_path) == ["step-000003", "step-000004"]
    assert prune(tmp_path, 0) == [] and prune(tmp_path, 1) == [paths[2]]


def test_marked_checkpoints_survive_and_do_not_count_towards_n(tmp_path: Path) -> None:
    paths = [saved(tmp_path, s) for s in (1, 2, 3, 4, 5)]
    keep_mark(paths[0], "promoted", "promoted to policy sft-step-1")
    keep_mark(paths[2], "rollouts", "published to rollouts as run-7-v3")
    keep_mark(paths[2], "promoted", "promoted to policy best")
    assert prune(tmp_path, 1) == [paths[1], paths[3]]
    assert left(tmp_path) == ["step-000001", "step-000003", "step-000005"]
    assert keep_reasons(paths[2]) == {
        "promoted": "promoted to policy best",
        "rollouts": "published to rollouts as run-7-v3",
    }
    # A reason that ends frees the directory; the other reason still holds it.
    assert keep_unmark(paths[2], "rollouts") is True and keep_unmark(paths[2], "rollouts") is False
    assert prune(tmp_path, 1) == []
    keep_unmark(paths[2], "promoted")
    assert prune(tmp_path, 1) == [paths[2]] and left(tmp_path) == ["step-000001", "step-000005"]


def test_the_newest_complete_checkpoint_stays_for_a_resume(tmp_path: Path) -> None:
    saved(tmp_path, 1)
    resumable = saved(tmp_path, 2)
    saved(tmp_path, 3, complete=False)  # written by an older trainer: no state, cannot be resumed
    assert latest_checkpoint(tmp_path) == resumable
    prune(tmp_path, 1)
    assert left(tmp_path) == ["step-000002", "step-000003"]


def test_a_checkpoint_marked_while_pruning_runs_is_not_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = saved(tmp_path, 1)
    saved(tmp_path, 2)
    real = checkpoints.keep_reasons

    def marked_right_after_the_look(path: str | Path) -> dict[str, str]:
        reasons = real(path)
        if Path(path) == old and not reasons:  # promotion marks it just after pruning looked
            keep_mark(old, "promoted", "promoted to policy late")
        return reasons

    monkeypatch.setattr(checkpoints, "keep_reasons", marked_right_after_the_look)
    assert prune(tmp_path, 1) == []
    assert left(tmp_path) == ["step-000001", "step-000002"]
    assert real(old) == {"promoted": "promoted to policy late"} and (old / STATE_FILE).is_file()


def test_marking_a_directory_that_is_gone_fails_and_leaves_nothing(tmp_path: Path) -> None:
    old = saved(tmp_path, 1)
    aside = old.rename(old.with_name(old.name + ASIDE))  # what prune does before deleting
    with pytest.raises(FileNotFoundError):
        keep_mark(old, "promoted", "too late")
    assert not old.exists() and sorted(p.name for p in aside.iterdir()) == ["config.json", STATE_FILE]
    with pytest.raises(ValueError, match="keep tag"):
        keep_mark(aside, "../escape", "no")


def test_what_a_dead_pruning_set_aside_is_put_back_if_marked_else_deleted(tmp_path: Path) -> None:
    kept, dropped = saved(tmp_path, 1), saved(tmp_path, 2)
    saved(tmp_path, 3)
    keep_mark(kept, "promoted", "promoted to policy p")
    for path in (kept, dropped):
        path.rename(path.with_name(path.name + ASIDE))
    prune(tmp_path, 1)
    assert left(tmp_path) == ["step-000001", "step-000003"]
    assert keep_reasons(kept) == {"promoted": "promoted to policy p"}


def test_saving_a_step_again_keeps_its_markers(tmp_path: Path) -> None:
    first = saved(tmp_path, 4)
    keep_mark(first, "rollouts", "published to rollouts as run-1-v2")
    again = tmp_path / "step-000004.tmp"
    again.mkdir()
    (again / "config.json").write_text('{"again": true}')
    install(again, first)
    assert (first / "config.json").read_text() == '{"again": true}' and not again.exists()
    assert keep_reasons(first) == {"rollouts": "published to rollouts as run-1-v2"}
    assert left(tmp_path) == ["step-000004"]


class MarkingHooks:
    """Run hooks that mark the first checkpoint as promoted the moment it is reported."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.logs: list[str] = []

    def on_metrics(self, step: int, metrics: object) -> None:
        pass

    def on_checkpoint(self, step: int, path: Path, metrics: object) -> None:
        self.steps.append(step)
        if step == 1:
            keep_mark(path, "promoted", "promoted to policy first")

    def on_log(self, message: str) -> None:
        self.logs.append(message)

    def should_stop(self) -> bool:
        return False


@pytest.mark.slow  # builds a tiny policy (its tokenizer) and trains it: ~10 s
def test_a_real_sft_run_prunes_around_a_promoted_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from agent_core.training.config import validate_config
    from agent_core.training.runner import run
    from agent_core.training.tiny_policy import build_tiny_policy
    from agent_core.training.toy import oracle_examples
    from agent_core.training.types import RunSpec

    base = build_tiny_policy(tmp_path / "base", hidden_size=32, num_layers=1, num_heads=2, vocab_size=600)
    config = validate_config(
        "sft", {"batch_size": 2, "max_steps": 3, "checkpoint_every": 1, "keep_checkpoints": 1}
    )
    hooks = MarkingHooks()
    result = run(RunSpec("sft", config, base, tmp_path / "run"), hooks, examples=oracle_examples(
        ["toy/buttons-2"], range(2)))  # fmt: skip
    assert result.status == "succeeded" and hooks.steps == [1, 2, 3]
    assert left(tmp_path / "run") == ["step-000001", "step-000003"]
    assert "keep_checkpoints: deleted step-000002" in hooks.logs
