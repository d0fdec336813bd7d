"""Other agents' action forms: pyautogui code and OSWorld's computer_13 dicts, plus `parse_output`.

pyautogui code is read with `ast` and never run: only calls with literal arguments are understood.
Both forms keep track of the pointer, as the real mouse would, so ``moveTo`` then ``dragTo`` (or
``mouseDown`` … ``mouseUp``) becomes one `Drag`, a ``click()`` without coordinates clicks where the
pointer is, and a scroll without coordinates scrolls there (or, before any move, at the screen centre).
OSWorld's tokens map as the platform does: DONE → ``Finished("")``, FAIL → ``Finished("infeasible")``,
WAIT → ``Wait(WAIT_SECONDS)``. Anything not understood raises `ActionParseError` with a reason.
"""

from __future__ import annotations

import ast
import json
import math
import re
import reprlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_core import actions as A
from agent_core._uitars_lexer import MAX_JSON_DEPTH, too_deep
from agent_core.coords import to_screen
from agent_core.grammar import (
    MAX_RESPONSE_CHARS,
    WAIT_SECONDS,
    ActionParseError,
    ParsedResponse,
    check_platform,
    parse_json_response,
    parse_response,
    platform_actions,
)

FORMATS: tuple[str, ...] = ("uitars", "json", "pyautogui", "computer13")
MAX_PRESSES = 100
MAX_NESTING = 8
_TOKENS: dict[str, A.Action] = {
    "DONE": A.Finished(content=""),
    "FAIL": A.Finished(content="infeasible"),
    "WAIT": A.Wait(seconds=WAIT_SECONDS),
}
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.S)

Point = tuple[int, int]


