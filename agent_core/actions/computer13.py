"""OSWorld's computer_13 action dicts (`parse_computer13`): ``{"action_type": …, "parameters": …}``.

The pointer is tracked as in pyautogui code (`agent_core.actions.pointer`): MOVE_TO then DRAG_TO, or
MOUSE_DOWN … MOUSE_UP, becomes one `Drag`. The DONE / FAIL / WAIT tokens map as the platform does:
DONE → ``Finished("")``, FAIL → ``Finished("infeasible")``, WAIT → ``Wait(WAIT_SECONDS)``.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

from agent_core.actions import model as A
from agent_core.actions.grammar import ActionParseError
from agent_core.actions.lexer import MAX_JSON_DEPTH, too_deep
from agent_core.actions.pointer import (
    TOKENS,
    Point,
    Pointer,
    check_coords,
    key_names,
    screen_point,
    text_arg,
)

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


def _c13_one(m: Pointer, item: object, screen: tuple[int, int] | None, coords: str) -> None:
    if isinstance(item, str) and item in TOKENS:
        m.emit(TOKENS[item], item)
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
        point = screen_point(p.get("x"), p.get("y"), screen, coords)
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
        m.emit(A.Type(content=text_arg(p.get("text"), "TYPING text")), text)
    elif kind in ("PRESS", "KEY_DOWN", "KEY_UP"):
        key = text_arg(p.get("key"), f"{kind} key")
        m.emit({"PRESS": A.Press, "KEY_DOWN": A.KeyDown, "KEY_UP": A.KeyUp}[kind](key=key), text)
    elif kind == "HOTKEY":
        keys = p.get("keys")
        if not isinstance(keys, list | tuple):
            raise ActionParseError(f"HOTKEY keys must be a list, got {reprlib.repr(keys)}")
        m.emit(A.Hotkey(keys=tuple(key_names(list(keys), "HOTKEY keys"))), text)
    else:
        m.emit(TOKENS[kind], text)


def computer13_actions(
    action: object, screen: tuple[int, int] | None, coords: str, pointer: Point | None = None
) -> tuple[list[A.Action], list[str]]:
    """The actions of computer_13 dict(s) or tokens and the source text of each, the mouse starting at
    `pointer` (screen pixels) when it is known; raises ActionParseError."""
    items = [action] if isinstance(action, Mapping | str) else action
    if not isinstance(items, Sequence):
        raise ActionParseError(f"expected an action or a list of actions, got {type(action).__name__}")
    if too_deep(items, MAX_JSON_DEPTH + 1):
        raise ActionParseError(f"actions nest deeper than {MAX_JSON_DEPTH} levels")
    m = Pointer(screen, pointer)
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
    check_coords(screen, coords)
    return tuple(computer13_actions(action, screen, coords)[0])
