"""What pyautogui code and OSWorld's computer_13 dicts share: the pointer they keep track of.

Both forms follow the mouse as the real one would (see `agent_core.actions.compat`): `Pointer` holds
the actions emitted so far, with their source texts, and the position and button state they leave
behind. The argument checks here raise `ActionParseError` with a reason, as the parsers do.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable

from agent_core.actions import model as A
from agent_core.actions.coords import to_screen
from agent_core.actions.grammar import WAIT_SECONDS, ActionParseError

# OSWorld's tokens, mapped as the platform does.
TOKENS: dict[str, A.Action] = {
    "DONE": A.Finished(content=""),
    "FAIL": A.Finished(content="infeasible"),
    "WAIT": A.Wait(seconds=WAIT_SECONDS),
}

Point = tuple[int, int]


class Pointer:
    """Emitted actions (with their source texts) and the mouse state they leave behind; `pos` is where
    the pointer is before the first of them (the sandbox's pointer, carried across turns), if known."""

    def __init__(self, screen: tuple[int, int] | None, pos: Point | None = None) -> None:
        self.screen = screen
        self.pos: Point | None = pos
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
            ("middle", 1): A.MiddleSingle,
            ("left", 2): A.LeftDouble,
        }
        make = kinds.get((button, clicks))
        if make is None:
            raise ActionParseError(
                f"no action for {clicks} {reprlib.repr(button)} click(s); "
                "left, right, middle or double left only"
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


def end_point(action: A.Action) -> Point | None:
    """Where an executed action leaves the mouse pointer (None: it does not move it)."""
    if isinstance(action, A.Drag):
        return action.x2, action.y2
    if isinstance(action, A.PointerAction):
        return action.x, action.y
    return None


def number_arg(value: object, what: str) -> float:
    """`value` when it is an int or a float (not a bool); ActionParseError naming `what` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ActionParseError(f"{what} must be a number, got {reprlib.repr(value)}")
    return value


def screen_point(x_in: object, y_in: object, screen: tuple[int, int] | None, coords: str) -> Point:
    """The screen pixel of a point in `coords` (rounded as given when there is no screen)."""
    x, y = number_arg(x_in, "x"), number_arg(y_in, "y")
    if screen is None:
        if not (math.isfinite(x) and math.isfinite(y) and x >= 0 and y >= 0):
            raise ActionParseError(f"coordinates must be finite and >= 0, got ({x}, {y})")
        return math.floor(x + 0.5), math.floor(y + 0.5)
    try:
        return to_screen(x, y, screen=screen, space=coords)
    except ValueError as exc:
        raise ActionParseError(str(exc)) from None


def check_coords(screen: tuple[int, int] | None, coords: str) -> None:
    """Raise ValueError for a coordinate space that needs a screen without one, or a bad screen or space."""
    if screen is None and coords != "absolute":
        raise ValueError(f"coords={coords!r} needs screen=(width, height)")
    if screen is not None:
        to_screen(0, 0, screen=screen, space=coords)  # raises ValueError for a bad screen or space


def text_arg(value: object, what: str) -> str:
    """`value` when it is a string; ActionParseError naming `what` otherwise."""
    if not isinstance(value, str):
        raise ActionParseError(f"{what} must be a string, got {reprlib.repr(value)}")
    return value


def key_names(value: object, what: str) -> list[str]:
    """Key names from one name or a list of them; ActionParseError naming `what` otherwise."""
    keys = value if isinstance(value, list) else [value]
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ActionParseError(f"{what} must be key names, got {reprlib.repr(value)}")
    return [str(k) for k in keys]
