"""The one interface every sandbox provider implements, and the data it exchanges.

A provider instance is one sandbox. Its methods are synchronous and are only ever called from that
sandbox's own worker thread (the pool guarantees it), so a provider needs no locks of its own; the
one exception is `health()`, which the pool's checker calls from its own thread and which must
therefore only read (poll processes, look at a connection flag).
Failures of the machinery (a dead X server, a crashed browser, a vanished device) raise `EnvError`;
rollouts record them as `env_error`, never as the agent's failure.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from agent_core import actions as A
from agent_core.actions import Action, ActionError
from agent_core.env import ActionRejected, EnvBrokenByAgent
from agent_core.env import EnvError as CoreEnvError

ImageFormat = Literal["png", "jpeg"]


class SandboxError(Exception):
    """Base of the sandbox layer's errors."""


class EnvError(SandboxError, CoreEnvError):
    """The sandbox's machinery failed (a process died, a device vanished): not the agent's fault.

    It is also `agent_core.env.EnvError`, so the agent loop and rollouts treat it as an env_error."""


class ActionUnsupported(SandboxError, ActionRejected):
    """The provider cannot perform this action (a mobile action on a desktop, say)."""


class ActionFailed(SandboxError, ActionRejected):
    """The sandbox refused an agent's action for a reason of the action's own (a path outside the
    workspace or not there, a NUL in a command, an unknown key, an operation the sandbox lacks): the
    agent's invalid step, never an env error."""


class DiskFull(ActionFailed):
    """A write does not fit what is left of the sandbox's disk quota: the writer's doing (an agent's
    invalid step, a task whose files are too big for its profile), never an env error."""


class SandboxBrokenByAgent(SandboxError, EnvBrokenByAgent):
    """What runs in the sandbox keeps breaking what the sandbox needs (its window manager, say), past
    the restarts `Provider.repair` makes: the sandbox is unusable, and that is the agent's doing (its
    episode fails), not an env error."""


class OperationUnsupported(SandboxError):
    """The provider cannot do this operation at all (snapshot on a device, say)."""


class SandboxPathError(SandboxError):
    """A file path leaves the sandbox's workspace or does not exist."""


DISK_MB_MIN = 32
"""The smallest disk quota a profile may give (ext4 keeps about 2 MiB of a volume this small)."""
DISK_MB_MAX = 1 << 20


@dataclass(frozen=True)
class Profile:
    """What kind of sandbox to build: the pool keeps sandboxes per profile."""

    name: str
    provider: str
    width: int = 1280
    height: int = 720
    network: bool = False
    """Whether the sandbox may reach any network (its own loopback always works)."""
    memory_mb: int = 2048
    """Memory limit for everything in the sandbox (cgroup where the host may make one)."""
    max_pids: int = 512
    """Process limit for everything in the sandbox."""
    disk_mb: int = 2048
    """Disk quota for everything the sandbox keeps (its workspace, /tmp, logs): its root is an ext4
    volume of this size where the host runs as root (providers.confine.disk); 0: no quota."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific settings (apps to start, android serial, …)."""


@dataclass(frozen=True)
class Screenshot:
    """An encoded screen capture."""

    data: bytes
    format: ImageFormat
    width: int
    height: int
    captured_at: float = field(default_factory=time.time)

    @property
    def content_type(self) -> str:
        """The MIME type of `data`."""
        return "image/png" if self.format == "png" else "image/jpeg"


@dataclass(frozen=True)
class Observation:
    """What the agent sees after a step."""

    screenshot: Screenshot
    a11y: str | None = None
    """Accessibility tree (text) where the provider gives one and it was asked for."""
    dom: str | None = None
    """DOM snapshot (browser sandboxes)."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Provider extras: url, title, MiniWoB reward and utterance, …"""


@dataclass(frozen=True)
class ExecResult:
    """A finished command run inside the sandbox."""

    exit_code: int | None
    """None when it was killed for running past its timeout."""
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    """Whether the output went past the cap and was cut."""
    duration_s: float


