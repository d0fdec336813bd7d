"""pyautogui code and OSWorld computer_13 dicts as actions, and the parse_output dispatcher."""

from __future__ import annotations

import json

import pytest

from agent_core import actions as A
from agent_core.actions.compat import FORMATS, parse_output
from agent_core.actions.computer13 import parse_computer13
from agent_core.actions.grammar import WAIT_SECONDS, ActionParseError
from agent_core.actions.pyautogui_code import parse_pyautogui

FHD = (1920, 1080)

PYAUTOGUI_GOLDEN: list[tuple[str, list[A.Action]]] = [
    ("pyautogui.click(100, 200)", [A.Click(100, 200)]),
    ("pyautogui.click(x=100, y=200)", [A.Click(100, 200)]),
    ("pyautogui.click((100, 200))", [A.Click(100, 200)]),
    ("pyautogui.click(100.4, 199.5)", [A.Click(100, 200)]),
    ("pyautogui.click(100, 200, button='right')", [A.RightSingle(100, 200)]),
    ("pyautogui.click(100, 200, clicks=2)", [A.LeftDouble(100, 200)]),
    ("pyautogui.click(100, 200, 2, 0.1, 'left')", [A.LeftDouble(100, 200)]),
    ("pyautogui.doubleClick(5, 6)", [A.LeftDouble(5, 6)]),
    ("pyautogui.rightClick(x=5, y=6, duration=0.2)", [A.RightSingle(5, 6)]),
    ("pyautogui.moveTo(5, 6)", [A.Hover(5, 6)]),
    ("pyautogui.moveTo(5, 6)\npyautogui.click()", [A.Hover(5, 6), A.Click(5, 6)]),
    ("pyautogui.moveTo(10, 20)\npyautogui.dragTo(300, 400, duration=1.0)", [A.Drag(10, 20, 300, 400)]),
    (
        "pyautogui.click(10, 20)\npyautogui.dragTo(30, 40, button='left')",
        [A.Click(10, 20), A.Drag(10, 20, 30, 40)],
    ),
    (
        "pyautogui.mouseDown(10, 20)\npyautogui.moveTo(50, 60)\n"
        "pyautogui.moveTo(70, 80)\npyautogui.mouseUp()",
        [A.Drag(10, 20, 70, 80)],
    ),
    ("pyautogui.moveTo(10, 20)\npyautogui.mouseDown()\npyautogui.mouseUp(30, 40)", [A.Drag(10, 20, 30, 40)]),
    ("pyautogui.mouseDown(10, 20); pyautogui.mouseUp()", [A.Click(10, 20)]),
    ("pyautogui.scroll(-5)", [A.Scroll(960, 540, "down", 5)]),  # no pointer yet: the screen centre
    ("pyautogui.scroll(3, x=100, y=200)", [A.Scroll(100, 200, "up", 3)]),
    ("pyautogui.moveTo(7, 8)\npyautogui.vscroll(-2)", [A.Hover(7, 8), A.Scroll(7, 8, "down", 2)]),
    ("pyautogui.hscroll(4, 10, 10)", [A.Scroll(10, 10, "right", 4)]),
    ("pyautogui.hscroll(-4, x=10, y=10)", [A.Scroll(10, 10, "left", 4)]),
    ("pyautogui.typewrite('hello world\\n', interval=0.05)", [A.Type("hello world\n")]),
    ('pyautogui.write("it\'s")', [A.Type("it's")]),
    ("pyautogui.typewrite(['a', 'b', 'enter'])", [A.Press("a"), A.Press("b"), A.Press("enter")]),
    ("pyautogui.press('enter')", [A.Press("enter")]),
    ("pyautogui.press('tab', presses=3)", [A.Press("tab")] * 3),
    ("pyautogui.press(['down', 'enter'])", [A.Press("down"), A.Press("enter")]),
    ("pyautogui.hotkey('ctrl', 'shift', 't')", [A.Hotkey(("ctrl", "shift", "t"))]),
    ("pyautogui.hotkey(['ctrl', 'c'])", [A.Hotkey(("ctrl", "c"))]),
    ("pyautogui.keyDown('shift')\npyautogui.keyUp('shift')", [A.KeyDown("shift"), A.KeyUp("shift")]),
    ("import time\ntime.sleep(2)", [A.Wait(2.0)]),
    ("DONE", [A.Finished("")]),
    ("FAIL", [A.Finished("infeasible")]),
    ("WAIT", [A.Wait(WAIT_SECONDS)]),
    (
        "import pyautogui\nimport time\n\npyautogui.click(960, 540)\ntime.sleep(0.5)\n"
        "pyautogui.typewrite('report.pdf')\npyautogui.press('enter')\n",
        [A.Click(960, 540), A.Wait(0.5), A.Type("report.pdf"), A.Press("enter")],
    ),
    ("import pyautogui as pg\npg.click(1, 2)", [A.Click(1, 2)]),
    ("pyautogui.click(1, 2)\nDONE", [A.Click(1, 2), A.Finished("")]),
]


