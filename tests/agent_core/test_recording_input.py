"""Raw demonstration events from the browser: validated at the door, and random streams through the
merger keep its invariants (hypothesis)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core import actions as A
from agent_core.data.recording import Commit, EventMerger, Execute, MergeOp, RawEvent, RecordingError, Start
from tests.agent_core.raw_events import FLUSH, TICK, Script, down, run

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
