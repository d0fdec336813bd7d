"""Merge a demonstrator's raw input events into structured actions: execute eagerly, record merged.

The browser sends raw events (pointer down/up/move, wheel notches, keys, phone buttons); the server
feeds them to an `EventMerger`, which answers with ops in order:

- `Start(t)`: a step begins; capture the screen now, before anything of this step is executed.
- `Execute(action)`: forward this action to the sandbox now, so the annotator sees its effect at once.
- `Commit(action, …)`: the step is complete; record it with the merged action.

The Execute ops of one step, replayed, have the effect of its committed action: clicks repeated
within `repeat_s` and `repeat_px` execute as two Clicks at the first click's point and commit as one
LeftDouble; wheel notches execute one Scroll each (at the point of the step's first notch) and commit
as one Scroll of their sum; a typing run executes a Type per character (and a Press("backspace") per
erased character) and commits the Type of the text left.

A Start that is followed by another Start without a Commit in between was abandoned: nothing of it
was executed (a press never released, a typing run erased back to nothing — the latter executed
characters and their backspaces, which cancel out). Rules worth knowing:

- Repeat clicks: the second up of a repeat commits the LeftDouble; a third click starts a new step
  (a triple click in the live sandbox is recorded as LeftDouble + Click).
- A left press held `long_press_s` or more without moving beyond `drag_px` is a LongPress of
  `long_press_s` seconds on "mobile", executed and committed by `tick` (or the next event) as soon
  as the time has passed, the later up ignored; elsewhere it is a plain Click at the up, with no
  repeat window after it.
- A middle press is a MiddleSingle at its down point when it comes up (moved or not: there is no
  middle drag), except on "mobile". Moves without a button held, lone modifier keys and Caps Lock
  produce nothing and leave the open step as it is.
- On "mobile" there is no right click and no LeftDouble: two quick taps are two Click steps (the
  phone executes each tap as it comes, too far apart for a double tap anyway). Phone buttons (kind
  "button") work only there and are ignored elsewhere.
- Any event that is not part of the open step commits it first: [Commit(prev), Start(new), Execute…].
  A second press inside the repeat window that turns out to be a drag (or is held too long) commits
  the click at its up and then starts its own step, with the t of its down; nothing was executed in
  between, so the screen captured then is still the one before it.
- A wheel event with both axes set scrolls along the larger one.
- Any other event while a button is held abandons that press (its up was lost): a repeat press
  commits the click step it belongs to, a fresh press records nothing.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_core import actions as A
from agent_core.actions.grammar import PLATFORMS

KINDS: tuple[str, ...] = ("down", "up", "move", "wheel", "key", "button")
BUTTONS: tuple[str, ...] = ("left", "right", "middle")
MODIFIERS: tuple[str, ...] = ("ctrl", "alt", "shift", "meta")  # also the canonical hotkey order
PHONE_BUTTONS: tuple[str, ...] = ("home", "back")
# Named keys the recorder sends, as the sandboxes' key tables spell them (pyautogui style).
NAMED_KEYS: frozenset[str] = frozenset(
    {
        "enter", "esc", "tab", "backspace", "delete", "insert", "space",
        "up", "down", "left", "right", "home", "end", "pageup", "pagedown",
        "capslock", "numlock", "scrolllock", "printscreen", "pause", "menu",
        *MODIFIERS,
        *(f"f{i}" for i in range(1, 25)),
    }
)  # fmt: skip
KEY_ALIASES: Mapping[str, str] = {
    "return": "enter", "escape": "esc", "del": "delete", "control": "ctrl", "option": "alt",
    "cmd": "meta", "command": "meta", "super": "meta", "win": "meta", "arrowup": "up",
    "arrowdown": "down", "arrowleft": "left", "arrowright": "right", "pgup": "pageup", "pgdn": "pagedown",
}  # fmt: skip
_SILENT_KEYS = frozenset({*MODIFIERS, "capslock"})  # keys that change what others type, not the screen
MAX_COORD = 100_000
MAX_NOTCHES = 100
MAX_TEXT = 16
MAX_T = 1e10


class RecordingError(ValueError):
    """A raw event is malformed; `reason` says which field and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _number(name: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordingError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise RecordingError(f"{name} must be in [{lo:g}, {hi:g}], got {value!r}")
    return value


def _printable(text: str) -> bool:
    # Control, format, unassigned and surrogate characters, and line breaks, are never typed text.
    return not any(unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp") for c in text)


def _key_name(value: str) -> str:
    """The canonical name of a key: one character as is, else a NAMED_KEYS name (aliases folded)."""
    if len(value) == 1:
        if not _printable(value):
            raise RecordingError("a one-character key must be printable (use 'enter', 'tab', …)")
        return value
    name = KEY_ALIASES.get(value.lower(), value.lower())
    if name not in NAMED_KEYS:
        raise RecordingError(f"unknown key {value[:32]!r}")
    return name


@dataclass(frozen=True)
class RawEvent:
    """One input event from the demonstrator's browser, in screen pixels; validated on creation."""

    kind: str
    t: float
    x: int = 0
    y: int = 0
    button: str = "left"
    key: str = ""
    text: str = ""
    mods: tuple[str, ...] = ()
    dx: int = 0
    dy: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise RecordingError(f"unknown event kind {str(self.kind)[:32]!r}; valid: {', '.join(KINDS)}")
        _number("t", self.t, 0, MAX_T)
        for name, bound in (("x", MAX_COORD), ("y", MAX_COORD), ("dx", MAX_NOTCHES), ("dy", MAX_NOTCHES)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise RecordingError(f"{name} must be an integer, got {type(value).__name__}")
            _number(name, value, 0 if name in ("x", "y") else -bound, bound)
        if self.button not in BUTTONS:
            raise RecordingError(f"button must be one of {', '.join(BUTTONS)}")
        if not isinstance(self.text, str) or len(self.text) > MAX_TEXT or not _printable(self.text):
            raise RecordingError(f"text must be at most {MAX_TEXT} printable characters")
        if (
            not isinstance(self.mods, tuple)
            or len(set(self.mods)) != len(self.mods)
            or not all(m in MODIFIERS for m in self.mods)
        ):
            raise RecordingError(f"mods must be distinct names among {', '.join(MODIFIERS)}")
        if not isinstance(self.key, str) or len(self.key) > 32:
            raise RecordingError("key must be a string of at most 32 characters")
        if self.kind == "key" and _key_name(self.key) != self.key:
            raise RecordingError(f"key {self.key!r} must be written {_key_name(self.key)!r}")
        if self.kind == "button" and self.key not in PHONE_BUTTONS:
            raise RecordingError(f"a button event's key must be one of {', '.join(PHONE_BUTTONS)}")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RawEvent:
        """Build an event from its JSON form: coordinates rounded, mods ordered, key aliases folded."""
        if not isinstance(d, Mapping):
            raise RecordingError(f"an event must be an object, got {type(d).__name__}")
        extra = sorted(str(k)[:32] for k in d if k not in _FIELDS)
        if extra:
            raise RecordingError(f"unknown field(s) {', '.join(extra[:5])}")
        if "kind" not in d or "t" not in d:
            raise RecordingError("an event needs kind and t")
        kw: dict[str, Any] = dict(d)
        kw["t"] = float(_number("t", d["t"], 0, MAX_T))
        for name, lo, hi in (("x", 0, MAX_COORD), ("y", 0, MAX_COORD), ("dx", -MAX_NOTCHES, MAX_NOTCHES)):
            if name in d:
                kw[name] = round(_number(name, d[name], lo, hi))
        if "dy" in d:
            kw["dy"] = round(_number("dy", d["dy"], -MAX_NOTCHES, MAX_NOTCHES))
        mods = d.get("mods", ())
        if not isinstance(mods, list | tuple) or not all(isinstance(m, str) and m in MODIFIERS for m in mods):
            raise RecordingError(f"mods must be a list of names among {', '.join(MODIFIERS)}")
        kw["mods"] = tuple(m for m in MODIFIERS if m in mods)
        if d.get("kind") == "key" and isinstance(d.get("key"), str) and len(d["key"]) <= 32:
            kw["key"] = _key_name(d["key"])
        return cls(**kw)


_FIELDS = frozenset({"kind", "t", "x", "y", "button", "key", "text", "mods", "dx", "dy"})


@dataclass(frozen=True)
class Start:
    """A new step begins: capture the screen now, before any Execute of this step."""

    t: float


@dataclass(frozen=True)
class Execute:
    """Forward this action to the sandbox now."""

    action: A.Action


@dataclass(frozen=True)
class Commit:
    """The step is complete: record it with the merged action, its time span and raw event count."""

    action: A.Action
    started: float
    ended: float
    events: int


MergeOp = Start | Execute | Commit


@dataclass
class _Press:
    """A button held down: where and when it went down, its events so far, whether it moved far."""

    button: str
    x: int
    y: int
    t: float
    repeat: bool = False  # the second press of a possible double click
    moved: bool = False
    events: int = 1


@dataclass
class _Step:
    """The open step: "pointer" (a press, or a click waiting for its repeat), "scroll" or "type"."""

    kind: str
    started: float
    last: float  # time of the step's last completed event (its window counts from it)
    events: int = 0
    action: A.Action | None = None  # what a Commit would record now; None: nothing executed yet
    press: _Press | None = None
    x: int = 0  # the click's or the scroll's point
    y: int = 0
    text: str = ""  # a typing run's text so far


class EventMerger:
    """Turns one demonstrator's raw events into Start / Execute / Commit ops (see the module doc)."""

    def __init__(
        self,
        *,
        platform: str = "desktop",
        repeat_s: float = 0.5,
        repeat_px: int = 4,
        drag_px: int = 6,
        long_press_s: float = 1.0,
        scroll_gap_s: float = 0.5,
        typing_gap_s: float = 1.5,
        screen: tuple[int, int] | None = None,
    ) -> None:
        if platform not in PLATFORMS:
            raise ValueError(f"unknown platform {platform!r}; valid: {', '.join(PLATFORMS)}")
        if screen is not None and (screen[0] < 1 or screen[1] < 1):
            raise ValueError(f"screen must be a positive size, got {screen}")
        self.platform = platform
        self.repeat_s, self.repeat_px, self.drag_px = repeat_s, repeat_px, drag_px
        self.long_press_s, self.scroll_gap_s, self.typing_gap_s = long_press_s, scroll_gap_s, typing_gap_s
        self.screen = screen
        self._mobile = platform == "mobile"
        self._step: _Step | None = None
        self._t = 0.0

    @property
    def open(self) -> bool:
        """Whether a step is in progress."""
        return self._step is not None

    def feed(self, ev: RawEvent) -> list[MergeOp]:
        """The ops one event causes (an event earlier than the last one counts as at the last one's t)."""
        t = self._t = max(ev.t, self._t)
        ops = self.tick(t)
        x, y = self._clamp(ev.x, ev.y)
        if ev.kind == "down":
            self._down(ops, ev.button, x, y, t)
        elif ev.kind == "up":
            self._up(ops, ev.button, x, y, t)
        elif ev.kind == "move":
            self._move(x, y)
        elif ev.kind == "wheel":
            self._wheel(ops, ev, x, y, t)
        elif ev.kind == "key":
            self._key(ops, ev, t)
        elif self._mobile:  # a phone button
            self._close(ops)
            self._single(ops, A.PressHome() if ev.key == "home" else A.PressBack(), t)
        return ops

    def tick(self, now: float) -> list[MergeOp]:
        """Commit the open step if its window has passed at `now` (the events' clock)."""
        ops: list[MergeOp] = []
        s = self._step
        if s is None:
            return ops
        p = s.press
        if p is not None:
            if self._mobile and p.button == "left" and not p.moved and now - p.t >= self.long_press_s:
                s.events += p.events
                s.press = None
                self._execute(ops, s, A.LongPress(x=p.x, y=p.y, seconds=self.long_press_s))
                self._commit(ops, max(now, s.last))
        elif now - s.last > self._window(s.kind):
            self._close(ops)
        return ops

    def flush(self) -> list[MergeOp]:
        """Commit whatever is open (submit, pause, disconnect); a press never released records nothing."""
        ops: list[MergeOp] = []
        self._close(ops)
        return ops

    # --- pointer ---

    def _down(self, ops: list[MergeOp], button: str, x: int, y: int, t: float) -> None:
        if button != "left" and self._mobile:
            return  # no such action (a right or middle click on a phone)
        s = self._step
        if (
            s is not None
            and s.kind == "pointer"
            and s.press is None
            and button == "left"
            and t - s.last <= self.repeat_s
            and _dist(x, y, s.x, s.y) <= self.repeat_px
        ):
            s.press = _Press(button, x, y, t, repeat=True)
            return
        self._close(ops)
        self._begin(ops, "pointer", t).press = _Press(button, x, y, t)

    def _move(self, x: int, y: int) -> None:
        p = self._step.press if self._step is not None else None
        if p is not None:
            p.events += 1
            p.moved = p.moved or _dist(x, y, p.x, p.y) > self.drag_px

    def _up(self, ops: list[MergeOp], button: str, x: int, y: int, t: float) -> None:
        s = self._step
        if s is None or s.press is None or s.press.button != button:
            return  # an up without its down (ignored, abandoned, or already a long press)
        p, s.press = s.press, None
        p.events += 1
        moved = p.moved or _dist(x, y, p.x, p.y) > self.drag_px
        held = t - p.t >= self.long_press_s
        if p.repeat:
            if not moved and not held:
                s.events += p.events
                self._execute(ops, s, A.Click(x=s.x, y=s.y))
                s.action = A.LeftDouble(x=s.x, y=s.y)
                self._commit(ops, t)
                return
            self._commit(ops, s.last)  # no repeat after all: the click stands, this press is a new step
            s = self._begin(ops, "pointer", p.t)
        s.events += p.events
        s.last = t
        if p.button == "right":
            self._execute(ops, s, A.RightSingle(x=p.x, y=p.y))
        elif p.button == "middle":
            self._execute(ops, s, A.MiddleSingle(x=p.x, y=p.y))
        elif moved:
            self._execute(ops, s, A.Drag(x1=p.x, y1=p.y, x2=x, y2=y))
        else:
            self._execute(ops, s, A.Click(x=p.x, y=p.y))
            # (A held press on a phone never gets here: `tick` made it a LongPress already.)
            if not held and not self._mobile:
                s.x, s.y = p.x, p.y  # wait repeat_s for a second click here
                return
        self._commit(ops, t)

    # --- wheel ---

    def _wheel(self, ops: list[MergeOp], ev: RawEvent, x: int, y: int, t: float) -> None:
        if abs(ev.dy) >= abs(ev.dx):
            direction, amount = ("down" if ev.dy > 0 else "up"), abs(ev.dy)
        else:
            direction, amount = ("right" if ev.dx > 0 else "left"), abs(ev.dx)
        if amount == 0:
            return
        s = self._step
        if (
            s is not None
            and isinstance(s.action, A.Scroll)
            and s.action.direction == direction
            and _dist(x, y, s.x, s.y) <= self.repeat_px
        ):
            total = s.action.amount + amount
        else:
            self._close(ops)
            s = self._begin(ops, "scroll", t)
            s.x, s.y, total = x, y, amount
        s.events += 1
        s.last = t
        # Each notch runs at the step's first point, so that the merged Scroll replays the same.
        self._execute(ops, s, A.Scroll(x=s.x, y=s.y, direction=direction, amount=amount))
        s.action = A.Scroll(x=s.x, y=s.y, direction=direction, amount=total)

    # --- keys ---

    def _key(self, ops: list[MergeOp], ev: RawEvent, t: float) -> None:
        key = ev.key
        if key in _SILENT_KEYS:
            return
        mods = tuple(m for m in MODIFIERS if m in ev.mods)
        s = self._step
        run = s if s is not None and s.kind == "type" else None
        if set(mods) - {"shift"}:
            self._close(ops)
            self._single(ops, A.Hotkey(keys=(*mods, key.lower())), t)
        elif ev.text and key != "enter":
            self._type(ops, run, ev.text, t)
        elif key == "enter" and not mods and run is not None:
            self._type(ops, run, "\n", t)
            self._close(ops)
        elif key == "backspace" and not mods and run is not None and run.text:
            run.events += 1
            run.last = t
            run.text = run.text[:-1]  # the merged Type then leaves what the executed keys left
            ops.append(Execute(A.Press(key="backspace")))
        else:
            self._close(ops)
            self._single(ops, A.Hotkey(keys=("shift", key)) if mods else A.Press(key=key), t)

    def _type(self, ops: list[MergeOp], run: _Step | None, text: str, t: float) -> None:
        if run is None:
            self._close(ops)
            run = self._begin(ops, "type", t)
        run.events += 1
        run.last = t
        run.text += text
        ops.append(Execute(A.Type(content=text)))

    # --- steps ---

    def _begin(self, ops: list[MergeOp], kind: str, t: float) -> _Step:
        self._step = _Step(kind=kind, started=t, last=t)
        ops.append(Start(t))
        return self._step

    def _execute(self, ops: list[MergeOp], s: _Step, action: A.Action) -> None:
        ops.append(Execute(action))
        s.action = action

    def _single(self, ops: list[MergeOp], action: A.Action, t: float) -> None:
        s = self._begin(ops, "single", t)
        s.events = 1
        self._execute(ops, s, action)
        self._commit(ops, t)

    def _commit(self, ops: list[MergeOp], ended: float) -> None:
        s, self._step = self._step, None
        assert s is not None and s.action is not None
        ops.append(Commit(action=s.action, started=s.started, ended=max(ended, s.started), events=s.events))

    def _close(self, ops: list[MergeOp]) -> None:
        """Commit the open step if it executed anything (a held press is abandoned), else drop it."""
        s = self._step
        if s is None:
            return
        s.press = None
        if s.kind == "type":
            s.action = A.Type(content=s.text) if s.text else None
        if s.action is None:
            self._step = None
        else:
            self._commit(ops, s.last)

    def _window(self, kind: str) -> float:
        """How long a step of this kind stays open after its last event."""
        return {"pointer": self.repeat_s, "scroll": self.scroll_gap_s}.get(kind, self.typing_gap_s)

    def _clamp(self, x: int, y: int) -> tuple[int, int]:
        if self.screen is None:
            return x, y
        return min(max(x, 0), self.screen[0] - 1), min(max(y, 0), self.screen[1] - 1)


def _dist(x1: int, y1: int, x2: int, y2: int) -> float:
    return math.hypot(x1 - x2, y1 - y2)
