"""Scripted oracle solutions, by task id.

An oracle is a generator function `oracle(ctx) -> Iterator[Action]`. It runs lazily: after each
yielded action the agent performs it and observes, and only then asks for the next one, so an
oracle can look at the environment as it is now (`ctx.env.call("dom")`, `ctx.observation`).
Oracles have privileged access to the environment; no other policy does.

Oracle demonstrations become SFT data, so each action carries the thought a model should learn with
it: what is on the screen and why this action, in this task instance's own words (`yield said(ctx,
'The dialog asks me to close it; its "x" is at the top right, so I click it.', action)`). An action
yielded without one is recorded with no thought (its target teaches the action only), never with a
stand-in like "oracle step 3".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent_core.actions import Action
from agent_core.env import Env, Obs


@dataclass
class OracleContext:
    """What an oracle knows: the environment, the drawn parameters, saved setup results, the screen."""

    env: Env
    params: Mapping[str, Any]
    setup: Mapping[str, Any]
    instruction: str
    observation: Obs | None = None
    """The latest observation (updated before each resumption)."""
    scratch: dict[str, Any] = field(default_factory=dict)
    thought: str = ""
    """The thought of the action being yielded (set by `said`, taken by the oracle policy)."""

    def take_thought(self) -> str:
        """The thought said for the action just yielded ("" when none), cleared for the next one."""
        thought, self.thought = self.thought, ""
        return thought


ActionT = TypeVar("ActionT", bound=Action)


def said(ctx: OracleContext, thought: str, action: ActionT) -> ActionT:
    """`action`, with `thought` as what the oracle thinks when it takes it (what it sees, and why)."""
    ctx.thought = " ".join(thought.split())
    return action


Oracle = Callable[[OracleContext], Iterator[Action]]
_ORACLES: dict[str, Oracle] = {}
# Modules whose import registers the suites' oracles.
ORACLE_MODULES = (
    "agent_core.suites.miniwob_oracles",
    "agent_core.suites.miniwob_oracles_widgets",
    "agent_core.suites.desktop_oracles",
    "agent_core.suites.desktop_oracles_web",
    "agent_core.suites.desktop_oracles_mcp",
    "agent_core.suites.osworld_samples",
    "agent_core.suites.games",  # loads every game's module (games/<name>)
)


def register_oracle(*task_ids: str) -> Callable[[Oracle], Oracle]:
    """Function decorator: the oracle of the named task(s)."""

    def deco(fn: Oracle) -> Oracle:
        for task_id in task_ids:
            _ORACLES[task_id] = fn
        return fn

    return deco


def _load() -> None:
    for name in ORACLE_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def oracle_names() -> list[str]:
    """The task ids that have an oracle."""
    _load()
    return sorted(_ORACLES)


def get_oracle(name: str) -> Oracle:
    """The oracle called `name`; unknown names raise KeyError."""
    _load()
    try:
        return _ORACLES[name]
    except KeyError:
        raise KeyError(f"no oracle named {name!r} ({len(_ORACLES)} known)") from None
