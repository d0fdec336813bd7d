"""OpenAI-style function calls (the `tool_calls` format), as Qwen2.5-VL / Qwen3-VL agents emit them.

Grammar of a response (at most MAX_RESPONSE_CHARS characters):

* Its calls sit in ``<tool_call>JSON</tool_call>`` blocks (the last may lack its closing tag, as a
  cut-off answer does) with prose around them; or, without such blocks, in Markdown code fences
  with prose around them; or else the response is one bare JSON value, which prose may precede.
* The JSON is a CALL ``{"name": TOOL, "arguments": ARGS}``; or an OpenAI assistant message
  ``{"role": …, "content": …, "tool_calls": [{"id": …, "type": "function", "function": CALL}]}``,
  whose content joins the prose; or a list of CALLs or such tool_calls items. ARGS is an object, or
  a string holding one in JSON (OpenAI sends a string). Keys besides these are refused.
* TOOL is ``computer_use`` or ``mobile_use`` (the Qwen cookbook tools) and ARGS is
  ``{"action": NAME, …}``. Coordinates are ``[x, y]`` in the policy's coordinate space (Qwen2.5-VL:
  ``smart_resize``; Qwen3-VL: ``relative``). The prose gives the thought (see `prose`).

computer_use, tracked as the real mouse would be (`pointer.Pointer`): ``key`` (keys: one → Press,
several → Hotkey), ``type`` (text), ``mouse_move`` (coordinate → Hover), ``left_click`` /
``right_click`` / ``middle_click`` / ``double_click`` (coordinate, or where the pointer is),
``left_click_drag`` (coordinate, from start_coordinate or the pointer: a mouse_move just before folds
into the Drag), ``scroll`` / ``hscroll`` (pixels: pyautogui's clicks, positive up / right; at
coordinate, the pointer or the screen centre), ``wait`` (time, else WAIT_SECONDS), ``terminate``
(status: success → ``Finished("")``, failure → ``Finished("infeasible")``, as OSWorld's DONE / FAIL),
``answer`` (text → ``Finished(text)``). ``triple_click`` has no action here and is refused. "The
pointer" is where the response's earlier calls left it, else where the sandbox's pointer was when the
screenshot was taken (`pointer=`: the agent carries it across turns), as on Qwen's own computer.

mobile_use: ``click`` (coordinate), ``long_press`` (coordinate, time), ``swipe`` (coordinate →
coordinate2: a Drag), ``type`` (text), ``key`` (text: a key Press, as adb's keyevent names keys),
``system_button`` (button: Back → PressBack, Home → PressHome, Enter → ``Type("\\n")``, Menu →
``Press("menu")``), ``open`` (text → OpenApp), and ``wait`` / ``terminate`` / ``answer`` as above.

Anything else (unknown tool, action or argument, a missing or ill-typed argument, a point outside
the coordinate space, an action the platform lacks) raises `ActionParseError` with a reason.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Callable, Mapping

import json5

from agent_core.actions import model as A
from agent_core.actions.grammar import (
    WAIT_SECONDS,
    ActionParseError,
    ParsedResponse,
    check_options,
    check_platform,
    check_size,
    strip_fence,
)
from agent_core.actions.lexer import MAX_JSON_DEPTH, too_deep
from agent_core.actions.pointer import Point, Pointer, screen_point
from agent_core.actions.prose import split_prose

TOOLS: tuple[str, ...] = ("computer_use", "mobile_use")
_PARAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "computer_use": {
        "key": ("keys",),
        "type": ("text",),
        "mouse_move": ("coordinate",),
        "left_click": ("coordinate",),
        "left_click_drag": ("coordinate", "start_coordinate"),
        "right_click": ("coordinate",),
        "middle_click": ("coordinate",),
        "double_click": ("coordinate",),
        "triple_click": ("coordinate",),
        "scroll": ("pixels", "coordinate"),
        "hscroll": ("pixels", "coordinate"),
        "wait": ("time",),
        "terminate": ("status",),
        "answer": ("text",),
    },
    "mobile_use": {
        "key": ("text",),
        "click": ("coordinate",),
        "long_press": ("coordinate", "time"),
        "swipe": ("coordinate", "coordinate2"),
        "type": ("text",),
        "system_button": ("button",),
        "open": ("text",),
        "wait": ("time",),
        "terminate": ("status",),
        "answer": ("text",),
    },
}
_REFUSED = {
    "triple_click": "there is no triple-click action (a double click selects a word, not the line a "
    "triple click selects, so it does not stand in)",
}
_BUTTONS: dict[str, A.Action] = {
    "back": A.PressBack(),
    "home": A.PressHome(),
    "enter": A.Type("\n"),
    "menu": A.Press("menu"),  # the app's menu key (KEYCODE_MENU)
}
_STATUS: dict[str, A.Action] = {"success": A.Finished(""), "failure": A.Finished("infeasible")}
_CALL_KEYS = frozenset({"name", "arguments"})
_ITEM_KEYS = frozenset({"id", "type", "index", "function"})
_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "reasoning_content"})
_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.S)

Call = tuple[str, Mapping[str, object], str]  # tool name, arguments, source text


class _Args:
    """The arguments of one call, read in the response's coordinate space."""

    def __init__(self, values: Mapping[str, object], screen: tuple[int, int], coords: str) -> None:
        self.values = values
        self.screen = screen
        self.coords = coords

    def _convert(self, key: str, value: object) -> Point:
        if not isinstance(value, list) or len(value) != 2:
            raise ActionParseError(f"{key} must be [x, y], got {reprlib.repr(value)}")
        try:
            return screen_point(value[0], value[1], self.screen, self.coords)
        except ActionParseError as exc:
            raise ActionParseError(f"{key}: {exc.reason}") from None

    def at(self, key: str) -> Point:
        value = self.values.get(key)
        if value is None:
            raise ActionParseError(f"needs {key}: [x, y]")
        return self._convert(key, value)

    def point(self, key: str) -> Point | None:
        value = self.values.get(key)
        return None if value is None else self._convert(key, value)

    def text(self, key: str, *, nonempty: bool = False) -> str:
        value = self.values.get(key)
        if value is None:
            raise ActionParseError(f"needs {key}")
        if not isinstance(value, str):
            raise ActionParseError(f"{key} must be a string, got {reprlib.repr(value)}")
        if nonempty and not value.strip():
            raise ActionParseError(f"{key} must not be empty")
        return value

    def seconds(self, key: str, default: float) -> float:
        value = self.values.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ActionParseError(f"{key} must be a number of seconds, got {reprlib.repr(value)}")
        if value < 0:
            raise ActionParseError(f"{key} must be >= 0, got {value}")
        return value