@pytest.mark.parametrize(("code", "expected"), PYAUTOGUI_GOLDEN, ids=[c[0][:40] for c in PYAUTOGUI_GOLDEN])
def test_pyautogui_golden(code, expected):
    assert list(parse_pyautogui(code, screen=FHD)) == expected


def test_pyautogui_coordinates_can_be_in_another_space():
    assert parse_pyautogui("pyautogui.click(500, 500)", screen=FHD, coords="relative") == (A.Click(960, 540),)
    assert parse_pyautogui("pyautogui.click(966, 546)", screen=FHD, coords="smart_resize") == (
        A.Click(960, 540),
    )


PYAUTOGUI_MALFORMED = [
    ("", "no action"),
    ("import pyautogui", "no action"),
    ("pyautogui.click(", "not valid Python"),
    ("import os\nos.system('rm -rf /')", "import of 'os'"),
    ("__import__('os').system('ls')", "only pyautogui calls"),
    ("x = 5", "only pyautogui calls"),
    ("for i in range(3):\n    pyautogui.click(1, 2)", "only pyautogui calls"),
    ("pyautogui.click(x, 2)", "only literal arguments"),
    ("pyautogui.click(2 ** 100, 2)", "only literal arguments"),
    ("pyautogui.click(*pos)", "not understood"),
    ("pyautogui.click(1)", "give both x and y"),
    ("pyautogui.click()", "before the pointer was placed"),
    ("pyautogui.click(1, 2, clicks=3)", "clicks must be 1 or 2"),
    ("pyautogui.click(1, 2, button='x1')", "left, right, middle or double left only"),
    ("pyautogui.click(1, 2, foo=3)", "unknown argument 'foo'"),
    ("pyautogui.click(1, 2, 1, 0.0, 'left', 0.0, None, 9)", "at most"),
    ("pyautogui.click(1, 2, x=3)", "given twice"),
    ("pyautogui.click(99999, 2)", "outside"),
    ("pyautogui.click(-1, 2)", "outside"),
    ("pyautogui.click(True, 2)", "x must be a number"),
    ("pyautogui.click('ok.png')", "give both x and y"),
    ("pyautogui.dragTo(10, 20)", "before the pointer was placed"),
    ("pyautogui.moveTo()", "needs x and y"),
    ("pyautogui.mouseDown(1, 2)", "still held"),
    ("pyautogui.mouseUp(1, 2)", "mouseUp without mouseDown"),
    (
        "pyautogui.mouseDown(1, 2)\npyautogui.press('a')\npyautogui.mouseUp()",
        "while the mouse button is held",
    ),
    ("pyautogui.mouseDown(1, 2, button='right')", "only the left button"),
    ("pyautogui.scroll(0)", "non-zero integer"),
    ("pyautogui.scroll(2.5)", "non-zero integer"),
    ("pyautogui.typewrite(5)", "must be key names"),
    ("pyautogui.press('a', presses=1000)", "presses must be an integer"),
    ("pyautogui.hotkey()", "must be key names"),
    ("pyautogui.keyDown(['a', 'b'])", "must be a string"),
    ("pyautogui.tripleClick(1, 2)", "pyautogui.tripleClick() is not understood"),
    ("pyautogui.screenshot()", "is not understood"),
    ("time.sleep(100)", "wait.seconds must be"),
    ("time.sleep()", "exactly one number"),
    ("time.time()", "time.time() is not understood"),
    ("DONE()", "only pyautogui calls"),
    ("pyautogui.click(1, 2, interval='fast')", "interval must be a number"),
    ("x" * 20_001, "too long"),
    ("pyautogui.click(" + "-" * 20 + "1, 2)", "nested deeper than 8"),
    ("pyautogui.press(" + "[" * 20 + "'a'" + "]" * 20 + ")", "nested deeper than 8"),
    ("pyautogui.click(" + "(" * 300 + ")" * 300 + ")", "not valid Python"),
]