class _Pointer:
    """Emitted actions (with their source texts) and the mouse state they leave behind."""

    def __init__(self, screen: tuple[int, int] | None) -> None:
        self.screen = screen
        self.pos: Point | None = None
        self.pressed_at: Point | None = None
        self.actions: list[A.Action] = []
        self.texts: list[str] = []

    def emit(self, action: A.Action, text: str) -> None:
        if self.pressed_at is not None:
            raise ActionParseError(
                f"{action.kind} while the mouse button is held (mouseDown without mouseUp)"
            )
        self.actions.append(action)
        self.texts.append(text)

    def _take_hover(self, text: str) -> str:
        # moveTo then dragTo/mouseDown is one gesture: fold the move into it.
        last = self.actions[-1] if self.actions else None
        if isinstance(last, A.Hover) and (last.x, last.y) == self.pos:
            self.actions.pop()
            return self.texts.pop() + "\n" + text
        return text

    def here(self, point: Point | None, what: str) -> Point:
        if point is not None:
            self.pos = point
        if self.pos is None:
            raise ActionParseError(f"{what} without coordinates before the pointer was placed")
        return self.pos

    def click(self, point: Point | None, button: object, clicks: object, text: str) -> None:
        x, y = self.here(point, "click")
        if isinstance(clicks, bool) or clicks not in (1, 2):
            raise ActionParseError(f"clicks must be 1 or 2, got {reprlib.repr(clicks)}")
        kinds: dict[tuple[object, object], Callable[[int, int], A.Action]] = {
            ("left", 1): A.Click,
            ("right", 1): A.RightSingle,
            ("left", 2): A.LeftDouble,
        }
        make = kinds.get((button, clicks))
        if make is None:
            raise ActionParseError(
                f"no action for {clicks} {reprlib.repr(button)} click(s); left, right or double left only"
            )
        self.emit(make(x, y), text)

    def move(self, point: Point, text: str) -> None:
        self.pos = point
        if self.pressed_at is None:
            self.emit(A.Hover(*point), text)

    def drag_to(self, point: Point, text: str) -> None:
        start = self.here(None, "dragTo")
        text = self._take_hover(text)
        self.pos = point
        self.emit(A.Drag(*start, *point), text)

    def down(self, point: Point | None, button: object, text: str) -> None:
        if button != "left":
            raise ActionParseError(f"only the left button can be held, got {reprlib.repr(button)}")
        if self.pressed_at is not None:
            raise ActionParseError("mouseDown while the button is already held")
        self.pressed_at = self.here(point, "mouseDown")
        self.texts.append(self._take_hover(text))  # kept until mouseUp makes the action

    def up(self, point: Point | None, button: object, text: str) -> None:
        if button != "left":
            raise ActionParseError(f"only the left button can be held, got {reprlib.repr(button)}")
        if self.pressed_at is None:
            raise ActionParseError("mouseUp without mouseDown")
        start, end = self.pressed_at, self.here(point, "mouseUp")
        self.pressed_at = None
        down_text = self.texts.pop()
        action = A.Click(*end) if start == end else A.Drag(*start, *end)
        self.emit(action, down_text + "\n" + text)

    def scroll(self, point: Point | None, direction: str, amount: object, text: str) -> None:
        if isinstance(amount, bool) or not isinstance(amount, int) or amount == 0:
            raise ActionParseError(f"scroll amount must be a non-zero integer, got {reprlib.repr(amount)}")
        if point is not None:
            self.pos = point
        elif self.pos is None and self.screen is not None:
            point = (self.screen[0] // 2, self.screen[1] // 2)
        where = point or self.pos
        if where is None:
            raise ActionParseError("scroll without coordinates before the pointer was placed (give screen=)")
        self.emit(A.Scroll(x=where[0], y=where[1], direction=direction, amount=abs(amount)), text)

    def result(self) -> tuple[A.Action, ...]:
        if self.pressed_at is not None:
            raise ActionParseError("the mouse button is still held at the end (mouseDown without mouseUp)")
        if not self.actions:
            raise ActionParseError("no action")
        return tuple(self.actions)


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ActionParseError(f"{what} must be a number, got {reprlib.repr(value)}")
    return value


def _point(x_in: object, y_in: object, screen: tuple[int, int] | None, coords: str) -> Point:
    x, y = _number(x_in, "x"), _number(y_in, "y")
    if screen is None:
        if not (math.isfinite(x) and math.isfinite(y) and x >= 0 and y >= 0):
            raise ActionParseError(f"coordinates must be finite and >= 0, got ({x}, {y})")
        return math.floor(x + 0.5), math.floor(y + 0.5)
    try:
        return to_screen(x, y, screen=screen, space=coords)
    except ValueError as exc:
        raise ActionParseError(str(exc)) from None


def _check_coords(screen: tuple[int, int] | None, coords: str) -> None:
    if screen is None and coords != "absolute":
        raise ValueError(f"coords={coords!r} needs screen=(width, height)")
    if screen is not None:
        to_screen(0, 0, screen=screen, space=coords)  # raises ValueError for a bad screen or space


# --- pyautogui ---------------------------------------------------------------------------------

_IGNORED = ("interval", "duration", "_pause")
_PARAMS: dict[str, tuple[str, ...]] = {
    "click": ("x", "y", "clicks", "interval", "button", "duration", "_pause"),
    "doubleClick": ("x", "y", "interval", "button", "duration", "_pause"),
    "rightClick": ("x", "y", "interval", "duration", "_pause"),
    "moveTo": ("x", "y", "duration", "_pause"),
    "dragTo": ("x", "y", "duration", "button", "_pause"),
    "mouseDown": ("x", "y", "button", "duration", "_pause"),
    "mouseUp": ("x", "y", "button", "duration", "_pause"),
    "scroll": ("clicks", "x", "y", "_pause"),
    "vscroll": ("clicks", "x", "y", "_pause"),
    "hscroll": ("clicks", "x", "y", "_pause"),
    "typewrite": ("message", "interval", "_pause"),
    "write": ("message", "interval", "_pause"),
    "press": ("keys", "presses", "interval", "_pause"),
    "keyDown": ("key", "_pause"),
    "keyUp": ("key", "_pause"),
    "hotkey": ("interval", "_pause"),  # keys come positionally
}


def _literal(node: ast.expr, depth: int = 0) -> object:
    if depth > MAX_NESTING:  # `- - - 1` or `[[[...]]]` a thousand deep must not exhaust the stack
        raise ActionParseError(f"arguments nested deeper than {MAX_NESTING} levels")
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str | type(None)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _literal(node.operand, depth + 1)
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Tuple | ast.List):
        return [_literal(item, depth + 1) for item in node.elts]
    raise ActionParseError(f"only literal arguments are understood, got {type(node).__name__}")