# --- the actions -------------------------------------------------------------------------------

Handler = Callable[[Pointer, _Args, str], None]


def _key(m: Pointer, a: _Args, text: str) -> None:
    keys = a.values.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k.strip() for k in keys):
        raise ActionParseError(f"keys must be a non-empty list of key names, got {reprlib.repr(keys)}")
    m.emit(A.Press(key=keys[0]) if len(keys) == 1 else A.Hotkey(keys=tuple(keys)), text)


def _click(button: str, clicks: int) -> Handler:
    return lambda m, a, text: m.click(a.point("coordinate"), button, clicks, text)


def _drag(m: Pointer, a: _Args, text: str) -> None:
    start, end = a.point("start_coordinate"), a.at("coordinate")
    if start is not None:
        m.pos = start
    elif m.pos is None:
        raise ActionParseError("needs start_coordinate, or a mouse_move before it to say where to start")
    m.drag_to(end, text)


def _scroll(up: str, down: str) -> Handler:
    def scroll(m: Pointer, a: _Args, text: str) -> None:
        pixels = a.values.get("pixels")
        if pixels is None:
            raise ActionParseError("needs pixels (positive or negative)")
        if isinstance(pixels, float) and pixels.is_integer():
            pixels = int(pixels)
        direction = up if isinstance(pixels, int) and pixels > 0 else down
        m.scroll(a.point("coordinate"), direction, pixels, text)

    return scroll


