"""Merging a demonstrator's raw events into actions: execute eagerly, record merged."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core import actions as A
from agent_core.recording import (
    Commit,
    EventMerger,
    Execute,
    MergeOp,
    RawEvent,
    RecordingError,
    Start,
)


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


CLICK = A.Click(x=10, y=10)

# (name, platform, script, expected ops)
CASES: list[tuple[str, str, Script, list[MergeOp]]] = [
    # --- clicks ---
    (
        "click executes at once, commits after the repeat window",
        "desktop",
        [down(0), up(0.1), (TICK, 0.6), (TICK, 0.61)],
        [Start(0), X(CLICK), C(CLICK, 0, 0.1, 2)],
    ),
    (
        "repeat within 0.5 s and 4 px is a double click",
        "desktop",
        [down(0), up(0.1), down(0.3, 12, 12), up(0.35, 12, 12)],
        [Start(0), X(CLICK), X(CLICK), C(A.LeftDouble(x=10, y=10), 0, 0.35, 4)],
    ),
    (
        "repeat window is inclusive",
        "desktop",
        [down(0), up(0.1), down(0.6), up(0.65)],
        [Start(0), X(CLICK), X(CLICK), C(A.LeftDouble(x=10, y=10), 0, 0.65, 4)],
    ),
    (
        "a third click starts a new step",
        "desktop",
        [down(0), up(0.1), down(0.2), up(0.3), down(0.4), up(0.5), FLUSH],
        [
            Start(0),
            X(CLICK),
            X(CLICK),
            C(A.LeftDouble(x=10, y=10), 0, 0.3, 4),
            Start(0.4),
            X(CLICK),
            C(CLICK, 0.4, 0.5, 2),
        ],
    ),
    (
        "second click too far away is its own step",
        "desktop",
        [down(0), up(0.1), down(0.3, 15, 10), up(0.35, 15, 10), FLUSH],
        [
            Start(0),
            X(CLICK),
            C(CLICK, 0, 0.1, 2),
            Start(0.3),
            X(A.Click(x=15, y=10)),
            C(A.Click(x=15, y=10), 0.3, 0.35, 2),
        ],
    ),
    (
        "second click too late is its own step",
        "desktop",
        [down(0), up(0.1), down(0.7), up(0.75), FLUSH],
        [Start(0), X(CLICK), C(CLICK, 0, 0.1, 2), Start(0.7), X(CLICK), C(CLICK, 0.7, 0.75, 2)],
    ),
    (
        "a second press that drags commits the click, then records the drag from its down",
        "desktop",
        [down(0), up(0.1), down(0.3), move(0.35, 30, 30), up(0.4, 30, 30)],
        [
            Start(0),
            X(CLICK),
            C(CLICK, 0, 0.1, 2),
            Start(0.3),
            X(A.Drag(x1=10, y1=10, x2=30, y2=30)),
            C(A.Drag(x1=10, y1=10, x2=30, y2=30), 0.3, 0.4, 3),
        ],
    ),
    (
        "moves within drag_px keep a click",
        "desktop",
        [down(0), move(0.05, 14, 14), up(0.1, 14, 14), FLUSH],
        [Start(0), X(CLICK), C(CLICK, 0, 0.1, 3)],
    ),
    (
        "drag beyond 6 px",
        "desktop",
        [down(0), move(0.1, 50, 50), move(0.15, 80, 90), up(0.2, 100, 100)],
        [
            Start(0),
            X(A.Drag(x1=10, y1=10, x2=100, y2=100)),
            C(A.Drag(x1=10, y1=10, x2=100, y2=100), 0, 0.2, 4),
        ],
    ),
    (
        "the up point alone can make a drag",
        "desktop",
        [down(0), up(0.1, 17, 10)],
        [Start(0), X(A.Drag(x1=10, y1=10, x2=17, y2=10)), C(A.Drag(x1=10, y1=10, x2=17, y2=10), 0, 0.1, 2)],
    ),
    (
        "moving away and back is still a drag",
        "desktop",
        [down(0), move(0.1, 40, 10), up(0.2, 11, 10)],
        [Start(0), X(A.Drag(x1=10, y1=10, x2=11, y2=10)), C(A.Drag(x1=10, y1=10, x2=11, y2=10), 0, 0.2, 3)],
    ),
    (
        "right click",
        "desktop",
        [down(0, button="right"), up(0.1, 40, 40, button="right")],
        [Start(0), X(A.RightSingle(x=10, y=10)), C(A.RightSingle(x=10, y=10), 0, 0.1, 2)],
    ),
    (
        "middle button does nothing and leaves the open step",
        "desktop",
        [char(0, "a"), down(0.1, button="middle"), up(0.2, button="middle"), char(0.3, "b"), FLUSH],
        [Start(0), X(A.Type(content="a")), X(A.Type(content="b")), C(A.Type(content="ab"), 0, 0.3, 2)],
    ),
    (
        "long press on desktop is a click with no repeat window",
        "desktop",
        [down(0), up(1.2), down(1.3), up(1.35), FLUSH],
        [Start(0), X(CLICK), C(CLICK, 0, 1.2, 2), Start(1.3), X(CLICK), C(CLICK, 1.3, 1.35, 2)],
    ),
    (
        "long press on a phone fires at the tick, its up is ignored",
        "mobile",
        [down(0), (TICK, 0.5), (TICK, 1.0), up(1.5), FLUSH],
        [
            Start(0),
            X(A.LongPress(x=10, y=10, seconds=1.0)),
            C(A.LongPress(x=10, y=10, seconds=1.0), 0, 1.0, 1),
        ],
    ),
    (
        "long press on a phone without ticks fires at the next event",
        "mobile",
        [down(0), up(1.5), FLUSH],
        [
            Start(0),
            X(A.LongPress(x=10, y=10, seconds=1.0)),
            C(A.LongPress(x=10, y=10, seconds=1.0), 0, 1.5, 1),
        ],
    ),
    (
        "a held press that moved is a drag, not a long press",
        "mobile",
        [down(0), move(0.2, 10, 200), (TICK, 2.0), up(2.1, 10, 300)],
        [Start(0), X(A.Drag(x1=10, y1=10, x2=10, y2=300)), C(A.Drag(x1=10, y1=10, x2=10, y2=300), 0, 2.1, 3)],
    ),
    (
        "two quick taps on a phone are two click steps",
        "mobile",
        [down(0), up(0.1), down(0.2), up(0.3)],
        [Start(0), X(CLICK), C(CLICK, 0, 0.1, 2), Start(0.2), X(CLICK), C(CLICK, 0.2, 0.3, 2)],
    ),
    ("no right click on a phone", "mobile", [down(0, button="right"), up(0.1, button="right"), FLUSH], []),
    (
        "moves without a button are ignored and keep a typing run open",
        "desktop",
        [char(0, "a"), move(0.1, 50, 50), move(0.2, 60, 60), char(0.3, "b"), FLUSH],
        [Start(0), X(A.Type(content="a")), X(A.Type(content="b")), C(A.Type(content="ab"), 0, 0.3, 2)],
    ),
    ("an up without its down does nothing", "desktop", [up(0), FLUSH], []),
    (
        "an up of another button does not end the press",
        "desktop",
        [down(0), up(0.1, button="right"), up(0.2), FLUSH],
        [Start(0), X(CLICK), C(CLICK, 0, 0.2, 2)],
    ),
    ("a press never released records nothing", "desktop", [down(0), move(0.1, 50, 50), FLUSH], [Start(0)]),
    (
        "a new press abandons a press whose up was lost",
        "desktop",
        [down(0), down(0.5, 30, 30), up(0.6, 30, 30), FLUSH],
        [Start(0), Start(0.5), X(A.Click(x=30, y=30)), C(A.Click(x=30, y=30), 0.5, 0.6, 2)],
    ),
    # --- wheel ---
    (
        "wheel notches in one direction merge into one scroll",
        "desktop",
        [wheel(0, 1), wheel(0.2, 2, x=101), wheel(0.4, 1), (TICK, 0.9), (TICK, 0.91)],
        [
            Start(0),
            X(A.Scroll(x=100, y=100, direction="down", amount=1)),
            X(A.Scroll(x=100, y=100, direction="down", amount=2)),
            X(A.Scroll(x=100, y=100, direction="down", amount=1)),
            C(A.Scroll(x=100, y=100, direction="down", amount=4), 0, 0.4, 3),
        ],
    ),
    (
        "changing direction starts a new scroll",
        "desktop",
        [wheel(0, 1), wheel(0.1, -2), FLUSH],
        [
            Start(0),
            X(A.Scroll(x=100, y=100, direction="down", amount=1)),
            C(A.Scroll(x=100, y=100, direction="down", amount=1), 0, 0, 1),
            Start(0.1),
            X(A.Scroll(x=100, y=100, direction="up", amount=2)),
            C(A.Scroll(x=100, y=100, direction="up", amount=2), 0.1, 0.1, 1),
        ],
    ),
    (
        "a pause longer than scroll_gap_s starts a new scroll",
        "desktop",
        [wheel(0, 1), wheel(0.6, 1)],
        [
            Start(0),
            X(A.Scroll(x=100, y=100, direction="down", amount=1)),
            C(A.Scroll(x=100, y=100, direction="down", amount=1), 0, 0, 1),
            Start(0.6),
            X(A.Scroll(x=100, y=100, direction="down", amount=1)),
        ],
    ),
    (
        "moving the pointer beyond repeat_px starts a new scroll",
        "desktop",
        [wheel(0, 1), wheel(0.1, 1, x=110)],
        [
            Start(0),
            X(A.Scroll(x=100, y=100, direction="down", amount=1)),
            C(A.Scroll(x=100, y=100, direction="down", amount=1), 0, 0, 1),
            Start(0.1),
            X(A.Scroll(x=110, y=100, direction="down", amount=1)),
        ],
    ),
    (
        "horizontal notches scroll right and left; the larger axis wins",
        "desktop",
        [wheel(0, 0, 2), wheel(0.1, 1, -3), wheel(0.2, 0, 0), FLUSH],
        [
            Start(0),
            X(A.Scroll(x=100, y=100, direction="right", amount=2)),
            C(A.Scroll(x=100, y=100, direction="right", amount=2), 0, 0, 1),
            Start(0.1),
            X(A.Scroll(x=100, y=100, direction="left", amount=3)),
            C(A.Scroll(x=100, y=100, direction="left", amount=3), 0.1, 0.1, 1),
        ],
    ),
    (
        "a click commits an open scroll first",
        "desktop",
        [wheel(0, 1), down(0.1), up(0.2), FLUSH],
        [
            Start(0),
            X(A.Scroll(x=100, y=100, direction="down", amount=1)),
            C(A.Scroll(x=100, y=100, direction="down", amount=1), 0, 0, 1),
            Start(0.1),
            X(CLICK),
            C(CLICK, 0.1, 0.2, 2),
        ],
    ),
    # --- typing ---
    (
        "typing Hi then Enter is one Type that submits",
        "desktop",
        [char(0, "H"), char(0.1, "i"), key(0.2, "enter")],
        [
            Start(0),
            X(A.Type(content="H")),
            X(A.Type(content="i")),
            X(A.Type(content="\n")),
            C(A.Type(content="Hi\n"), 0, 0.2, 3),
        ],
    ),
    (
        "a run ends after typing_gap_s",
        "desktop",
        [char(0, "a"), (TICK, 1.5), (TICK, 1.51)],
        [Start(0), X(A.Type(content="a")), C(A.Type(content="a"), 0, 0, 1)],
    ),
    (
        "a gap between keys starts a new run",
        "desktop",
        [char(0, "a"), char(2, "b"), FLUSH],
        [
            Start(0),
            X(A.Type(content="a")),
            C(A.Type(content="a"), 0, 0, 1),
            Start(2),
            X(A.Type(content="b")),
            C(A.Type(content="b"), 2, 2, 1),
        ],
    ),
    (
        "backspace inside a run edits the run",
        "desktop",
        [char(0, "a"), char(0.1, "b"), key(0.2, "backspace"), char(0.3, "c"), FLUSH],
        [
            Start(0),
            X(A.Type(content="a")),
            X(A.Type(content="b")),
            X(A.Press(key="backspace")),
            X(A.Type(content="c")),
            C(A.Type(content="ac"), 0, 0.3, 4),
        ],
    ),
    (
        "a run erased back to nothing records nothing",
        "desktop",
        [char(0, "a"), key(0.1, "backspace"), FLUSH],
        [Start(0), X(A.Type(content="a")), X(A.Press(key="backspace"))],
    ),
    (
        "backspace without a run is its own press",
        "desktop",
        [key(0, "backspace")],
        [Start(0), X(A.Press(key="backspace")), C(A.Press(key="backspace"), 0, 0, 1)],
    ),
    (
        "space types a space",
        "desktop",
        [char(0, "a"), key(0.1, "space", " "), FLUSH],
        [Start(0), X(A.Type(content="a")), X(A.Type(content=" ")), C(A.Type(content="a "), 0, 0.1, 2)],
    ),
    (
        "enter without a run is a press",
        "desktop",
        [key(0, "enter")],
        [Start(0), X(A.Press(key="enter")), C(A.Press(key="enter"), 0, 0, 1)],
    ),
    (
        "shift+enter ends the run and is a hotkey",
        "desktop",
        [char(0, "a"), key(0.1, "enter", "", "shift")],
        [
            Start(0),
            X(A.Type(content="a")),
            C(A.Type(content="a"), 0, 0, 1),
            Start(0.1),
            X(A.Hotkey(keys=("shift", "enter"))),
            C(A.Hotkey(keys=("shift", "enter")), 0.1, 0.1, 1),
        ],
    ),
    # --- hotkeys and presses ---
    (
        "ctrl+a is a hotkey",
        "desktop",
        [key(0, "a", "a", "ctrl")],
        [Start(0), X(A.Hotkey(keys=("ctrl", "a"))), C(A.Hotkey(keys=("ctrl", "a")), 0, 0, 1)],
    ),
    (
        "modifiers come in canonical order and the key in lower case",
        "desktop",
        [key(0, "T", "T", "shift", "ctrl")],
        [
            Start(0),
            X(A.Hotkey(keys=("ctrl", "shift", "t"))),
            C(A.Hotkey(keys=("ctrl", "shift", "t")), 0, 0, 1),
        ],
    ),
    (
        "alt+f4 and meta+left",
        "desktop",
        [key(0, "f4", "", "alt"), key(0.1, "left", "", "meta")],
        [
            Start(0),
            X(A.Hotkey(keys=("alt", "f4"))),
            C(A.Hotkey(keys=("alt", "f4")), 0, 0, 1),
            Start(0.1),
            X(A.Hotkey(keys=("meta", "left"))),
            C(A.Hotkey(keys=("meta", "left")), 0.1, 0.1, 1),
        ],
    ),
    (
        "a hotkey commits the open run first",
        "desktop",
        [char(0, "a"), key(0.1, "c", "c", "ctrl")],
        [
            Start(0),
            X(A.Type(content="a")),
            C(A.Type(content="a"), 0, 0, 1),
            Start(0.1),
            X(A.Hotkey(keys=("ctrl", "c"))),
            C(A.Hotkey(keys=("ctrl", "c")), 0.1, 0.1, 1),
        ],
    ),
    *[
        (
            f"{name} is a press",
            "desktop",
            [key(0, name)],
            [Start(0), X(A.Press(key=name)), C(A.Press(key=name), 0, 0, 1)],
        )
        for name in ("esc", "tab", "f5", "delete", "home", "pageup", "left")
    ],
    (
        "shift+tab is a hotkey",
        "desktop",
        [key(0, "tab", "", "shift")],
        [Start(0), X(A.Hotkey(keys=("shift", "tab"))), C(A.Hotkey(keys=("shift", "tab")), 0, 0, 1)],
    ),
    (
        "lone modifiers and caps lock produce nothing and keep the run",
        "desktop",
        [
            char(0, "a"),
            key(0.1, "shift", "", "shift"),
            key(0.2, "ctrl", "", "ctrl"),
            key(0.3, "capslock"),
            char(0.4, "B"),
            FLUSH,
        ],
        [Start(0), X(A.Type(content="a")), X(A.Type(content="B")), C(A.Type(content="aB"), 0, 0.4, 2)],
    ),
    # --- phone buttons ---
    (
        "home and back are steps on a phone",
        "mobile",
        [button(0, "home"), button(0.1, "back")],
        [
            Start(0),
            X(A.PressHome()),
            C(A.PressHome(), 0, 0, 1),
            Start(0.1),
            X(A.PressBack()),
            C(A.PressBack(), 0.1, 0.1, 1),
        ],
    ),
    ("phone buttons are ignored on a desktop", "desktop", [button(0, "home"), FLUSH], []),
    # --- other kinds commit the open step ---
    (
        "a key commits a click waiting for its repeat",
        "desktop",
        [down(0), up(0.1), char(0.2, "x"), FLUSH],
        [
            Start(0),
            X(CLICK),
            C(CLICK, 0, 0.1, 2),
            Start(0.2),
            X(A.Type(content="x")),
            C(A.Type(content="x"), 0.2, 0.2, 1),
        ],
    ),
    (
        "a key abandons a held press",
        "desktop",
        [down(0), char(0.2, "x"), up(0.3), FLUSH],
        [Start(0), Start(0.2), X(A.Type(content="x")), C(A.Type(content="x"), 0.2, 0.2, 1)],
    ),
    (
        "a key during the second press commits the first click",
        "desktop",
        [down(0), up(0.1), down(0.2), char(0.3, "x"), FLUSH],
        [
            Start(0),
            X(CLICK),
            C(CLICK, 0, 0.1, 2),
            Start(0.3),
            X(A.Type(content="x")),
            C(A.Type(content="x"), 0.3, 0.3, 1),
        ],
    ),
    (
        "a click commits an open typing run",
        "desktop",
        [char(0, "a"), down(0.1), up(0.2), FLUSH],
        [
            Start(0),
            X(A.Type(content="a")),
            C(A.Type(content="a"), 0, 0, 1),
            Start(0.1),
            X(CLICK),
            C(CLICK, 0.1, 0.2, 2),
        ],
    ),
    # --- time ---
    (
        "an event earlier than the last counts as at the last t",
        "desktop",
        [down(5), up(3), FLUSH],
        [Start(5), X(CLICK), C(CLICK, 5, 5, 2)],
    ),
]


@pytest.mark.parametrize(
    ("platform", "script", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_merge_rules(platform: str, script: Script, expected: list[MergeOp]) -> None:
    merger = EventMerger(platform=platform)
    assert run(merger, script) == expected
    assert not merger.open or FLUSH not in script


def test_coordinates_are_clamped_into_the_screen() -> None:
    merger = EventMerger(screen=(100, 50))
    ops = run(merger, [down(0, 500, 700), up(0.1, 500, 700), wheel(1, 1, x=300, y=20), FLUSH])
    assert ops[1] == X(A.Click(x=99, y=49))
    assert ops[4] == X(A.Scroll(x=99, y=20, direction="down", amount=1))


def test_open_follows_the_step() -> None:
    merger = EventMerger()
    assert not merger.open
    merger.feed(down(0))
    assert merger.open
    merger.feed(up(0.1))
    assert merger.open  # waiting for a repeat
    merger.tick(1.0)
    assert not merger.open


def test_unknown_platform_is_refused() -> None:
    with pytest.raises(ValueError, match="platform"):
        EventMerger(platform="toaster")


# --- RawEvent.from_json ---


def test_from_json_normalises() -> None:
    ev = RawEvent.from_json(
        {"kind": "key", "t": 1, "key": "Escape", "text": "", "mods": ["shift", "ctrl", "shift"]}
    )
    assert ev == RawEvent("key", 1.0, key="esc", mods=("ctrl", "shift"))
    assert RawEvent.from_json({"kind": "down", "t": 0.5, "x": 10.4, "y": 3.6}) == down(0.5, 10, 4)
    assert RawEvent.from_json({"kind": "key", "t": 0, "key": "ArrowLeft"}).key == "left"
    assert RawEvent.from_json({"kind": "wheel", "t": 0, "x": 1, "y": 2, "dy": -2.0}).dy == -2


BAD: list[tuple[str, Any]] = [
    ("not an object", ["down", 0]),
    ("unknown kind", {"kind": "teleport", "t": 0}),
    ("missing t", {"kind": "down"}),
    ("missing kind", {"t": 0}),
    ("t is text", {"kind": "down", "t": "0"}),
    ("t is NaN", {"kind": "down", "t": math.nan}),
    ("t is infinite", {"kind": "down", "t": math.inf}),
    ("t negative", {"kind": "down", "t": -1}),
    ("t is a boolean", {"kind": "down", "t": True}),
    ("x is text", {"kind": "down", "t": 0, "x": "10"}),
    ("x negative", {"kind": "down", "t": 0, "x": -1}),
    ("x huge", {"kind": "down", "t": 0, "x": 1e12}),
    ("y is null", {"kind": "down", "t": 0, "y": None}),
    ("y is a boolean", {"kind": "down", "t": 0, "y": False}),
    ("unknown button", {"kind": "down", "t": 0, "button": "fourth"}),
    ("unknown key", {"kind": "key", "t": 0, "key": "hyperjump"}),
    ("empty key", {"kind": "key", "t": 0, "key": ""}),
    ("key is a control character", {"kind": "key", "t": 0, "key": "\n"}),
    ("huge key", {"kind": "key", "t": 0, "key": "x" * 10_000}),
    ("key is a number", {"kind": "key", "t": 0, "key": 65}),
    ("huge text", {"kind": "key", "t": 0, "key": "a", "text": "a" * 10_000}),
    ("text with a newline", {"kind": "key", "t": 0, "key": "a", "text": "\n"}),
    ("text with a lone surrogate", {"kind": "key", "t": 0, "key": "a", "text": "\ud800"}),
    ("text is a list", {"kind": "key", "t": 0, "key": "a", "text": ["a"]}),
    ("mods is a string", {"kind": "key", "t": 0, "key": "a", "mods": "ctrl"}),
    ("unknown mod", {"kind": "key", "t": 0, "key": "a", "mods": ["hyper"]}),
    ("mods hold a number", {"kind": "key", "t": 0, "key": "a", "mods": [1]}),
    ("unknown field", {"kind": "down", "t": 0, "pressure": 0.5}),
    ("unknown phone button", {"kind": "button", "t": 0, "key": "recents"}),
    ("too many notches", {"kind": "wheel", "t": 0, "dy": 1000}),
    ("notches are text", {"kind": "wheel", "t": 0, "dx": "1"}),
]


@pytest.mark.parametrize("data", [b[1] for b in BAD], ids=[b[0] for b in BAD])
def test_from_json_rejects_bad_input(data: Any) -> None:
    with pytest.raises(RecordingError) as info:
        RawEvent.from_json(data)
    assert info.value.reason


def test_direct_construction_validates_too() -> None:
    with pytest.raises(RecordingError):
        RawEvent("down", 0, x=1.5)  # type: ignore[arg-type]
    with pytest.raises(RecordingError):
        RawEvent("key", 0, key="Escape")  # not the canonical name
    with pytest.raises(RecordingError):
        RawEvent("key", 0, key="a", mods=("ctrl", "ctrl"))


# --- fuzzing ---

SCREEN = (800, 600)
KEYS = [
    "a",
    "b",
    "A",
    "1",
    "space",
    "enter",
    "backspace",
    "esc",
    "tab",
    "f5",
    "left",
    "shift",
    "ctrl",
    "capslock",
]


@st.composite
def streams(draw: st.DrawFn) -> list[RawEvent | tuple[str, float] | str]:
    out: list[RawEvent | tuple[str, float] | str] = []
    t = 0.0
    for _ in range(draw(st.integers(0, 40))):
        t = max(0.0, t + draw(st.sampled_from([-0.2, 0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 1.2, 2.0])))
        what = draw(st.sampled_from(["down", "up", "move", "wheel", "key", "button", "tick", "flush"]))
        x, y = draw(st.integers(0, 1000)), draw(st.integers(0, 700))
        if what == "tick":
            out.append((TICK, t + draw(st.sampled_from([0.0, 0.4, 1.0, 3.0]))))
        elif what == "flush":
            out.append(FLUSH)
        elif what in ("down", "up", "move"):
            out.append(
                RawEvent(what, t, x=x, y=y, button=draw(st.sampled_from(["left", "left", "right", "middle"])))
            )
        elif what == "wheel":
            out.append(
                RawEvent("wheel", t, x=x, y=y, dx=draw(st.integers(-2, 2)), dy=draw(st.integers(-3, 3)))
            )
        elif what == "key":
            name = draw(st.sampled_from(KEYS))
            text = name if len(name) == 1 else " " if name == "space" else ""
            mods = tuple(draw(st.sets(st.sampled_from(["ctrl", "alt", "shift", "meta"]), max_size=2)))
            out.append(RawEvent("key", t, key=name, text=draw(st.sampled_from([text, ""])), mods=mods))
        else:
            out.append(RawEvent("button", t, key=draw(st.sampled_from(["home", "back"]))))
    out.append(FLUSH)
    return out


def replays_as(executed: list[A.Action], committed: A.Action | None) -> bool:
    """Whether the actions executed in a step have the effect of the action it committed."""
    if committed is None or isinstance(committed, A.Type):
        text = ""
        for a in executed:
            if isinstance(a, A.Type):
                text += a.content
            elif a == A.Press(key="backspace") and text:
                text = text[:-1]
            else:
                return False
        return text == (committed.content if isinstance(committed, A.Type) else "")
    if isinstance(committed, A.Scroll):
        same = all(
            isinstance(a, A.Scroll)
            and (a.x, a.y, a.direction) == (committed.x, committed.y, committed.direction)
            for a in executed
        )
        return same and sum(a.amount for a in executed if isinstance(a, A.Scroll)) == committed.amount
    if isinstance(committed, A.LeftDouble):
        return executed == [A.Click(x=committed.x, y=committed.y)] * 2
    return executed == [committed]


def check_ops(ops: list[MergeOp], platform: str) -> None:
    open_start: float | None = None
    executed: list[A.Action] = []
    starts = commits = 0
    for op in ops:
        if isinstance(op, Start):
            assert replays_as(executed, None), f"a step executed {executed} but never committed"
            open_start, executed = op.t, []
            starts += 1
        elif isinstance(op, Execute):
            assert open_start is not None, "Execute outside a step"
            executed.append(op.action)
        else:
            assert open_start is not None and op.started == open_start, "Commit without its Start"
            assert op.ended >= op.started and op.events >= 1
            assert replays_as(executed, op.action), (executed, op.action)
            open_start, executed = None, []
            commits += 1
        if isinstance(op, Execute | Commit):
            a = op.action
            assert A.action_from_dict(A.action_to_dict(a)) == a
            assert platform in type(a).platforms
            for name in ("x", "x1", "x2"):
                assert 0 <= getattr(a, name, 0) < SCREEN[0]
            for name in ("y", "y1", "y2"):
                assert 0 <= getattr(a, name, 0) < SCREEN[1]
            if platform == "mobile":
                assert not isinstance(a, A.LeftDouble | A.RightSingle)
    assert replays_as(executed, None)
    assert commits <= starts


@settings(max_examples=400, deadline=None)
@given(stream=streams(), platform=st.sampled_from(["desktop", "browser", "mobile"]))
def test_random_streams_keep_the_invariants(stream: Script, platform: str) -> None:
    merger = EventMerger(platform=platform, screen=SCREEN)
    ops = run(merger, stream)
    check_ops(ops, platform)
    assert not merger.open


@settings(max_examples=300, deadline=None)
@given(
    data=st.dictionaries(
        st.sampled_from(["kind", "t", "x", "y", "button", "key", "text", "mods", "dx", "dy", "zz"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-(10**12), 10**12),
            st.floats(allow_nan=True),
            st.text(max_size=40),
            st.lists(st.text(max_size=8), max_size=5),
            st.sampled_from(
                ["down", "up", "move", "wheel", "key", "button", "left", "ctrl", "enter", "home"]
            ),
        ),
    )
)
def test_from_json_either_builds_or_raises_recording_error(data: dict[str, Any]) -> None:
    try:
        ev = RawEvent.from_json(data)
    except RecordingError as exc:
        assert exc.reason
    else:
        EventMerger(screen=SCREEN).feed(ev)