def _bind(name: str, call: ast.Call) -> tuple[dict[str, object], list[object]]:
    params = _PARAMS[name]
    values = [_literal(a) for a in call.args if not isinstance(a, ast.Starred)]
    if len(values) != len(call.args):
        raise ActionParseError(f"{name}(): *arguments are not understood")
    bound: dict[str, object] = {}
    extra: list[object] = []
    if name == "hotkey":
        extra = values
    elif len(values) > len(params):
        raise ActionParseError(f"{name}() takes at most {len(params)} arguments, got {len(values)}")
    else:
        bound.update(zip(params, values, strict=False))
    for kw in call.keywords:
        if kw.arg is None or kw.arg not in params:
            raise ActionParseError(f"{name}(): unknown argument {kw.arg!r}; valid: {', '.join(params)}")
        if kw.arg in bound:
            raise ActionParseError(f"{name}(): argument {kw.arg!r} given twice")
        bound[kw.arg] = _literal(kw.value)
    for key in _IGNORED:
        value = bound.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ActionParseError(f"{name}(): {key} must be a number")
    return bound, extra


def _xy(name: str, b: dict[str, object], screen: tuple[int, int] | None, coords: str) -> Point | None:
    x, y = b.get("x"), b.get("y")
    if isinstance(x, list) and y is None:
        if len(x) != 2:
            raise ActionParseError(f"{name}(): a point needs 2 numbers, got {len(x)}")
        x, y = x
    if x is None and y is None:
        return None
    if x is None or y is None:
        raise ActionParseError(f"{name}(): give both x and y")
    return _point(x, y, screen, coords)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ActionParseError(f"{what} must be a string, got {reprlib.repr(value)}")
    return value


def _keys(value: object, what: str) -> list[str]:
    keys = value if isinstance(value, list) else [value]
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ActionParseError(f"{what} must be key names, got {reprlib.repr(value)}")
    return [str(k) for k in keys]


def _pyautogui_call(
    m: _Pointer, name: str, call: ast.Call, text: str, screen: tuple[int, int] | None, coords: str
) -> None:
    b, extra = _bind(name, call)
    if name in ("click", "doubleClick", "rightClick"):
        button = "right" if name == "rightClick" else b.get("button", "left")
        clicks = 2 if name == "doubleClick" else b.get("clicks", 1)
        m.click(_xy(name, b, screen, coords), button, clicks, text)
    elif name in ("moveTo", "dragTo"):
        point = _xy(name, b, screen, coords)
        if point is None:
            raise ActionParseError(f"{name}() needs x and y")
        if b.get("button", "left") != "left":
            raise ActionParseError(f"{name}(): only the left button can drag")
        (m.move if name == "moveTo" else m.drag_to)(point, text)
    elif name in ("mouseDown", "mouseUp"):
        (m.down if name == "mouseDown" else m.up)(_xy(name, b, screen, coords), b.get("button", "left"), text)
    elif name in ("scroll", "vscroll", "hscroll"):
        clicks = b.get("clicks")
        positive, negative = ("right", "left") if name == "hscroll" else ("up", "down")
        direction = positive if isinstance(clicks, int | float) and clicks > 0 else negative
        m.scroll(_xy(name, b, screen, coords), direction, clicks, text)
    elif name in ("typewrite", "write"):
        message = b.get("message")
        if isinstance(message, str):
            m.emit(A.Type(content=message), text)
        else:
            for key in _keys(message, f"{name}() message"):
                m.emit(A.Press(key=key), text)
    elif name == "press":
        presses = b.get("presses", 1)
        if isinstance(presses, bool) or not isinstance(presses, int) or not 1 <= presses <= MAX_PRESSES:
            raise ActionParseError(f"press(): presses must be an integer in [1, {MAX_PRESSES}]")
        for _ in range(presses):
            for key in _keys(b.get("keys"), "press() keys"):
                m.emit(A.Press(key=key), text)
    elif name in ("keyDown", "keyUp"):
        key = _text(b.get("key"), f"{name}() key")
        m.emit(A.KeyDown(key=key) if name == "keyDown" else A.KeyUp(key=key), text)
    else:  # hotkey
        keys = _keys(extra[0] if len(extra) == 1 and isinstance(extra[0], list) else extra, "hotkey() keys")
        m.emit(A.Hotkey(keys=tuple(keys)), text)