@dataclass(frozen=True)
class Health:
    """The outcome of a health check: ok, or what is wrong."""

    ok: bool
    """False: the sandbox is broken beyond repair (the pool replaces it)."""
    detail: str = ""
    processes: Mapping[str, bool] = field(default_factory=dict)
    """Process name → alive, for the providers that own processes."""
    repair: tuple[str, ...] = ()
    """Parts that died and that `Provider.repair` restarts in place (the pool asks it to)."""


class Provider(ABC):
    """One sandbox. Subclasses register with `@register_provider("name")`."""

    name: ClassVar[str] = ""
    supports_snapshot: ClassVar[bool] = False
    slot: int = 0
    """A small number unique among the live sandboxes of this host (the pool sets it before `start`);
    providers derive per-sandbox resources from it (an unprivileged uid, say)."""

    def __init__(self, *, sandbox_id: str, profile: Profile, root: Path) -> None:
        self.sandbox_id = sandbox_id
        self.profile = profile
        self.root = root
        """A directory owned by this sandbox on the host (workspace, logs, state)."""

    # --- lifecycle ---
    @abstractmethod
    def start(self) -> None:
        """Bring the sandbox up; raise EnvError if it cannot."""

    @abstractmethod
    def health(self) -> Health:
        """A cheap liveness check (called often; must not take more than a few ms)."""

    def repair(self) -> list[str]:
        """Restart, in place, the parts `health().repair` names (a window manager an agent killed);
        returns what was restarted. EnvError if it cannot; SandboxBrokenByAgent if what runs in the
        sandbox keeps killing them. Called on the sandbox's own thread."""
        return []

    @abstractmethod
    def reset(self) -> None:
        """Return to the profile's clean state, keeping what is expensive to start where it can."""

    @abstractmethod
    def stop(self) -> None:
        """Stop everything the sandbox runs; safe to call twice and on a half-started sandbox."""

    # --- stepping ---
    @abstractmethod
    def observe(self, *, fmt: ImageFormat = "png", a11y: bool = False, quality: int = 80) -> Observation:
        """Capture the screen now (and the a11y tree / DOM if asked)."""

    @abstractmethod
    def act(self, action: Action) -> None:
        """Perform one structured action; returns once the input is delivered and the screen settled."""

    # --- shell and files ---
    @abstractmethod
    def exec(
        self, command: str | Sequence[str], *, timeout: float = 30.0, output_cap: int = 65536
    ) -> ExecResult:
        """Run a command in the sandbox (a string goes to its shell), with a timeout and output cap."""

    @abstractmethod
    def put_file(self, path: str, data: bytes) -> None:
        """Write `data` to `path` in the sandbox (relative paths are in the workspace)."""

    @abstractmethod
    def get_file(self, path: str) -> bytes:
        """Read `path` from the sandbox."""

    # --- optional ---
    def devtools(self) -> Any:
        """The DevTools pipe of the sandbox's browser (sandbox_workers.devtools.DevToolsPipe), which the
        host serves to the lease's holder; OperationUnsupported where there is none."""
        raise OperationUnsupported(f"{self.name} sandboxes have no browser DevTools for the host")

    def snapshot(self) -> bytes:
        """An opaque blob that `restore` takes back; providers that cannot raise OperationUnsupported."""
        raise OperationUnsupported(f"{self.name} sandboxes cannot snapshot")

    def restore(self, blob: bytes) -> None:
        """Return to a snapshot taken with `snapshot`."""
        raise OperationUnsupported(f"{self.name} sandboxes cannot restore")

    extensions: ClassVar[frozenset[str]] = frozenset()
    """Names `call` accepts: provider-specific typed operations (goto, miniwob_start, virtual_time, …)."""

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """A provider-specific operation on JSON; an unknown name raises, listing the valid ones."""
        valid = ", ".join(sorted(self.extensions)) or "none"
        raise OperationUnsupported(f"{self.name} sandboxes have no operation {method!r}; valid: {valid}")

    def mcp_call(
        self, *, server: str, tool: str, arguments: Mapping[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """Call a tool of one of the sandbox's MCP servers: {server, tool, content, is_error, structured}
        (see sandbox_workers.mcp.hub); providers without MCP servers refuse it."""
        raise ActionUnsupported(f"{self.name} sandboxes have no MCP servers")

    def pids(self) -> list[int]:
        """Every host process id that belongs to this sandbox (for orphan checks); [] if it owns none."""
        return []

    def endpoints(self) -> dict[str, Any]:
        """Live endpoints on the host (VNC port, …) for the live view."""
        return {}

    def start_screencast(
        self,
        on_frame: Callable[[bytes], None],
        *,
        max_fps: float = 10.0,
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        """Call `on_frame(jpeg_bytes)` with screen frames until `stop_screencast`; `on_end(reason)` where
        the stream ends by itself (the screen's server died), so that viewers reconnect."""
        raise OperationUnsupported(f"{self.name} sandboxes have no screencast")

    def stop_screencast(self) -> None:
        """Stop the frames started by `start_screencast`."""
        return

    # --- surviving a host restart ---
    def state(self) -> dict[str, Any]:
        """What a restarted host needs to find this sandbox again (JSON); {} if it cannot."""
        return {}

    @classmethod
    def adopt(cls, *, sandbox_id: str, profile: Profile, root: Path, state: Mapping[str, Any]) -> Provider:
        """Reattach to a sandbox a previous host process started; raise EnvError if it is gone."""
        raise EnvError(f"{cls.name} sandboxes cannot be adopted after a host restart")

    @classmethod
    def cleanup(cls, *, root: Path, state: Mapping[str, Any]) -> None:
        """Kill whatever a lost sandbox left running (after a failed adopt)."""
        return

    @classmethod
    def sweep(cls, *, pool_root: Path) -> int:
        """Free what sandboxes of this kind left under `pool_root` that no sandbox directory leads to
        (a host killed while it made one: a disk image, a loop device); how many. Run at a host's start
        after adoption, and by the reaper."""
        return 0

    @classmethod
    def host_report(cls) -> dict[str, Any]:
        """What the host's status says of sandboxes of this kind on this host ({} by default; the X
        desktop and browser: whether their disks have a quota, and why not)."""
        return {}


def perform(provider: Provider, action: Action) -> dict[str, Any] | None:
    """Carry out an agent's `action` on `provider`; an SDK action's result (terminal: exit code and
    output; file_read: the content; file_write: bytes written; mcp_call: the tool's result), None for
    GUI input. A tool that reports an error is an invalid step too (its message is the reason).

    A refusal about the action itself is ActionFailed (an invalid step); EnvError passes as it is."""
    try:
        if isinstance(action, A.Terminal):
            res = provider.exec(action.command, timeout=action.timeout)
            return {"exit_code": res.exit_code, "stdout": res.stdout, "stderr": res.stderr,
                    "timed_out": res.timed_out, "truncated": res.truncated}  # fmt: skip
        if isinstance(action, A.FileRead):
            return {"content": provider.get_file(action.path).decode("utf-8", "replace")}
        if isinstance(action, A.FileWrite):
            data = action.content.encode()
            provider.put_file(action.path, data)
            return {"written": len(data)}
        if isinstance(action, A.McpCall):
            result = provider.mcp_call(server=action.server, tool=action.tool, arguments=action.arguments)
            if result.get("is_error"):
                raise ActionFailed(f"mcp_call {action.server}.{action.tool}: {result.get('content')}")
            return result
        provider.act(action)
        return None
    except (EnvError, ActionRejected, EnvBrokenByAgent):
        raise
    except (SandboxError, ActionError) as exc:
        raise ActionFailed(f"{action.kind}: {exc}") from exc


PROVIDERS: dict[str, type[Provider]] = {}


def register_provider(name: str) -> Callable[[type[Provider]], type[Provider]]:
    """Class decorator adding a provider to the registry under `name`."""

    def deco(cls: type[Provider]) -> type[Provider]:
        cls.name = name
        PROVIDERS[name] = cls
        return cls

    return deco
