"""Structured actions: the one form every policy emits and every sandbox executes.

Actions are frozen dataclasses (data, never code). Coordinates here are absolute screen pixels of
the sandbox; mapping a model's coordinates (smart-resized or 0–1000 relative) to screen pixels
happens when text is parsed, before an action is built. `action_to_dict` / `action_from_dict` give
the JSON form; the UI-TARS text grammar lives beside this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

ScrollDirection = Literal["up", "down", "left", "right"]
MouseButton = Literal["left", "right", "middle"]
SCROLL_DIRECTIONS: tuple[str, ...] = ("up", "down", "left", "right")
MAX_TERMINAL_TIMEOUT_S = 3600.0


class ActionError(ValueError):
    """An action is malformed (bad field, unknown type); the message says which and why."""


@dataclass(frozen=True)
class Action:
    """Base of every action; `kind` is the name used in the JSON and text forms."""

    kind: ClassVar[str] = ""
    platforms: ClassVar[frozenset[str]] = frozenset({"desktop", "browser", "mobile"})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("int",) and (not isinstance(value, int) or isinstance(value, bool)):
                raise ActionError(f"{self.kind}.{f.name} must be an integer, got {value!r}")
            if f.type in ("int",) and f.name in ("x", "y", "x1", "y1", "x2", "y2") and value < 0:
                raise ActionError(f"{self.kind}.{f.name} must be >= 0, got {value}")
            if f.type in ("str",) and not isinstance(value, str):
                raise ActionError(f"{self.kind}.{f.name} must be a string, got {value!r}")


# --- pointer -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointerAction(Action):
    """An action at one screen point (x, y)."""

    x: int
    y: int


@dataclass(frozen=True)
class Click(PointerAction):
    """A single left click at (x, y)."""

    kind: ClassVar[str] = "click"


@dataclass(frozen=True)
class LeftDouble(PointerAction):
    """A double left click at (x, y)."""

    kind: ClassVar[str] = "left_double"


@dataclass(frozen=True)
class RightSingle(PointerAction):
    """A single right click at (x, y)."""

    kind: ClassVar[str] = "right_single"


@dataclass(frozen=True)
class MiddleSingle(PointerAction):
    """A single middle click at (x, y) (a link in a new tab, an X selection pasted)."""

    kind: ClassVar[str] = "middle_single"


@dataclass(frozen=True)
class Hover(PointerAction):
    """Move the pointer to (x, y) without clicking."""

    kind: ClassVar[str] = "hover"


@dataclass(frozen=True)
class Drag(Action):
    """Press at (x1, y1), move to (x2, y2), release."""

    kind: ClassVar[str] = "drag"
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Scroll(PointerAction):
    """Scroll `amount` notches in `direction` with the pointer at (x, y)."""

    kind: ClassVar[str] = "scroll"
    direction: str
    amount: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.direction not in SCROLL_DIRECTIONS:
            raise ActionError(f"scroll.direction must be one of {', '.join(SCROLL_DIRECTIONS)}")
        if self.amount < 1:
            raise ActionError("scroll.amount must be >= 1")


# --- keyboard ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hotkey(Action):
    """Press `keys` together (in order), release in reverse: ("ctrl", "c")."""

    kind: ClassVar[str] = "hotkey"
    keys: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.keys or not all(isinstance(k, str) and k for k in self.keys):
            raise ActionError("hotkey.keys must be a non-empty list of key names")


@dataclass(frozen=True)
class Press(Action):
    """Press and release one key."""

    kind: ClassVar[str] = "press"
    key: str


@dataclass(frozen=True)
class KeyDown(Action):
    """Press one key and keep it down."""

    kind: ClassVar[str] = "keydown"
    key: str


@dataclass(frozen=True)
class KeyUp(Action):
    """Release one key."""

    kind: ClassVar[str] = "keyup"
    key: str


@dataclass(frozen=True)
class Type(Action):
    """Type `content`; a trailing newline means submit (press Enter)."""

    kind: ClassVar[str] = "type"
    content: str

    @property
    def submits(self) -> bool:
        """Whether the text ends with a newline, i.e. Enter is pressed after it."""
        return self.content.endswith("\n")


# --- control -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait(Action):
    """Do nothing for `seconds` (the screen may change by itself)."""

    kind: ClassVar[str] = "wait"
    seconds: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.seconds, int | float) or not 0 <= self.seconds <= 60:
            raise ActionError("wait.seconds must be a number in [0, 60]")


@dataclass(frozen=True)
class Finished(Action):
    """The agent declares the task done; `content` is its answer, if any."""

    kind: ClassVar[str] = "finished"
    content: str = ""


@dataclass(frozen=True)
class CallUser(Action):
    """The agent asks the human for help."""

    kind: ClassVar[str] = "call_user"


# --- mobile ------------------------------------------------------------------------------------

_MOBILE = frozenset({"mobile"})


@dataclass(frozen=True)
class LongPress(PointerAction):
    """Touch and hold at (x, y)."""

    kind: ClassVar[str] = "long_press"
    platforms: ClassVar[frozenset[str]] = _MOBILE
    seconds: float = 1.0


@dataclass(frozen=True)
class OpenApp(Action):
    """Open the app called `app_name` (a package name on Android)."""

    kind: ClassVar[str] = "open_app"
    platforms: ClassVar[frozenset[str]] = _MOBILE
    app_name: str


@dataclass(frozen=True)
class PressHome(Action):
    """The home button."""

    kind: ClassVar[str] = "press_home"
    platforms: ClassVar[frozenset[str]] = _MOBILE


@dataclass(frozen=True)
class PressBack(Action):
    """The back button."""

    kind: ClassVar[str] = "press_back"
    platforms: ClassVar[frozenset[str]] = _MOBILE


# --- SDK (no GUI) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Terminal(Action):
    """Run a shell command in the sandbox (its own shell, never the host's)."""

    kind: ClassVar[str] = "terminal"
    command: str
    timeout: float = 30.0

    def __post_init__(self) -> None:
        super().__post_init__()
        # The sandbox's worker waits this long: an agent must not hold it for hours (the host's own
        # exec API has the same bound).
        t = self.timeout
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t <= MAX_TERMINAL_TIMEOUT_S:
            raise ActionError(f"terminal.timeout must be a number in [0, {MAX_TERMINAL_TIMEOUT_S:g}] seconds")


@dataclass(frozen=True)
class FileRead(Action):
    """Read a file of the sandbox's workspace."""

    kind: ClassVar[str] = "file_read"
    path: str


@dataclass(frozen=True)
class FileWrite(Action):
    """Write a file of the sandbox's workspace."""

    kind: ClassVar[str] = "file_write"
    path: str
    content: str


@dataclass(frozen=True)
class McpCall(Action):
    """Call a tool of an MCP server available to the agent."""

    kind: ClassVar[str] = "mcp_call"
    server: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


ACTION_TYPES: dict[str, type[Action]] = {
    cls.kind: cls
    for cls in (
        Click,
        LeftDouble,
        RightSingle,
        MiddleSingle,
        Hover,
        Drag,
        Scroll,
        Hotkey,
        Press,
        KeyDown,
        KeyUp,
        Type,
        Wait,
        Finished,
        CallUser,
        LongPress,
        OpenApp,
        PressHome,
        PressBack,
        Terminal,
        FileRead,
        FileWrite,
        McpCall,
    )
}


def action_to_dict(action: Action) -> dict[str, Any]:
    """The JSON form: {"type": kind, **fields} (tuples become lists)."""
    out: dict[str, Any] = {"type": action.kind}
    for f in dataclasses.fields(action):
        value = getattr(action, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def action_from_dict(data: Mapping[str, Any]) -> Action:
    """Build an action from its JSON form; raises ActionError naming what is wrong."""
    if not isinstance(data, Mapping):
        raise ActionError(f"an action must be an object, got {type(data).__name__}")
    kind = data.get("type")
    cls = ACTION_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ActionError(f"unknown action type {kind!r}; valid: {', '.join(sorted(ACTION_TYPES))}")
    names = {f.name for f in dataclasses.fields(cls)}
    extra = sorted(set(data) - names - {"type"})
    if extra:
        raise ActionError(f"{kind}: unknown field(s) {', '.join(extra)}")
    kwargs = {
        k: (tuple(v) if k == "keys" and isinstance(v, list) else v) for k, v in data.items() if k != "type"
    }
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ActionError(f"{kind}: {exc}") from None
