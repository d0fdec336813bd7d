"""What trainers consume and report: SFT examples, RL episodes, the rollout source and the run's hooks.

The webapp (or a script) gives a trainer its data and listens to it through these; the trainer never
knows where episodes come from (Celery rollouts on a sandbox host, or an in-process pool).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent_core.rl.episodes import RLEpisode


@dataclass(frozen=True)
class SFTExample:
    """One target turn: the prompt as the agent built it and the response to learn."""

    messages: Sequence[Mapping[str, Any]]
    """OpenAI chat form (system, user turns with images as data URLs, earlier assistant turns)."""
    response: str
    """The assistant's text in the UI-TARS grammar ("Thought: …\\nAction: …")."""
    a11y: str | None = None
    """The observation's text (accessibility tree / element list) a text-only model reads."""
    source: str = ""
    """Where it came from (episode id, actor), for logs."""
    placeholder_thought: bool = False
    """The recorded thought was a placeholder ("oracle step 3"), left out of `response`."""


class RolloutSource(Protocol):
    """Where an RL trainer gets episodes: it publishes policies and asks for rollouts, then polls."""

    def tasks(self) -> list[str]:
        """The task ids rollouts can be asked for."""
        ...

    def publish(self, version: int, model_dir: Path) -> None:
        """A new policy (a checkpoint directory); rollouts that start from now on use it."""
        ...

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        """Ask for `n` more rollouts of one fresh instance of `task_id`, each capped at `max_steps`
        environment steps; returns the seed they share. A GRPO group is these `n` rollouts, so its
        advantages compare the policy's attempts at the same problem, not easier and harder instances.
        Every rollout asked for comes back from `poll` once, a lost one as an episode with no turns."""
        ...

    def poll(self, timeout: float) -> list[RLEpisode]:
        """Episodes finished since the last poll (waits up to `timeout` seconds for the first)."""
        ...

    def pending(self) -> int:
        """Rollouts asked for that have not been returned by `poll` yet."""
        ...

    def utilisation(self) -> float | None:
        """Share of environment time spent stepping since the last call (None if unknown)."""
        ...

    def close(self) -> None:
        """Cancel what is still queued and release the environments."""
        ...


class Hooks(Protocol):
    """How a run reports: metrics, checkpoints and log lines; and how it learns it must stop."""

    def on_metrics(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def on_checkpoint(self, step: int, path: Path, metrics: Mapping[str, float]) -> None: ...

    def on_log(self, message: str) -> None: ...

    def should_stop(self) -> bool: ...


class NullHooks:
    """Hooks that print log lines and never stop (scripts, benchmarks)."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.quiet = quiet
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.checkpoints: list[tuple[int, Path]] = []

    def on_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.metrics.append((step, dict(metrics)))

    def on_checkpoint(self, step: int, path: Path, metrics: Mapping[str, float]) -> None:
        self.checkpoints.append((step, path))

    def on_log(self, message: str) -> None:
        if not self.quiet:
            print(message, flush=True)

    def should_stop(self) -> bool:
        return False


@dataclass(frozen=True)
class RunSpec:
    """What to train: the algorithm, its validated config, the starting model and where to write."""

    algorithm: str
    config: Mapping[str, Any]
    base_model: Path
    """A model directory (save_pretrained layout): the base policy, or the checkpoint resumed from."""
    out_dir: Path
    """The run's directory: checkpoints go to out_dir/checkpoints/step-NNNNNN/."""
    resume_from: Path | None = None
    """A checkpoint directory of this run to continue from (optimizer and trainer state included)."""


@dataclass
class RunResult:
    status: str
    """succeeded or stopped."""
    step: int
    checkpoint: Path | None
    metrics: dict[str, float] = field(default_factory=dict)