def _terminate(m: Pointer, a: _Args, text: str) -> None:
    status = a.values.get("status")
    if not isinstance(status, str) or status not in _STATUS:
        raise ActionParseError(f"status must be success or failure, got {reprlib.repr(status)}")
    m.emit(_STATUS[status], text)


def _system_button(m: Pointer, a: _Args, text: str) -> None:
    button = a.text("button")
    action = _BUTTONS.get(button.strip().lower())
    if action is None:
        raise ActionParseError(f"no action for button {reprlib.repr(button)}; valid: Back, Home, Menu, Enter")
    m.emit(action, text)


def _emit(make: Callable[[_Args], A.Action]) -> Handler:
    return lambda m, a, text: m.emit(make(a), text)


_COMMON: dict[str, Handler] = {
    "type": _emit(lambda a: A.Type(content=a.text("text"))),
    "wait": _emit(lambda a: A.Wait(seconds=a.seconds("time", WAIT_SECONDS))),
    "terminate": _terminate,
    "answer": _emit(lambda a: A.Finished(content=a.text("text"))),
}
_HANDLERS: dict[str, dict[str, Handler]] = {
    "computer_use": {
        **_COMMON,
        "key": _key,
        "mouse_move": lambda m, a, text: m.move(a.at("coordinate"), text),
        "left_click": _click("left", 1),
        "right_click": _click("right", 1),
        "middle_click": _click("middle", 1),
        "double_click": _click("left", 2),
        "left_click_drag": _drag,
        "scroll": _scroll("up", "down"),
        "hscroll": _scroll("right", "left"),
    },
    "mobile_use": {
        **_COMMON,
        "key": _emit(lambda a: A.Press(key=a.text("text", nonempty=True))),
        "click": _emit(lambda a: A.Click(*a.at("coordinate"))),
        "long_press": _emit(lambda a: A.LongPress(*a.at("coordinate"), seconds=a.seconds("time", 1.0))),
        "swipe": _emit(lambda a: A.Drag(*a.at("coordinate"), *a.at("coordinate2"))),
        "system_button": _system_button,
        "open": _emit(lambda a: A.OpenApp(app_name=a.text("text", nonempty=True))),
    },
}


def _apply(m: Pointer, call: Call, screen: tuple[int, int], coords: str) -> None:
    tool, args, text = call
    table = _PARAMS.get(tool)
    if table is None:
        raise ActionParseError(f"unknown tool {reprlib.repr(tool)}; valid: {', '.join(TOOLS)}")
    action = args.get("action")
    if not isinstance(action, str) or action not in table:
        raise ActionParseError(f"unknown {tool} action {reprlib.repr(action)}; valid: {', '.join(table)}")
    unknown = sorted(str(k) for k in set(args) - {"action", *table[action]})
    if unknown:
        valid = ", ".join(table[action]) or "none"
        raise ActionParseError(f"{action}: unknown argument(s) {', '.join(unknown)}; valid: {valid}")
    if action in _REFUSED:
        raise ActionParseError(f"{action}: {_REFUSED[action]}")
    try:
        _HANDLERS[tool][action](m, _Args(args, screen, coords), text)
    except ActionParseError as exc:
        raise ActionParseError(f"{action}: {exc.reason}") from None
    except A.ActionError as exc:
        raise ActionParseError(f"{action}: {exc}") from None


# --- reading the calls -------------------------------------------------------------------------


def _object(value: object, what: str, keys: frozenset[str]) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise ActionParseError(f"{what} must be a JSON object, got {type(value).__name__}")
    extra = sorted(str(k) for k in set(value) - keys)
    if extra:
        raise ActionParseError(f"{what}: unknown key(s) {', '.join(extra)}; valid: {', '.join(sorted(keys))}")
    return value


