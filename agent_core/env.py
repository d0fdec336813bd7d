"""The environment as the agent sees it: observe, act, and the privileged calls checkers use.

The sandbox package adapts a leased sandbox (or an in-process provider) to this interface
(`SandboxEnv`); tests may supply their own at this one boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agent_core.actions import Action


class EnvError(Exception):
    """The environment's machinery failed (dead sandbox, lost host): never the agent's fault.

    Rollouts record it as `env_error` and re-run the episode on a fresh sandbox.
    """


class ActionRejected(ValueError):
    """The environment cannot perform this action (e.g. a mobile action on a desktop): the agent's
    mistake, recorded as an invalid step, never an env_error."""


class EnvBrokenByAgent(Exception):
    """The agent's own actions left the environment unusable (what runs in the sandbox kept killing
    what the sandbox needs, past the restarts it makes): the episode ends there as the agent's
    failure, scored 0, never an env_error (a re-run with the same seed would only break it again)."""


@dataclass(frozen=True)
class Obs:
    """One observation: the screen (encoded image) and what the sandbox adds to it."""

    screenshot: bytes
    width: int
    height: int
    mime: str = "image/png"
    a11y: str | None = None
    """Accessibility tree or DOM text, where the sandbox gives one."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Provider extras: url, title, MiniWoB utterance and reward, an SDK action's result (`result`)."""


@dataclass(frozen=True)
class ExecOutput:
    """A command run inside the environment."""

    exit_code: int | None
    """None when it was killed for running past its timeout."""
    stdout: str
    stderr: str = ""
    timed_out: bool = False


@runtime_checkable
class Env(Protocol):
    """What an episode runs against. Every method may raise `EnvError`."""

    platform: str
    """desktop, browser or mobile: decides the action space and the prompt."""

    def observe(self) -> Obs:
        """The screen now."""
        ...

    def act(self, action: Action) -> Obs:
        """Perform one structured action; the screen after it."""
        ...

    def exec(self, command: str, *, timeout: float = 30.0) -> ExecOutput:
        """Run a shell command in the environment (setup steps and checker probes)."""
        ...

    def put_file(self, path: str, data: bytes) -> None:
        """Write a file of the environment's workspace."""
        ...

    def get_file(self, path: str) -> bytes:
        """Read a file of the environment's workspace."""
        ...

    def call(self, method: str, **params: Any) -> Any:
        """A provider-specific operation (launch, goto, miniwob_start, miniwob_reward, dom, …)."""
        ...
