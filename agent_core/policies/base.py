"""The policy interface and its named registry.

A policy answers one `PolicyInput` (the prompt the agent built, plus the structured context) with a
`PolicyOutput`: model policies give text in the UI-TARS grammar which the agent parses; scripted
policies (oracle, random, do-nothing, human) give structured actions directly.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agent_core.actions import Action
from agent_core.data.trajectory import StepRecord
from agent_core.env import Env, Obs


class PolicyError(Exception):
    """The policy could not answer (server down, timed out, bad configuration); not a model mistake."""


class PolicyStopped(PolicyError):
    """The policy ended the episode on purpose (a person pressed stop): the loop records
    `policy_stopped`; nothing is re-run."""


@dataclass(frozen=True)
class EpisodeContext:
    """What a policy learns when an episode starts."""

    task_id: str
    instruction: str
    platform: str
    seed: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)
    setup: Mapping[str, Any] = field(default_factory=dict)
    """Results of the task's setup steps that were saved under a name (`save_as`)."""
    env: Env | None = None
    """Privileged access to the environment: only scripted policies (the oracle) may use it."""


@dataclass(frozen=True)
class PolicyInput:
    """One decision: the prompt and the structured context it was built from."""

    instruction: str
    observation: Obs
    step_index: int
    history: tuple[StepRecord, ...] = ()
    messages: Sequence[Mapping[str, Any]] = ()
    """The prompt in OpenAI chat form (system, user turns with images as data URLs, assistant turns),
    laid out as the policy's prompt family places its prompt (`agent_core.prompt_families`)."""
    screen: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class PolicyOutput:
    """A policy's answer: text to parse, or structured actions (then `text` is only for the record)."""

    text: str = ""
    actions: tuple[Action, ...] | None = None
    thought: str = ""
    token_ids: tuple[int, ...] | None = None
    """The generated tokens, where the server or model gives them (RL needs them)."""
    logprobs: tuple[float, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


class Policy(ABC):
    """One policy instance serves one episode at a time (`reset` starts an episode)."""

    name: ClassVar[str] = ""
    coords: str = "smart_resize"
    """How coordinates in this policy's text are meant: smart_resize, relative (0–1000) or absolute."""
    output_format: str = "uitars"
    """The text form its responses take: one of agent_core.actions.compat.FORMATS (uitars, json, pyautogui,
    computer13, tool_calls, xml_calls)."""
    prompt: str = "platform"
    """The prompt family its prompts are written in (agent_core.prompt_families.FAMILIES): the
    platform's own, or a model family's published one, which asks for one output_format."""
    privileged: ClassVar[bool] = False
    """Whether it is given the environment itself (only the scripted oracle is)."""
    wants_messages: ClassVar[bool] = True
    """Whether it reads the prompt (model policies); scripted ones skip building it."""

    def reset(self, ctx: EpisodeContext) -> None:  # noqa: B027 - optional hook
        """A new episode starts."""

    @abstractmethod
    def act(self, inp: PolicyInput) -> PolicyOutput:
        """The next response; raises PolicyError when it cannot answer."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free what the policy holds (connections, model memory)."""


_REGISTRY: dict[str, Callable[..., Policy]] = {}
# Modules that register the built-in policies, imported on first lookup (some are heavy: torch).
_BUILTIN_MODULES: dict[str, str] = {
    "openai": "agent_core.policies.openai",
    "local": "agent_core.policies.local",
    "oracle": "agent_core.policies.scripted",
    "random": "agent_core.policies.scripted",
    "noop": "agent_core.policies.scripted",
    "human": "agent_core.policies.human",
}


def register_policy(name: str) -> Callable[[type[Policy]], type[Policy]]:
    """Class decorator: make a policy available to `make_policy(name, ...)`."""

    def deco(cls: type[Policy]) -> type[Policy]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def policy_names() -> list[str]:
    """Every name `make_policy` accepts."""
    return sorted(set(_REGISTRY) | set(_BUILTIN_MODULES))


def make_policy(name: str, **config: Any) -> Policy:
    """A policy by registry name; an unknown name raises PolicyError listing the valid ones."""
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
    cls = _REGISTRY.get(name)
    if cls is None:
        raise PolicyError(f"unknown policy {name!r}; valid: {', '.join(policy_names())}")
    try:
        return cls(**config)
    except TypeError as exc:
        raise PolicyError(f"policy {name!r}: bad configuration: {exc}") from None
