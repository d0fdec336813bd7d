"""Steps and episode outcomes: the data contract between the agent loop, rollouts and storage."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
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


def prompt_stamp(ids: Sequence[int]) -> dict[str, Any]:
    """What a step keeps of the prompt its policy read, `{"tokens": n, "sha256": hex}` (the ids, image
    tokens expanded, as the engine tokenized them): enough for a trainer to tell whether its rebuild of
    the prompt is those very tokens, without storing thousands of ids per screenshot."""
    return {"tokens": len(ids), "sha256": hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()}


def same_prompt(stamp: Mapping[str, Any] | None, ids: Sequence[int]) -> bool | None:
    """Whether `ids` are the prompt `stamp` describes (None: no usable stamp to tell by)."""
    if not isinstance(stamp, Mapping) or not isinstance(stamp.get("sha256"), str):
        return None
    return stamp.get("tokens") == len(ids) and prompt_stamp(ids)["sha256"] == stamp["sha256"]


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