def _statement(
    m: _Pointer,
    node: ast.stmt,
    code: str,
    modules: dict[str, str],
    screen: tuple[int, int] | None,
    coords: str,
) -> None:
    text = ast.get_source_segment(code, node) or ""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name not in ("pyautogui", "time"):
                raise ActionParseError(f"import of {alias.name!r}: only pyautogui and time are understood")
            modules[alias.asname or alias.name] = alias.name
        return
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Name) and node.value.id in _TOKENS:
        m.emit(_TOKENS[node.value.id], text)
        return
    call = node.value if isinstance(node, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in modules
    ):
        raise ActionParseError("only pyautogui calls, time.sleep(n) and DONE/FAIL/WAIT are understood")
    module, name = modules[call.func.value.id], call.func.attr
    if module == "time" and name == "sleep":
        try:
            m.emit(A.Wait(seconds=_sleep_seconds(call)), text)
        except A.ActionError as exc:
            raise ActionParseError(str(exc)) from None
        return
    if module != "pyautogui" or name not in _PARAMS:
        raise ActionParseError(f"{module}.{name}() is not understood; pyautogui: {', '.join(_PARAMS)}")
    try:
        _pyautogui_call(m, name, call, text, screen, coords)
    except A.ActionError as exc:
        raise ActionParseError(f"{name}(): {exc}") from None


def _sleep_seconds(call: ast.Call) -> float:
    if len(call.args) != 1 or call.keywords:
        raise ActionParseError("time.sleep() takes exactly one number")
    return float(_number(_literal(call.args[0]), "time.sleep() seconds"))


def _pyautogui(code: str, screen: tuple[int, int] | None, coords: str) -> tuple[list[A.Action], list[str]]:
    if len(code) > MAX_RESPONSE_CHARS:
        raise ActionParseError(f"code too long: {len(code)} characters (limit {MAX_RESPONSE_CHARS})")
    try:
        with warnings.catch_warnings():  # e.g. invalid escapes: untrusted code should not reach the logs
            warnings.simplefilter("ignore")
            tree = ast.parse(code.strip())
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ActionParseError(f"not valid Python: {str(exc)[:120]}") from None
    m = _Pointer(screen)
    modules = {"pyautogui": "pyautogui", "time": "time"}
    for node in tree.body:
        try:
            _statement(m, node, code.strip(), modules, screen, coords)
        except ActionParseError as exc:
            raise ActionParseError(exc.reason, where=f"line {node.lineno}") from None
        except RecursionError:  # a last line of defence: deep trees are refused above
            raise ActionParseError("code nested too deeply", where=f"line {node.lineno}") from None
    m.result()
    return m.actions, m.texts


def parse_pyautogui(code: str, *, screen: tuple[int, int], coords: str = "absolute") -> tuple[A.Action, ...]:
    """Actions of pyautogui code (read with ast, never run); raises ActionParseError."""
    _check_coords(screen, coords)
    return tuple(_pyautogui(code, screen, coords)[0])


def format_pyautogui(action: A.Action, *, screen: tuple[int, int], normalized: bool = True) -> str:
    """pyautogui code for an action; points as 0–1 fractions of the screen (AgentNet) or pixels.

    Fractions carry enough decimals (4 below 10,000 px) that ``round(fraction * size)`` gives the
    pixel back. Actions pyautogui cannot express (call_user, mobile, SDK, a finished() with an
    answer) raise ValueError; finished() with no answer or "infeasible" becomes DONE or FAIL.
    """
    width, height = screen
    if width <= 0 or height <= 0:
        raise ValueError(f"screen must be (width, height) > 0, got {screen!r}")
    digits = max(4, len(str(max(width, height))))

    def xy(x: int, y: int) -> str:
        if not normalized:
            return f"x={x}, y={y}"
        return f"x={min(x, width - 1) / width:.{digits}f}, y={min(y, height - 1) / height:.{digits}f}"

    if isinstance(action, A.Scroll):
        name = "scroll" if action.direction in ("up", "down") else "hscroll"
        clicks = action.amount if action.direction in ("up", "right") else -action.amount
        return f"pyautogui.{name}({clicks}, {xy(action.x, action.y)})"
    if isinstance(action, A.Drag):
        return (
            f"pyautogui.moveTo({xy(action.x1, action.y1)})\n"
            f"pyautogui.dragTo({xy(action.x2, action.y2)}, button='left')"
        )
    pointer = {A.Click: "click", A.LeftDouble: "doubleClick", A.RightSingle: "rightClick", A.Hover: "moveTo"}
    if type(action) in pointer and isinstance(action, A.PointerAction):
        return f"pyautogui.{pointer[type(action)]}({xy(action.x, action.y)})"
    if isinstance(action, A.Hotkey):
        return f"pyautogui.hotkey({', '.join(repr(k) for k in action.keys)})"
    keys = {A.Press: "press", A.KeyDown: "keyDown", A.KeyUp: "keyUp"}
    if isinstance(action, A.Press | A.KeyDown | A.KeyUp):
        return f"pyautogui.{keys[type(action)]}({action.key!r})"
    if isinstance(action, A.Type):
        return f"pyautogui.write(message={action.content!r})"
    if isinstance(action, A.Wait):
        return f"time.sleep({float(action.seconds)!r})"
    if isinstance(action, A.Finished) and action.content in ("", "infeasible"):
        return "DONE" if action.content == "" else "FAIL"
    raise ValueError(f"{action.kind}() has no pyautogui form")