@pytest.mark.parametrize(("code", "needle"), PYAUTOGUI_MALFORMED, ids=[m[1] for m in PYAUTOGUI_MALFORMED])
def test_pyautogui_malformed(code, needle):
    with pytest.raises(ActionParseError) as info:
        parse_pyautogui(code, screen=FHD)
    assert info.value.reason and needle in info.value.reason


def test_pyautogui_errors_name_the_line():
    with pytest.raises(ActionParseError, match=r"line 3"):
        parse_pyautogui("pyautogui.click(1, 2)\n\npyautogui.click(1)", screen=FHD)


def test_pyautogui_is_never_executed(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(ActionParseError):
        parse_pyautogui(f"open({str(marker)!r}, 'w').write('x')", screen=FHD)
    assert not marker.exists()


# --- computer_13 -------------------------------------------------------------------------------

C13_GOLDEN: list[tuple[object, list[A.Action]]] = [
    ({"action_type": "CLICK", "parameters": {"x": 10, "y": 20}}, [A.Click(10, 20)]),
    ({"action_type": "CLICK", "parameters": {"x": 10, "y": 20, "button": "right"}}, [A.RightSingle(10, 20)]),
    ({"action_type": "CLICK", "parameters": {"x": 10, "y": 20, "num_clicks": 2}}, [A.LeftDouble(10, 20)]),
    ({"action_type": "DOUBLE_CLICK", "parameters": {"x": 10.4, "y": 20.5}}, [A.LeftDouble(10, 21)]),
    ({"action_type": "RIGHT_CLICK", "parameters": {"x": 1, "y": 2}}, [A.RightSingle(1, 2)]),
    ({"action_type": "MOVE_TO", "parameters": {"x": 5, "y": 6}}, [A.Hover(5, 6)]),
    (
        [{"action_type": "MOVE_TO", "parameters": {"x": 5, "y": 6}}, {"action_type": "CLICK"}],
        [A.Hover(5, 6), A.Click(5, 6)],
    ),
    (
        [
            {"action_type": "MOVE_TO", "parameters": {"x": 5, "y": 6}},
            {"action_type": "DRAG_TO", "parameters": {"x": 50, "y": 60}},
        ],
        [A.Drag(5, 6, 50, 60)],
    ),
    (
        [
            {"action_type": "MOVE_TO", "parameters": {"x": 5, "y": 6}},
            {"action_type": "MOUSE_DOWN", "parameters": {"button": "left"}},
            {"action_type": "MOVE_TO", "parameters": {"x": 50, "y": 60}},
            {"action_type": "MOUSE_UP", "parameters": {"button": "left"}},
        ],
        [A.Drag(5, 6, 50, 60)],
    ),
    (
        [
            {"action_type": "MOVE_TO", "parameters": {"x": 5, "y": 6}},
            {"action_type": "MOUSE_DOWN"},
            {"action_type": "MOUSE_UP"},
        ],
        [A.Click(5, 6)],
    ),
    (
        [
            {"action_type": "MOVE_TO", "parameters": {"x": 5, "y": 6}},
            {"action_type": "SCROLL", "parameters": {"dy": -3}},
        ],
        [A.Hover(5, 6), A.Scroll(5, 6, "down", 3)],
    ),
    (
        [
            {"action_type": "MOVE_TO", "parameters": {"x": 5, "y": 6}},
            {"action_type": "SCROLL", "parameters": {"dx": 2, "dy": 1}},
        ],
        [A.Hover(5, 6), A.Scroll(5, 6, "right", 2), A.Scroll(5, 6, "up", 1)],
    ),
    ({"action_type": "TYPING", "parameters": {"text": "hello\n"}}, [A.Type("hello\n")]),
    ({"action_type": "PRESS", "parameters": {"key": "enter"}}, [A.Press("enter")]),
    ({"action_type": "KEY_DOWN", "parameters": {"key": "shift"}}, [A.KeyDown("shift")]),
    ({"action_type": "KEY_UP", "parameters": {"key": "shift"}}, [A.KeyUp("shift")]),
    ({"action_type": "HOTKEY", "parameters": {"keys": ["ctrl", "s"]}}, [A.Hotkey(("ctrl", "s"))]),
    ({"action_type": "WAIT"}, [A.Wait(WAIT_SECONDS)]),
    ({"action_type": "FAIL"}, [A.Finished("infeasible")]),
    ({"action_type": "DONE", "parameters": {}}, [A.Finished("")]),
    ("DONE", [A.Finished("")]),
    (["FAIL"], [A.Finished("infeasible")]),
]


@pytest.mark.parametrize(("data", "expected"), C13_GOLDEN, ids=[json.dumps(c[0])[:50] for c in C13_GOLDEN])
def test_computer13_golden(data, expected):
    assert list(parse_computer13(data)) == expected


def test_computer13_scroll_needs_a_pointer_or_a_screen():
    with pytest.raises(ActionParseError, match="give screen="):
        parse_computer13({"action_type": "SCROLL", "parameters": {"dy": 1}})
    assert parse_computer13({"action_type": "SCROLL", "parameters": {"dy": 1}}, screen=FHD) == (
        A.Scroll(960, 540, "up", 1),
    )


def test_computer13_checks_coordinates_against_the_screen_when_given():
    with pytest.raises(ActionParseError, match="outside"):
        parse_computer13({"action_type": "CLICK", "parameters": {"x": 5000, "y": 1}}, screen=FHD)
    with pytest.raises(ValueError, match="needs screen"):
        parse_computer13({"action_type": "DONE"}, coords="relative")


C13_MALFORMED = [
    (42, "expected an action or a list"),
    ([], "no action"),
    ([42], "must be an object"),
    ("CLICK", "must be an object or DONE/FAIL/WAIT"),
    ({"action": "CLICK"}, "unknown key(s) action"),
    ({"action_type": "TELEPORT"}, "unknown action_type 'TELEPORT'"),
    ({"action_type": "CLICK", "parameters": []}, "parameters must be an object"),
    ({"action_type": "CLICK", "parameters": {"x": 1, "y": 2, "z": 3}}, "unknown parameter(s) z"),
    ({"action_type": "CLICK", "parameters": {"x": 1}}, "y must be a number"),
    ({"action_type": "CLICK", "parameters": {"x": -1, "y": 2}}, ">= 0"),
    ({"action_type": "CLICK", "parameters": {"x": float("nan"), "y": 2}}, "finite"),
    ({"action_type": "CLICK"}, "before the pointer was placed"),
    ({"action_type": "CLICK", "parameters": {"x": 1, "y": 2, "button": "x1"}}, "left, right, middle or"),
    ({"action_type": "CLICK", "parameters": {"x": 1, "y": 2, "num_clicks": 3}}, "clicks must be 1 or 2"),
    ({"action_type": "DRAG_TO", "parameters": {"x": 1, "y": 2}}, "before the pointer was placed"),
    ({"action_type": "MOVE_TO"}, "needs x and y"),
    ({"action_type": "MOUSE_UP"}, "mouseUp without mouseDown"),
    (
        [{"action_type": "MOVE_TO", "parameters": {"x": 1, "y": 2}}, {"action_type": "MOUSE_DOWN"}],
        "still held",
    ),
    ({"action_type": "SCROLL", "parameters": {}}, "non-zero dx or dy"),
    ({"action_type": "SCROLL", "parameters": {"dx": 0.5, "x": 1}}, "unknown parameter"),
    ({"action_type": "TYPING", "parameters": {"text": 5}}, "TYPING text must be a string"),
    ({"action_type": "PRESS"}, "PRESS key must be a string"),
    ({"action_type": "HOTKEY", "parameters": {"keys": "ctrl+c"}}, "keys must be a list"),
    ({"action_type": "HOTKEY", "parameters": {"keys": []}}, "must be key names"),
    (
        {
            "action_type": "HOTKEY",
            "parameters": {"keys": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
        },
        "nest deeper",
    ),
]


@pytest.mark.parametrize(("data", "needle"), C13_MALFORMED, ids=[m[1] for m in C13_MALFORMED])
def test_computer13_malformed(data, needle):
    with pytest.raises(ActionParseError) as info:
        parse_computer13(data)  # type: ignore[arg-type]
    assert info.value.reason and needle in info.value.reason


# --- parse_output ------------------------------------------------------------------------------


def test_parse_output_uitars_and_json():
    uitars = parse_output("Thought: t\nAction: click(start_box='(966,546)')", fmt="uitars", screen=FHD)
    assert uitars.actions == (A.Click(960, 540),) and uitars.thought == "t"
    as_json = parse_output(
        '{"thought": "t", "actions": [{"type": "click", "x": 966, "y": 546}]}', fmt="json", screen=FHD
    )
    assert as_json.actions == uitars.actions


def test_parse_output_pyautogui_with_prose_and_fences():
    text = (
        "The Save button is at the top.\n```python\nimport pyautogui\npyautogui.click(100, 200)\n```\n"
        "Then type the name.\n```python\npyautogui.typewrite('a.txt')\n```"
    )
    parsed = parse_output(text, fmt="pyautogui", screen=FHD, coords="absolute")
    assert parsed.actions == (A.Click(100, 200), A.Type("a.txt"))
    assert parsed.thought == "The Save button is at the top.\n\nThen type the name."
    assert parsed.action_texts == ("pyautogui.click(100, 200)", "pyautogui.typewrite('a.txt')")


def test_parse_output_pyautogui_tokens_and_fail():
    parsed = parse_output("```\nFAIL\n```", fmt="pyautogui", screen=FHD, coords="absolute")
    assert parsed.actions == (A.Finished("infeasible"),)


def test_parse_output_computer13():
    text = (
        "I will double-click.\n"
        '```json\n{"action_type": "DOUBLE_CLICK", "parameters": {"x": 5, "y": 6}}\n```\n'
        '```json\n{"action_type": "DONE"}\n```'
    )
    parsed = parse_output(text, fmt="computer13", screen=FHD, coords="absolute")
    assert parsed.actions == (A.LeftDouble(5, 6), A.Finished(""))
    assert parsed.thought == "I will double-click."
    assert json.loads(parsed.action_texts[0])["action_type"] == "DOUBLE_CLICK"
    bare = parse_output('[{"action_type": "WAIT"}, "DONE"]', fmt="computer13", screen=FHD, coords="absolute")
    assert bare.actions == (A.Wait(WAIT_SECONDS), A.Finished(""))


def test_parse_output_tool_calls_and_xml_calls():
    tool = parse_output(
        'Click OK.\n<tool_call>{"name": "computer_use", "arguments": '
        '{"action": "left_click", "coordinate": [500, 500]}}</tool_call>',
        fmt="tool_calls",
        screen=FHD,
        coords="relative",
    )
    xml = parse_output(
        "Click OK.\n<seed:tool_call><function=click><parameter=point><point>500 500</point></parameter>"
        "</function></seed:tool_call>",
        fmt="xml_calls",
        screen=FHD,
        coords="relative",
    )
    assert tool.actions == xml.actions == (A.Click(960, 540),)
    assert tool.thought == xml.thought == "Click OK."


def test_parse_output_checks_the_platform():
    with pytest.raises(ActionParseError, match="not available on mobile"):
        parse_output(
            "pyautogui.hotkey('ctrl', 'c')", fmt="pyautogui", screen=FHD, coords="absolute", platform="mobile"
        )


@pytest.mark.parametrize(
    ("fmt", "text", "needle"),
    [
        ("computer13", "{oops", "not valid JSON"),
        ("computer13", "```json\n[1, 2\n```", "not valid JSON"),
        ("pyautogui", "I will click the button.", "not valid Python"),
        ("pyautogui", "x" * 20_001, "too long"),
        ("uitars", "no action here", "no 'Action:'"),
        ("json", "{}", "non-empty list"),
        ("tool_calls", "<tool_call>{oops</tool_call>", "not valid JSON"),
        ("xml_calls", "click(start_box='(1,2)')", "no <function="),
    ],
)
def test_parse_output_errors(fmt, text, needle):
    with pytest.raises(ActionParseError, match=needle):
        parse_output(text, fmt=fmt, screen=FHD, coords="absolute")


def test_parse_output_unknown_format_lists_the_valid_ones():
    with pytest.raises(ValueError, match="uitars, json, pyautogui, computer13"):
        parse_output("x", fmt="xml", screen=FHD)
    assert FORMATS == ("uitars", "json", "pyautogui", "computer13", "tool_calls", "xml_calls")
    with pytest.raises(ValueError, match="valid: desktop"):
        parse_output("DONE", fmt="pyautogui", screen=FHD, coords="absolute", platform="tv")


@pytest.mark.parametrize("depth", [50, 190, 500, 990, 3000])
def test_deep_code_and_json_are_refused_cleanly(depth):
    for code in (
        "pyautogui.click(" + "-" * depth + "1, 2)",
        "pyautogui.click(" + "[" * depth + "]" * depth + ", 2)",
    ):
        with pytest.raises(ActionParseError):
            parse_pyautogui(code, screen=FHD)
    text = '{"action_type": "HOTKEY", "parameters": {"keys": ' + "[" * depth + "]" * depth + "}}"
    with pytest.raises(ActionParseError):
        parse_output(text, fmt="computer13", screen=FHD, coords="absolute")
