"""What RL learns from: a finished rollout (RLEpisode) and its policy turns (RLTurn) as the sampler saw
them. Here, at the bottom of agent_core.rl, so the estimators, losses and the experience pool need
nothing above them; trainers (agent_core.training) and rollout sources (the webapp, the host's local
rollouts) build and read them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RLTurn:
    """One policy response inside an episode, with what the rollout's sampler saw."""

    messages: Sequence[Mapping[str, Any]]
    a11y: str | None
    response_ids: tuple[int, ...]
    """The tokens as sampled (the response text is their decoding)."""
    rollout_logprobs: tuple[float, ...]
    """Their logprobs under the rollout's sampler (vLLM or the local model)."""
    parsed: bool = True
    """Whether the response parsed into an action (a format reward applies otherwise)."""
    index: int = 0
    """Its place among the episode's turns (0: the first), for the per-turn mismatch metrics."""
    prompt: Mapping[str, Any] | None = None
    """What the sampler said of the prompt it read (`agent_core.data.trajectory.prompt_stamp`: its
    token count and a digest of its ids, image tokens expanded); None where it said nothing."""


@dataclass(frozen=True)
class RLEpisode:
    """A finished rollout: its turns, its outcome and the policy version that produced it."""

    task_id: str
    seed: int
    reward: float
    """The checker's reward in [0, 1] (success is reward >= 1)."""
    turns: tuple[RLTurn, ...]
    policy_version: int
    """The trainer step of the policy that generated it (what `RolloutSource.publish` was given)."""
    episode_id: str = ""
    steps: int = 0
    """Environment steps it took (the DART length cap follows these)."""
    injected: bool = False
    """Taken from the experience pool, not a fresh rollout."""

    @property
    def success(self) -> bool:
        return self.reward >= 1.0