def _call(item: object) -> Call:
    if isinstance(item, dict) and "function" in item:  # an OpenAI tool_calls item
        wrapper = _object(item, "a tool call", _ITEM_KEYS)
        if wrapper.get("type", "function") != "function":
            raise ActionParseError(
                f"a tool call's type must be 'function', got {reprlib.repr(wrapper['type'])}"
            )
        item = wrapper["function"]
    call = _object(item, "a call", _CALL_KEYS)
    name, args = call.get("name"), call.get("arguments")
    if not isinstance(name, str):
        raise ActionParseError(f"a call needs a name (a string), got {reprlib.repr(name)}")
    if isinstance(args, str):
        args = _decode(args, "arguments")
    if not isinstance(args, dict):
        raise ActionParseError(f"{name}: arguments must be a JSON object, got {type(args).__name__}")
    return name, args, json.dumps({"name": name, "arguments": args}, ensure_ascii=False)


def _calls(data: object) -> tuple[list[Call], str]:
    """The calls a decoded JSON value holds, and the content of an OpenAI message (prose)."""
    if isinstance(data, dict) and "tool_calls" in data:
        message = _object(data, "a message", _MESSAGE_KEYS)
        content, items = message.get("content"), message.get("tool_calls")
        if content is not None and not isinstance(content, str):
            raise ActionParseError(f"a message's content must be a string, got {type(content).__name__}")
        if not isinstance(items, list) or not items:
            raise ActionParseError("a message's tool_calls must be a non-empty list")
        return [_call(item) for item in items], content or ""
    if isinstance(data, list):
        if not data:
            raise ActionParseError("an empty list of calls")
        return [_call(item) for item in data], ""
    return [_call(data)], ""


def _decode(body: str, what: str) -> object:
    """The JSON value of a call's text. Strict JSON first; then JSON5, as Qwen's own agent code
    (qwen-agent) falls back to it: single-quoted strings, trailing commas, unquoted keys."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        try:
            data = json5.loads(body)
        except (ValueError, RecursionError, TypeError, IndexError):
            raise ActionParseError(f"{what}: not valid JSON: {str(exc)[:120]}") from None
    if too_deep(data):
        raise ActionParseError(f"{what}: JSON nests deeper than {MAX_JSON_DEPTH} levels")
    return data


def _blocks(text: str) -> tuple[list[str], str]:
    """The JSON texts of a response's calls and the prose around them."""
    if "<tool_call>" in text:
        blocks, prose = _TAGGED.findall(text), _TAGGED.sub("", text)
    else:
        blocks, prose = _FENCE.findall(text), _FENCE.sub("", text)
    if "</tool_call>" in prose:
        raise ActionParseError("a </tool_call> without its <tool_call>")
    if blocks:
        return [strip_fence(str(b)) for b in blocks], prose
    if text.lstrip().startswith("["):
        return [text], ""
    start = text.find("{")
    if start < 0:
        raise ActionParseError("no tool call: no <tool_call> block and no JSON object")
    return [text[start:]], text[:start]


def parse_tool_calls(
    text: str,
    *,
    screen: tuple[int, int],
    coords: str = "smart_resize",
    platform: str = "desktop",
    pointer: Point | None = None,
) -> ParsedResponse:
    """Parse a response of computer_use / mobile_use function calls, the pointer starting at `pointer`
    (screen pixels) when it is known; raises ActionParseError."""
    check_options(screen, coords, platform)
    blocks, prose = _blocks(check_size(text))
    calls: list[Call] = []
    for k, block in enumerate(blocks):
        try:
            if not block.strip():
                raise ActionParseError("an empty call block")
            found, content = _calls(_decode(block, "the call"))
        except ActionParseError as exc:
            raise ActionParseError(exc.reason, where=f"block {k}") from None
        calls.extend(found)
        prose += "\n" + content
    m = Pointer(screen, pointer)
    for k, call in enumerate(calls):
        try:
            _apply(m, call, screen, coords)
        except ActionParseError as exc:
            raise ActionParseError(exc.reason, where=f"call {k}") from None
    actions = m.result()
    for action in actions:
        check_platform(action.kind, platform)
    thought, summary = split_prose(prose)
    return ParsedResponse(
        thought=thought, reflection="", action_summary=summary, actions=actions, action_texts=tuple(m.texts)
    )