# --- computer_13 -------------------------------------------------------------------------------

_C13_PARAMS: dict[str, tuple[str, ...]] = {
    "MOVE_TO": ("x", "y"),
    "CLICK": ("button", "x", "y", "num_clicks"),
    "MOUSE_DOWN": ("button",),
    "MOUSE_UP": ("button",),
    "RIGHT_CLICK": ("x", "y"),
    "DOUBLE_CLICK": ("x", "y"),
    "DRAG_TO": ("x", "y"),
    "SCROLL": ("dx", "dy"),
    "TYPING": ("text",),
    "PRESS": ("key",),
    "KEY_DOWN": ("key",),
    "KEY_UP": ("key",),
    "HOTKEY": ("keys",),
    "WAIT": (),
    "FAIL": (),
    "DONE": (),
}


def _c13_one(m: _Pointer, item: object, screen: tuple[int, int] | None, coords: str) -> None:
    if isinstance(item, str) and item in _TOKENS:
        m.emit(_TOKENS[item], item)
        return
    if not isinstance(item, Mapping):
        raise ActionParseError(f"an action must be an object or DONE/FAIL/WAIT, got {type(item).__name__}")
    extra = sorted(str(k) for k in set(item) - {"action_type", "parameters"})
    if extra:
        raise ActionParseError(f"unknown key(s) {', '.join(extra)}; valid: action_type, parameters")
    kind, p = item.get("action_type"), item.get("parameters", {})
    if not isinstance(kind, str) or kind not in _C13_PARAMS:
        raise ActionParseError(f"unknown action_type {reprlib.repr(kind)}; valid: {', '.join(_C13_PARAMS)}")
    if not isinstance(p, Mapping):
        raise ActionParseError(f"{kind}: parameters must be an object")
    unknown = sorted(str(k) for k in set(p) - set(_C13_PARAMS[kind]))
    if unknown:
        raise ActionParseError(f"{kind}: unknown parameter(s) {', '.join(unknown)}")
    try:
        text = json.dumps(item, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = kind
    point = None
    if "x" in p or "y" in p:
        point = _point(p.get("x"), p.get("y"), screen, coords)
    if kind in ("MOVE_TO", "DRAG_TO"):
        if point is None:
            raise ActionParseError(f"{kind} needs x and y")
        (m.move if kind == "MOVE_TO" else m.drag_to)(point, text)
    elif kind in ("CLICK", "RIGHT_CLICK", "DOUBLE_CLICK"):
        button = "right" if kind == "RIGHT_CLICK" else p.get("button", "left")
        m.click(point, button, 2 if kind == "DOUBLE_CLICK" else p.get("num_clicks", 1), text)
    elif kind in ("MOUSE_DOWN", "MOUSE_UP"):
        (m.down if kind == "MOUSE_DOWN" else m.up)(None, p.get("button", "left"), text)
    elif kind == "SCROLL":
        dx, dy = p.get("dx", 0), p.get("dy", 0)
        if not dx and not dy:
            raise ActionParseError("SCROLL needs a non-zero dx or dy")
        if dx:  # OSWorld runs hscroll(dx) then vscroll(dy); positive is right / up
            m.scroll(None, "right" if isinstance(dx, int) and dx > 0 else "left", dx, text)
        if dy:
            m.scroll(None, "up" if isinstance(dy, int) and dy > 0 else "down", dy, text)
    elif kind == "TYPING":
        m.emit(A.Type(content=_text(p.get("text"), "TYPING text")), text)
    elif kind in ("PRESS", "KEY_DOWN", "KEY_UP"):
        key = _text(p.get("key"), f"{kind} key")
        m.emit({"PRESS": A.Press, "KEY_DOWN": A.KeyDown, "KEY_UP": A.KeyUp}[kind](key=key), text)
    elif kind == "HOTKEY":
        keys = p.get("keys")
        if not isinstance(keys, list | tuple):
            raise ActionParseError(f"HOTKEY keys must be a list, got {reprlib.repr(keys)}")
        m.emit(A.Hotkey(keys=tuple(_keys(list(keys), "HOTKEY keys"))), text)
    else:
        m.emit(_TOKENS[kind], text)


def _computer13(
    action: object, screen: tuple[int, int] | None, coords: str
) -> tuple[list[A.Action], list[str]]:
    items = [action] if isinstance(action, Mapping | str) else action
    if not isinstance(items, Sequence):
        raise ActionParseError(f"expected an action or a list of actions, got {type(action).__name__}")
    if too_deep(items, MAX_JSON_DEPTH + 1):
        raise ActionParseError(f"actions nest deeper than {MAX_JSON_DEPTH} levels")
    m = _Pointer(screen)
    for k, item in enumerate(items):
        try:
            _c13_one(m, item, screen, coords)
        except A.ActionError as exc:
            raise ActionParseError(str(exc), where=f"action {k}") from None
        except ActionParseError as exc:
            raise ActionParseError(exc.reason, where=f"action {k}") from None
    m.result()
    return m.actions, m.texts


def parse_computer13(
    action: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    screen: tuple[int, int] | None = None,
    coords: str = "absolute",
) -> tuple[A.Action, ...]:
    """Actions of OSWorld computer_13 dict(s) (screen pixels unless `coords` says otherwise)."""
    _check_coords(screen, coords)
    return tuple(_computer13(action, screen, coords)[0])


# --- dispatcher --------------------------------------------------------------------------------


def _blocks_and_prose(text: str) -> tuple[list[str], str]:
    blocks = [str(b) for b in _FENCE.findall(text)]
    if not blocks:
        return [text], ""
    return blocks, _FENCE.sub("", text).strip()


def _computer13_text(
    blocks: list[str], screen: tuple[int, int], coords: str
) -> tuple[list[A.Action], list[str]]:
    items: list[object] = []
    for block in blocks:
        body = block.strip()
        if body in _TOKENS:
            items.append(body)
            continue
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ActionParseError(f"not valid JSON: {str(exc)[:120]}") from None
        items.extend(data if isinstance(data, list) else [data])
    return _computer13(items, screen, coords)


def parse_output(
    text: str,
    *,
    fmt: str,
    screen: tuple[int, int],
    coords: str = "smart_resize",
    platform: str = "desktop",
) -> ParsedResponse:
    """Parse a model's output in format `fmt` (one of FORMATS); raises ActionParseError."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; valid: {', '.join(FORMATS)}")
    if fmt == "uitars":
        return parse_response(text, screen=screen, coords=coords, platform=platform)
    if fmt == "json":
        return parse_json_response(text, screen=screen, coords=coords, platform=platform)
    _check_coords(screen, coords)
    platform_actions(platform)  # raises ValueError for an unknown platform
    if not isinstance(text, str):
        raise ActionParseError(f"a response must be text, got {type(text).__name__}")
    if len(text) > MAX_RESPONSE_CHARS:
        raise ActionParseError(f"response too long: {len(text)} characters (limit {MAX_RESPONSE_CHARS})")
    blocks, thought = _blocks_and_prose(text)
    if fmt == "pyautogui":
        actions, texts = _pyautogui("\n".join(blocks), screen, coords)
    else:
        actions, texts = _computer13_text(blocks, screen, coords)
    for action in actions:
        check_platform(action.kind, platform)
    return ParsedResponse(
        thought=thought, reflection="", action_summary="", actions=tuple(actions), action_texts=tuple(texts)
    )
