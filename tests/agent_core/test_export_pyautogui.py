"""format_pyautogui: action -> pyautogui code, checked by reading it back with parse_pyautogui."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core import actions as A
from agent_core.actions.pyautogui_code import format_pyautogui, parse_pyautogui

SCREENS = [(1280, 720), (1920, 1080), (800, 600), (3840, 2160), (375, 812)]

ACTIONS: list[A.Action] = [
    A.Click(0, 0),
    A.Click(1279, 719),
    A.Click(640, 360),
    A.LeftDouble(17, 33),
    A.RightSingle(400, 5),
    A.Hover(1, 718),
    A.Drag(10, 20, 1200, 700),
    A.Scroll(100, 200, "up", 3),
    A.Scroll(100, 200, "down", 5),
    A.Scroll(100, 200, "left", 2),
    A.Scroll(100, 200, "right", 1),
    A.Hotkey(keys=("ctrl", "shift", "t")),
    A.Press(key="enter"),
    A.KeyDown(key="shift"),
    A.KeyUp(key="shift"),
    A.Type(content='it\'s "quoted"\nand submitted\n'),
    A.Type(content="ünïcödé ✓"),
    A.Wait(seconds=2.5),
    A.Finished(content=""),
    A.Finished(content="infeasible"),
]


def _relative(code: str) -> str:
    """Normalized 0–1 coordinates as the 0–1000 relative space parse_pyautogui reads."""
    return re.sub(r"\b([xy])=(0\.\d+)", lambda m: f"{m.group(1)}={float(m.group(2)) * 1000!r}", code)


def _scaled(action: A.Action, screen: tuple[int, int]) -> A.Action:
    """The action moved onto a screen of another size (points clamped onto it)."""
    data = A.action_to_dict(action)
    for key, size in (("x", 0), ("y", 1), ("x1", 0), ("y1", 1), ("x2", 0), ("y2", 1)):
        if key in data:
            data[key] = min(data[key], screen[size] - 1)
    return A.action_from_dict(data)


@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.kind)
def test_pixel_code_round_trips(action: A.Action, screen: tuple[int, int]):
    action = _scaled(action, screen)
    code = format_pyautogui(action, screen=screen, normalized=False)
    assert parse_pyautogui(code, screen=screen) == (action,)


@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.kind)
def test_normalized_code_round_trips(action: A.Action, screen: tuple[int, int]):
    action = _scaled(action, screen)
    code = format_pyautogui(action, screen=screen, normalized=True)
    assert parse_pyautogui(_relative(code), screen=screen, coords="relative") == (action,)


@given(
    w=st.integers(1, 9999),
    h=st.integers(1, 9999),
    fx=st.floats(0, 1, exclude_max=True),
    fy=st.floats(0, 1, exclude_max=True),
)
def test_normalized_fractions_give_the_pixel_back(w: int, h: int, fx: float, fy: float):
    x, y = int(fx * w), int(fy * h)
    code = format_pyautogui(A.Click(x, y), screen=(w, h))
    m = re.fullmatch(r"pyautogui\.click\(x=(0\.\d{4}), y=(0\.\d{4})\)", code)
    assert m is not None, code
    assert (round(float(m.group(1)) * w), round(float(m.group(2)) * h)) == (x, y)


def test_agentnet_style_click():
    assert format_pyautogui(A.Click(209, 195), screen=(1280, 720)) == "pyautogui.click(x=0.1633, y=0.2708)"


def test_large_screens_get_more_decimals():
    code = format_pyautogui(A.Click(12345, 1), screen=(20000, 100))
    assert code == "pyautogui.click(x=0.61725, y=0.01000)"


@pytest.mark.parametrize(
    "action",
    [
        A.Finished(content="the answer is 42"),
        A.CallUser(),
        A.LongPress(1, 2),
        A.PressHome(),
        A.Terminal(command="ls"),
    ],
    ids=lambda a: a.kind,
)
def test_actions_without_a_pyautogui_form_raise(action: A.Action):
    with pytest.raises(ValueError, match="no pyautogui form"):
        format_pyautogui(action, screen=(1280, 720))
