"""What the RL trainer asks of an algorithm (ppo.py, grpo.py), and what an algorithm uses of the trainer.

RLTrainer (rl_trainer.py) picks its algorithm by name and calls it at the points where PPO and GRPO
differ: how many rollouts to ask for, which episodes are fresh, how turns become samples with
advantages, which samples to train on, and the importance weights of the policy loss.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from agent_core.rl.curation import Curator, ExperiencePool
from agent_core.rl.episodes import RLEpisode, RLTurn
from agent_core.training.batching import Sample


class Learner(Protocol):
    """The parts of the RL trainer an algorithm builds its samples with."""

    @property
    def pool(self) -> ExperiencePool: ...

    @property
    def untrained(self) -> Counter[str]:
        """Why turns went untrained, counted for the message of a run that trained none."""

    def encode_turn(self, turn: RLTurn, *, version: int | None = None) -> Sample | None:
        """The turn as a sample (None when too long for max_seq_len, counted); `version`: the policy
        version its episode was sampled by (the engine/trainer mismatch is measured on the current one's)."""

    def score(self, samples: list[Sample], *, values: bool) -> None:
        """Fill in π_old log-probabilities and entropies (and, with `values`, critic values)."""


class Algorithm(Protocol):
    """One RL algorithm's choices, composed from agent_core.rl's estimators and losses."""

    critic: bool
    """Whether the run trains a value model beside the policy."""
    dual_clip: float | None
    """The policy loss's dual-clip bound, or None for none."""

    def rollouts(self, task: str, curator: Curator) -> tuple[int, int]:
        """(rollouts to ask for at once, their step cap) for one request on `task`."""

    def fresh(self, kept: list[RLEpisode], *, version: int, versions_seen: Sequence[int]) -> list[RLEpisode]:
        """Of the episodes within the policy lag, those training may use."""

    def samples(
        self, groups: list[list[RLEpisode]], metrics: dict[str, float], learner: Learner
    ) -> list[Sample]:
        """The iteration's turns as samples with advantages (and returns), scored by π_old."""

    def informative(self, group: list[RLEpisode], learner: Learner) -> bool:
        """Whether a complete group has something to teach (one that does not counts toward no
        iteration's episodes: the trainer samples on)."""

    def pretraining(self, value_pretrained: int) -> bool:
        """Whether this update trains only the critic (after `value_pretrained` such updates)."""

    def train_on(self, samples: list[Sample]) -> list[Sample]:
        """The samples the update trains on."""

    def is_weights(
        self,
        mb: Sequence[Sample],
        old: Any,
        mask: Any,
        prompt_lens: Sequence[int],
        stats: dict[str, list[float]],
    ) -> Any:
        """The policy loss's importance weights for a minibatch (None for none), their stats appended."""
