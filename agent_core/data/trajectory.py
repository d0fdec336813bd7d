"""Steps and episode outcomes: the data contract between the agent loop, rollouts and storage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_core.actions import Action
from agent_core.env import Obs

STOP_REASONS = (
    "finished",
    "call_user",
    "env_done",
    "max_steps",
    "max_seconds",
    "invalid_limit",
    "policy_stopped",
)


@dataclass(frozen=True)
class StepRecord:
    """One think-act-observe step. An invalid step has no action and says why in `invalid_reason`."""

    index: int
    observation: Obs
    """The screen the actor saw before acting."""
    thought: str
    action: Action | None
    action_text: str
    """The action in the UI-TARS grammar (formatted from `action` when the policy gave structure)."""
    raw_output: str = ""
    """The policy's whole response, as it came."""
    invalid_reason: str = ""
    observed_at: float = 0.0
    acted_at: float | None = None
    latency_ms: int | None = None
    """The policy's think time for the response this step came from."""
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    """Extras: an SDK action's result, the response's reflection and action summary, …"""

    @property
    def is_valid(self) -> bool:
        return self.action is not None


@dataclass(frozen=True)
class CheckResult:
    """A checker's verdict: the reward and, per check, what was probed and scored."""

    reward: float
    details: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class EpisodeOutcome:
    """How an episode ended."""

    stop_reason: str
    steps: tuple[StepRecord, ...]
    final_answer: str = ""
    """The content of the agent's `finished(...)`, where it gave one."""
    declared_infeasible: bool = False
    check: CheckResult | None = None
    duration_s: float = 0.0
    final_observation: Obs | None = None
    """The screen after the last action: the result a reviewer looks at (None when the environment
    could not be read any more)."""

    @property
    def reward(self) -> float | None:
        return self.check.reward if self.check is not None else None
