"""pyautogui code, read with `ast` and never run (`parse_pyautogui`), and written (`format_pyautogui`).

Only calls with literal arguments are understood, plus ``time.sleep(n)`` and OSWorld's DONE / FAIL /
WAIT tokens. The pointer is tracked as the real mouse would be (`agent_core.actions.pointer`), so
``moveTo`` then ``dragTo`` (or ``mouseDown`` … ``mouseUp``) becomes one `Drag` and a ``click()``
without coordinates clicks where the pointer is. Anything not understood raises `ActionParseError`.
"""

from __future__ import annotations

import ast
import warnings

from agent_core.actions import model as A
from agent_core.actions.grammar import MAX_RESPONSE_CHARS, ActionParseError
from agent_core.actions.pointer import (
    TOKENS,
    Point,
    Pointer,
    check_coords,
    key_names,
    number_arg,
    screen_point,
    text_arg,
)

MAX_PRESSES = 100
MAX_NESTING = 8
_IGNORED = ("interval", "duration", "_pause")
_PARAMS: dict[str, tuple[str, ...]] = {
    "click": ("x", "y", "clicks", "interval", "button", "duration", "_pause"),
    "doubleClick": ("x", "y", "interval", "button", "duration", "_pause"),
    "rightClick": ("x", "y", "interval", "duration", "_pause"),
    "middleClick": ("x", "y", "interval", "duration", "_pause"),
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
    return screen_point(x, y, screen, coords)


def _pyautogui_call(
    m: Pointer, name: str, call: ast.Call, text: str, screen: tuple[int, int] | None, coords: str
) -> None:
    b, extra = _bind(name, call)
    if name in ("click", "doubleClick", "rightClick", "middleClick"):
        button = {"rightClick": "right", "middleClick": "middle"}.get(name) or b.get("button", "left")
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
            for key in key_names(message, f"{name}() message"):
                m.emit(A.Press(key=key), text)
    elif name == "press":
        presses = b.get("presses", 1)
        if isinstance(presses, bool) or not isinstance(presses, int) or not 1 <= presses <= MAX_PRESSES:
            raise ActionParseError(f"press(): presses must be an integer in [1, {MAX_PRESSES}]")
        for _ in range(presses):
            for key in key_names(b.get("keys"), "press() keys"):
                m.emit(A.Press(key=key), text)
    elif name in ("keyDown", "keyUp"):
        key = text_arg(b.get("key"), f"{name}() key")
        m.emit(A.KeyDown(key=key) if name == "keyDown" else A.KeyUp(key=key), text)
    else:  # hotkey
        keys = key_names(
            extra[0] if len(extra) == 1 and isinstance(extra[0], list) else extra, "hotkey() keys"
        )
        m.emit(A.Hotkey(keys=tuple(keys)), text)


def _statement(
    m: Pointer,
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
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Name) and node.value.id in TOKENS:
        m.emit(TOKENS[node.value.id], text)
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
    return float(number_arg(_literal(call.args[0]), "time.sleep() seconds"))


def pyautogui_actions(
    code: str, screen: tuple[int, int] | None, coords: str, pointer: Point | None = None
) -> tuple[list[A.Action], list[str]]:
    """The actions of pyautogui code and the source text of each, the mouse starting at `pointer`
    (screen pixels) when it is known; raises ActionParseError."""
    if len(code) > MAX_RESPONSE_CHARS:
        raise ActionParseError(f"code too long: {len(code)} characters (limit {MAX_RESPONSE_CHARS})")
    try:
        with warnings.catch_warnings():  # e.g. invalid escapes: untrusted code should not reach the logs
            warnings.simplefilter("ignore")
            tree = ast.parse(code.strip())
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ActionParseError(f"not valid Python: {str(exc)[:120]}") from None
    m = Pointer(screen, pointer)
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
    check_coords(screen, coords)
    return tuple(pyautogui_actions(code, screen, coords)[0])


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
    pointer = {
        A.Click: "click",
        A.LeftDouble: "doubleClick",
        A.RightSingle: "rightClick",
        A.MiddleSingle: "middleClick",
        A.Hover: "moveTo",
    }
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
