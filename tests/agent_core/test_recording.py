"""Merging a demonstrator's raw events into actions: execute eagerly, record merged (the rules)."""

from __future__ import annotations

import pytest

from agent_core import actions as A
from agent_core.data.recording import EventMerger, MergeOp, Start
from tests.agent_core.raw_events import (
    FLUSH,
    TICK,
    C,
    Script,
    X,
    button,
    char,
    down,
    key,
    move,
    run,
    up,
    wheel,
)

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
        "middle click (moved or not: no middle drag) commits the open step and is its own",
        "desktop",
        [char(0, "a"), down(0.1, button="middle"), up(0.2, 40, 40, button="middle"), char(0.3, "b"), FLUSH],
        [
            Start(0),
            X(A.Type(content="a")),
            C(A.Type(content="a"), 0, 0, 1),
            Start(0.1),
            X(A.MiddleSingle(x=10, y=10)),
            C(A.MiddleSingle(x=10, y=10), 0.1, 0.2, 2),
            Start(0.3),
            X(A.Type(content="b")),
            C(A.Type(content="b"), 0.3, 0.3, 1),
        ],
    ),
    (
        "a middle button on a phone does nothing and leaves the open step",
        "mobile",
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
