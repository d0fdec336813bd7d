"""Raw demonstration events and merge scripts for the recording tests."""

from __future__ import annotations

from collections.abc import Sequence

from agent_core import actions as A
from agent_core.data.recording import Commit, EventMerger, Execute, MergeOp, RawEvent


def down(t: float, x: int = 10, y: int = 10, button: str = "left") -> RawEvent:
    return RawEvent("down", t, x=x, y=y, button=button)


def up(t: float, x: int = 10, y: int = 10, button: str = "left") -> RawEvent:
    return RawEvent("up", t, x=x, y=y, button=button)


def move(t: float, x: int, y: int) -> RawEvent:
    return RawEvent("move", t, x=x, y=y)


def wheel(t: float, dy: int = 1, dx: int = 0, x: int = 100, y: int = 100) -> RawEvent:
    return RawEvent("wheel", t, x=x, y=y, dx=dx, dy=dy)


def key(t: float, name: str, text: str = "", *mods: str) -> RawEvent:
    return RawEvent("key", t, key=name, text=text, mods=tuple(mods))


def char(t: float, c: str) -> RawEvent:
    return key(t, c.lower(), c, *(("shift",) if c.isupper() else ()))


def button(t: float, name: str) -> RawEvent:
    return RawEvent("button", t, key=name)


TICK = "tick"
FLUSH = "flush"
Script = Sequence[RawEvent | tuple[str, float] | str]


def run(merger: EventMerger, script: Script) -> list[MergeOp]:
    """All ops of a script of events, ("tick", now) and "flush"."""
    ops: list[MergeOp] = []
    for item in script:
        if isinstance(item, RawEvent):
            ops += merger.feed(item)
        elif item == FLUSH:
            ops += merger.flush()
        else:
            assert isinstance(item, tuple)
            ops += merger.tick(item[1])
    return ops


def C(action: A.Action, started: float, ended: float, events: int) -> Commit:
    return Commit(action=action, started=started, ended=ended, events=events)


def X(action: A.Action) -> Execute:
    return Execute(action)
