"""Fuzzed model outputs: every one parses or raises ActionParseError with a reason — nothing else.

Deterministic (fixed seed) and quick: 10,000 mutated UI-TARS responses, plus smaller runs through the
JSON, pyautogui, computer_13, tool-call and XML-call readers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from agent_core import actions as A
from agent_core.actions.compat import parse_output
from agent_core.actions.coords import COORD_SPACES
from agent_core.actions.grammar import ActionParseError, format_response, parse_response
from agent_core.actions.json_form import parse_json_response

SEED = 0x5EED_2025
SCREENS = [(1280, 720), (1920, 1080), (3840, 2160), (1080, 2400), (640, 480)]
PLATFORMS = ["desktop", "browser", "mobile"]

SEEDS_UITARS = [
    "Thought: I need to open the browser.\nAction: click(start_box='(644,364)')",
    "Thought: 点击搜索框，然后输入“天气”。\nAction: click(start_box='<|box_start|>(100,200)<|box_end|>')\n\n"
    "type(content='天气\\n')",
    "Reflection: The last click missed.\nAction_Summary: Click OK.\nAction: click(start_box='(10,20,30,40)')",
    "Thought: drag it\nAction: drag(start_point='<point>10 20</point>', end_point='<point>500 600</point>')",
    "Thought: copy\nAction: hotkey(key='ctrl c')",
    "Thought: quotes\nAction: type(content='He said \\\"hi\\\" and it\\'s done\\n')",
    "Thought: scroll\nAction: scroll(point='<point>100 200</point>', direction='down', amount='3')",
    "Thought: wait\nAction: wait()",
    "Thought: done\nAction: finished(content='infeasible: no such file')",
    "Thought: phone\nAction: long_press(start_box='(546,1204)')\n\nopen_app(app_name='com.android.settings')",
    "Thought: sdk\nAction: mcp_call(server='fs', tool='read', arguments='{\"path\": \"/tmp/x\"}')",
    "Thought: run\nAction: terminal(command='ls -la', timeout='60')\n\n"
    "file_write(path='/a', content='x\\ny')",
]
SEEDS_UITARS += [
    format_response(thought="generated", actions=acts, screen=(1280, 720), style=style)
    for style in ("box", "point")
    for acts in (
        [A.Click(5, 6), A.Type('it\'s "x"\n\\'), A.Hotkey(("ctrl", "+"))],
        [A.Drag(0, 0, 1279, 719), A.Scroll(640, 360, "left", 7), A.Wait(0.25)],
        [A.LeftDouble(1, 2), A.RightSingle(3, 4), A.Hover(5, 6), A.Finished("done")],
    )
]
SEEDS_JSON = [
    '{"thought": "t", "actions": [{"type": "click", "x": 644, "y": 364}]}',
    '{"thought": "点击", "actions": [{"type": "drag", "x1": 1, "y1": 2, "x2": 300, "y2": 400}, '
    '{"type": "hotkey", "keys": ["ctrl", "c"]}, {"type": "type", "content": "a\\nb"}]}',
    '{"actions": [{"type": "mcp_call", "server": "s", "tool": "t", "arguments": {"a": [1, 2]}}]}',
]
SEEDS_PYAUTOGUI = [
    "import pyautogui\npyautogui.click(100, 200)\npyautogui.typewrite('hello\\n')",
    "pyautogui.moveTo(10, 20)\npyautogui.dragTo(300, 400, duration=0.5)\nDONE",
    "```python\npyautogui.hotkey('ctrl', 'c')\ntime.sleep(1)\npyautogui.scroll(-3, x=5, y=6)\n```",
    "pyautogui.mouseDown(1, 2)\npyautogui.moveTo(50, 60)\npyautogui.mouseUp()\nFAIL",
]
SEEDS_C13 = [
    '{"action_type": "CLICK", "parameters": {"x": 10, "y": 20, "num_clicks": 2}}',
    '[{"action_type": "MOVE_TO", "parameters": {"x": 5, "y": 6}}, '
    '{"action_type": "SCROLL", "parameters": {"dy": -3}}]',
    '```json\n{"action_type": "TYPING", "parameters": {"text": "hi"}}\n```\n'
    '```json\n{"action_type": "DONE"}\n```',
]
SEEDS_TOOL_CALLS = [
    "I will click the field.\n<tool_call>\n"
    '{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [300, 200]}}\n</tool_call>',
    '<think>drag it</think>\nAction: Drag the file.\n<tool_call>{"name": "computer_use", "arguments": '
    '{"action": "mouse_move", "coordinate": [10, 20]}}</tool_call>\n<tool_call>{"name": "computer_use", '
    '"arguments": {"action": "left_click_drag", "coordinate": [400, 300]}}</tool_call>',
    '<tool_call>{"name": "computer_use", "arguments": {"action": "key", "keys": ["ctrl", "s"]}}</tool_call>'
    '<tool_call>{"name": "computer_use", "arguments": {"action": "scroll", "pixels": -5}}</tool_call>'
    '<tool_call>{"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}}'
    "</tool_call>",
    '{"role": "assistant", "content": "typing", "tool_calls": [{"id": "1", "type": "function", "function": '
    '{"name": "computer_use", "arguments": "{\\"action\\": \\"type\\", \\"text\\": \\"hi\\\\n\\"}"}}]}',
    '<tool_call>{"name": "mobile_use", "arguments": {"action": "swipe", "coordinate": [100, 300], '
    '"coordinate2": [100, 50]}}</tool_call>\n<tool_call>{"name": "mobile_use", "arguments": '
    '{"action": "system_button", "button": "Back"}}</tool_call>',
    '{"name": "mobile_use", "arguments": {"action": "long_press", "coordinate": [200, 200], "time": 2}}',
]
SEEDS_XML_CALLS = [
    "<think>click the box</think>\n<seed:tool_call>\n<function=click>\n"
    "<parameter=point><point>300 200</point></parameter>\n</function>\n</seed:tool_call>",
    '<seed:tool_call><function name="drag"><parameter name="start_point" string="true"><point>10 20</point>'
    '</parameter><parameter name="end_point" string="true"><point>400 300</point></parameter></function>'
    "</seed:tool_call>",
    "<tool_call>\n<function=type>\n<parameter=content>\nhello\n\n</parameter>\n</function>\n"
    "<function=hotkey>\n<parameter=key>ctrl s</parameter>\n</function>\n</tool_call>",
    "Thought: scroll\n<function=scroll><parameter=point>(100,200)</parameter>"
    "<parameter=direction>down</function><function=finished><parameter=content>ok</parameter></function>",
    "<function=long_press><parameter=point>200 300</parameter></function>"
    "<function=press_back></function><function=open_app><parameter=app_name>Settings</parameter></function>",
]

ALPHABET = list("'\"()[]{},=<>|\\:;.+-_ \n\t0123456789abcxyzAZ") + [
    "天",
    "“",
    "😀",
    "\u200b",
    "\x00",
    "\u2028",
    "é",
    "\ud800",
    "٣",
    "²",
    "<|box_start|>",
    "<|box_end|>",
    "<point>",
    "</point>",
    "Action:",
    "Thought:",
    "```",
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    '"coordinate": ',
    "null",
]
WEIRD_NUMBERS = [
    "9" * 5000,
    "9" * 40,
    "1e999",
    "-5",
    "nan",
    "inf",
    "0x10",
    "1_000",
    "٣",
    "1e-400",
    "+3",
    ".5",
    "5.",
]


def _mutate(rng: random.Random, text: str) -> str:
    op = rng.randrange(14)
    n = len(text)
    at = rng.randrange(n + 1)
    if op == 0:
        return text[:at]
    if op == 1:
        return text[:at] + "".join(rng.choices(ALPHABET, k=rng.randint(1, 4))) + text[at:]
    if op == 2:
        return text[:at] + text[at + rng.randint(1, 8) :]
    if op == 3:
        return text.replace("'", '"') if rng.random() < 0.5 else text.replace('"', "'", 1)
    if op == 4:
        digits = list(re.finditer(r"[0-9]+", text))
        if digits:
            m = rng.choice(digits)
            return text[: m.start()] + rng.choice(WEIRD_NUMBERS) + text[m.end() :]
        return text + rng.choice(WEIRD_NUMBERS)
    if op == 5:
        k = rng.choice([1, 2, 5, 50, 500])
        return text[:at] + rng.choice(["(" * k, ")" * k, "[" * k, "((" + "1,2" + "))"]) + text[at:]
    if op == 6:
        end = min(n, at + rng.randint(1, 40))
        return text[:end] + text[at:end] + text[end:]
    if op == 7:
        return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randint(0, 30)))
    if op == 8:
        return ""
    if op == 9:
        return re.sub(
            r"[a-z_]+\(",
            lambda _: rng.choice(["clack(", "eval(", "__import__(", "click(", "(("]),
            text,
            count=1,
        )
    if op == 10:
        return text.replace("Action:", rng.choice(["", "Action:Action:", "action:", "Action :"]), 1)
    if op == 11:
        return text * rng.choice([2, 50, 2000])  # 2000 copies is far past the 20k-character limit
    if op == 12:
        return text[:at] + rng.choice(["\\", "\\'", "'", '"', "\\\\", "\\n"]) + text[at:]
    return text.replace(",", rng.choice(["", ",,", " ", ", x=", "=", ")"]), 1)


def _fuzz(
    count: int, seeds: list[str], parse: Callable[[str, random.Random], object], seed: int
) -> tuple[int, int]:
    rng = random.Random(seed)
    parsed = rejected = 0
    failures = []
    for i in range(count):
        text = rng.choice(seeds)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            text = _mutate(rng, text)
        try:
            parse(text, rng)
            parsed += 1
        except ActionParseError as exc:
            assert isinstance(exc.reason, str) and exc.reason.strip(), f"empty reason for {text[:200]!r}"
            rejected += 1
        except Exception as exc:  # the point is to catch anything else
            failures.append(f"#{i}: {type(exc).__name__}: {exc} <- {text[:200]!r}")
    assert not failures, "\n".join(failures[:10])
    return parsed, rejected


def _check_actions(actions: tuple[A.Action, ...], texts: tuple[str, ...], screen: tuple[int, int]) -> None:
    assert len(actions) == len(texts) and actions
    width, height = screen
    for action in actions:
        for fx, fy in (("x", "y"), ("x1", "y1"), ("x2", "y2")):
            if hasattr(action, fx):
                assert 0 <= getattr(action, fx) < width and 0 <= getattr(action, fy) < height


def test_fuzzed_uitars_responses_parse_or_fail_cleanly():
    def parse(text: str, rng: random.Random) -> object:
        screen = rng.choice(SCREENS)
        result = parse_response(
            text, screen=screen, coords=rng.choice(COORD_SPACES), platform=rng.choice(PLATFORMS)
        )
        _check_actions(result.actions, result.action_texts, screen)
        return result

    parsed, rejected = _fuzz(10_000, SEEDS_UITARS, parse, SEED)
    # Both outcomes must be well represented, or the mutations are too mild or too wild to mean much.
    assert parsed > 1000 and rejected > 3000


def test_fuzzed_json_responses_parse_or_fail_cleanly():
    def parse(text: str, rng: random.Random) -> object:
        screen = rng.choice(SCREENS)
        result = parse_json_response(text, screen=screen, coords="smart_resize", platform="desktop")
        _check_actions(result.actions, result.action_texts, screen)
        return result

    parsed, rejected = _fuzz(1500, SEEDS_JSON, parse, SEED + 1)
    assert parsed > 50 and rejected > 500


def test_fuzzed_pyautogui_and_computer13_outputs_parse_or_fail_cleanly():
    def parse_with(fmt: str) -> Callable[[str, random.Random], object]:
        def parse(text: str, rng: random.Random) -> object:
            screen = rng.choice(SCREENS)
            return parse_output(
                text, fmt=fmt, screen=screen, coords="absolute", platform=rng.choice(PLATFORMS)
            )

        return parse

    parsed, rejected = _fuzz(1500, SEEDS_PYAUTOGUI, parse_with("pyautogui"), SEED + 2)
    assert parsed > 50 and rejected > 500
    parsed, rejected = _fuzz(1000, SEEDS_C13, parse_with("computer13"), SEED + 3)
    assert parsed > 50 and rejected > 300


def test_fuzzed_tool_calls_and_xml_calls_parse_or_fail_cleanly():
    def parse_with(fmt: str) -> Callable[[str, random.Random], object]:
        def parse(text: str, rng: random.Random) -> object:
            screen = rng.choice(SCREENS)
            result = parse_output(
                text,
                fmt=fmt,
                screen=screen,
                coords=rng.choice(COORD_SPACES),
                platform=rng.choice(PLATFORMS),
            )
            _check_actions(result.actions, result.action_texts, screen)
            return result

        return parse

    parsed, rejected = _fuzz(1500, SEEDS_TOOL_CALLS, parse_with("tool_calls"), SEED + 4)
    assert parsed > 50 and rejected > 500
    parsed, rejected = _fuzz(1500, SEEDS_XML_CALLS, parse_with("xml_calls"), SEED + 5)
    assert parsed > 50 and rejected > 500
