"""The UI-TARS text grammar of actions (the JSON form of whole responses is in `json_form`).

A response reads ``Thought: …`` (optionally ``Reflection: …`` / ``Action_Summary: …``, UI-TARS-1.0)
then ``Action:`` and one or more calls such as ``click(start_box='(120,45)')``, separated by
whitespace. Coordinates in the text are in a model coordinate space (see `agent_core.actions.coords`) and are
mapped to screen pixels while parsing; formatting maps them back. Parsing never evaluates text:
any malformed input raises `ActionParseError` — and nothing else — with a `.reason`.

Defaults where UI-TARS says nothing: ``scroll`` without ``amount`` scrolls `SCROLL_AMOUNT` notches,
``scroll`` without a point scrolls at the centre of the screen, and ``wait()`` waits `WAIT_SECONDS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent_core.actions import model as A
from agent_core.actions.coords import model_size, to_screen
from agent_core.actions.lexer import (
    MAX_JSON_DEPTH,
    Call,
    LexError,
    Value,
    ValueProblem,
    call_args,
    read_calls,
    to_int,
    to_number,
    to_point,
    too_deep,
)
from agent_core.actions.lexer import SCROLL_AMOUNT as SCROLL_AMOUNT
from agent_core.actions.lexer import WAIT_SECONDS as WAIT_SECONDS

MAX_RESPONSE_CHARS = 20_000
PLATFORMS: tuple[str, ...] = ("desktop", "browser", "mobile")
STYLES: tuple[str, ...] = ("box", "point")

# Mouse and keyboard actions a phone has no use for, and phone buttons a computer lacks. A phone's
# key events (adb keyevent: volume_up, power, camera, menu, enter) are `press` on every platform.
DESKTOP_ONLY = frozenset(
    {"left_double", "right_single", "middle_single", "hover", "hotkey", "keydown", "keyup"}
)
MOBILE_ONLY = frozenset({"long_press", "open_app", "press_home", "press_back"})
SDK_ACTIONS = frozenset({"terminal", "file_read", "file_write", "mcp_call"})

_START = ("start_box", "point", "start_point")
_END = ("end_box", "end_point")
SIGNATURES: dict[str, tuple[str, ...]] = {
    "click": _START,
    "left_double": _START,
    "right_single": _START,
    "middle_single": _START,
    "hover": _START,
    "drag": _START + _END,
    "scroll": (*_START, "direction", "amount"),
    "hotkey": ("key",),
    "press": ("key",),
    "keydown": ("key",),
    "keyup": ("key",),
    "type": ("content",),
    "wait": ("seconds",),
    "finished": ("content",),
    "call_user": (),
    "long_press": (*_START, "seconds", "time"),
    "open_app": ("app_name",),
    "press_home": (),
    "press_back": (),
    "terminal": ("command", "timeout"),
    "file_read": ("path",),
    "file_write": ("path", "content"),
    "mcp_call": ("server", "tool", "arguments"),
}

_ACTION_LINE = re.compile(r"^[ \t]*Action[ \t]*:", re.M)
_ACTION_INLINE = re.compile(r"(?<=\s)Action[ \t]*:")
_HEADER = re.compile(r"^[ \t]*(Thought|Reflection|Action_Summary)[ \t]*:", re.M)
_SECTION = {"Thought": "thought", "Reflection": "reflection", "Action_Summary": "action_summary"}
_HOTKEY_SPLIT = re.compile(r"\+(?=.)")


class ActionParseError(ValueError):
    """Model output that is not a valid action; `.reason` says what is wrong, the message also where."""

    def __init__(self, reason: str, *, where: str = "", position: int | None = None) -> None:
        super().__init__(f"{reason} ({where})" if where else reason)
        self.reason = reason
        self.where = where
        self.position = position


@dataclass(frozen=True)
class ParsedResponse:
    """A parsed model response: its text sections and its actions in screen pixels."""

    thought: str
    reflection: str
    action_summary: str
    actions: tuple[A.Action, ...]
    action_texts: tuple[str, ...]


def check_options(screen: tuple[int, int], coords: str, platform: str) -> None:
    """Raise ValueError for an unknown platform, a bad screen size or an unknown coordinate space."""
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; valid: {', '.join(PLATFORMS)}")
    model_size(screen=screen, space=coords)  # raises ValueError for a bad screen or space


def platform_actions(platform: str) -> tuple[str, ...]:
    """Names of the actions the grammar accepts on `platform`, in the order prompts list them."""
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; valid: {', '.join(PLATFORMS)}")
    banned = DESKTOP_ONLY if platform == "mobile" else MOBILE_ONLY
    return tuple(name for name in SIGNATURES if name not in banned)


def check_platform(kind: str, platform: str) -> None:
    """Raise ActionParseError when action `kind` has no meaning on `platform`."""
    if kind not in platform_actions(platform):
        only = "mobile" if kind in MOBILE_ONLY else "desktop and browser"
        raise ActionParseError(f"{kind}() is not available on {platform} (only on {only})")


# --- parsing -----------------------------------------------------------------------------------


class _Args:
    """The arguments of one call, read with the response's coordinate space."""

    def __init__(self, call: Call, screen: tuple[int, int], coords: str) -> None:
        self.call = call
        self.values: dict[str, Value] = dict(call.args)
        self.screen = screen
        self.coords = coords

    def has(self, key: str) -> bool:
        return key in self.values

    def text(self, key: str, default: str | None = None) -> str:
        value = self.values.get(key)
        if value is None:
            if default is None:
                raise ValueProblem(f"{self.call.name}() needs {key}=")
            return default
        return value.text

    def _one_of(self, keys: tuple[str, ...]) -> str | None:
        given = [k for k in keys if k in self.values]
        if len(given) > 1:
            raise ValueProblem(f"{self.call.name}() got {' and '.join(given)}; give only one")
        return given[0] if given else None

    def point(self, keys: tuple[str, ...], *, default: tuple[int, int] | None = None) -> tuple[int, int]:
        key = self._one_of(keys)
        if key is None:
            if default is None:
                raise ValueProblem(f"{self.call.name}() needs a point: {keys[0]}= or {keys[1]}=")
            return default
        x, y = to_point(self.values[key].text, key)
        try:
            return to_screen(x, y, screen=self.screen, space=self.coords)
        except ValueError as exc:
            raise ValueProblem(f"{key}: {exc}") from None

    def number(self, key: str, default: float) -> float:
        if key not in self.values:
            return default
        value = to_number(self.values[key].text, key)
        if value < 0:
            raise ValueProblem(f"{key} must be >= 0, got {value}")
        return value

    def key_name(self) -> str:
        key = self.text("key").strip()
        if len(key.split()) != 1:
            raise ValueProblem(f"{self.call.name}() takes one key name, got {key!r} (use hotkey for combos)")
        return key


def _hotkey(a: _Args) -> A.Action:
    raw = a.text("key")
    keys = raw.split()
    if len(keys) == 1 and keys[0] != "+":
        keys = _HOTKEY_SPLIT.split(keys[0])
    if not keys or not all(keys):
        raise ValueProblem(f"hotkey() needs key names separated by spaces, got {raw!r}")
    return A.Hotkey(keys=tuple(keys))


def _scroll(a: _Args) -> A.Action:
    centre = (a.screen[0] // 2, a.screen[1] // 2)
    direction = a.text("direction").strip().lower()
    if direction not in A.SCROLL_DIRECTIONS:
        raise ValueProblem(
            f"scroll direction must be one of {', '.join(A.SCROLL_DIRECTIONS)}, got {direction!r}"
        )
    amount = to_int(a.text("amount"), "amount") if a.has("amount") else SCROLL_AMOUNT
    x, y = a.point(_START, default=centre)
    return A.Scroll(x=x, y=y, direction=direction, amount=amount)


def _long_press(a: _Args) -> A.Action:
    if a.has("seconds") and a.has("time"):
        raise ValueProblem("long_press() got seconds and time; give only one")
    seconds = a.number("seconds", a.number("time", 1.0))
    x, y = a.point(_START)
    return A.LongPress(x=x, y=y, seconds=seconds)


def _mcp_call(a: _Args) -> A.Action:
    raw = a.text("arguments", "{}")
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise ValueProblem(f"arguments must be a JSON object: {str(exc)[:80]}") from None
    if not isinstance(arguments, dict):
        raise ValueProblem(f"arguments must be a JSON object, got {type(arguments).__name__}")
    if too_deep(arguments):
        raise ValueProblem(f"arguments nest deeper than {MAX_JSON_DEPTH} levels")
    return A.McpCall(server=a.text("server"), tool=a.text("tool"), arguments=arguments)


def _nonempty(a: _Args, key: str) -> str:
    value = a.text(key)
    if not value.strip():
        raise ValueProblem(f"{a.call.name}() needs a non-empty {key}=")
    return value


_BUILDERS: dict[str, Callable[[_Args], A.Action]] = {
    "click": lambda a: A.Click(*a.point(_START)),
    "left_double": lambda a: A.LeftDouble(*a.point(_START)),
    "right_single": lambda a: A.RightSingle(*a.point(_START)),
    "middle_single": lambda a: A.MiddleSingle(*a.point(_START)),
    "hover": lambda a: A.Hover(*a.point(_START)),
    "drag": lambda a: A.Drag(*a.point(_START), *a.point(_END)),
    "scroll": _scroll,
    "hotkey": _hotkey,
    "press": lambda a: A.Press(key=a.key_name()),
    "keydown": lambda a: A.KeyDown(key=a.key_name()),
    "keyup": lambda a: A.KeyUp(key=a.key_name()),
    "type": lambda a: A.Type(content=a.text("content")),
    "wait": lambda a: A.Wait(seconds=a.number("seconds", WAIT_SECONDS)),
    "finished": lambda a: A.Finished(content=a.text("content", "")),
    "call_user": lambda a: A.CallUser(),
    "long_press": _long_press,
    "open_app": lambda a: A.OpenApp(app_name=_nonempty(a, "app_name")),
    "press_home": lambda a: A.PressHome(),
    "press_back": lambda a: A.PressBack(),
    "terminal": lambda a: A.Terminal(command=_nonempty(a, "command"), timeout=a.number("timeout", 30.0)),
    "file_read": lambda a: A.FileRead(path=_nonempty(a, "path")),
    "file_write": lambda a: A.FileWrite(path=_nonempty(a, "path"), content=a.text("content")),
    "mcp_call": _mcp_call,
}


def error_where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}: {text[pos : pos + 40]!r}"


def build_action(call: Call, text: str, screen: tuple[int, int], coords: str, platform: str) -> A.Action:
    where = error_where(text, call.start)
    allowed = SIGNATURES.get(call.name)
    if allowed is None:
        raise ActionParseError(
            f"unknown action {call.name!r}; valid: {', '.join(platform_actions(platform))}",
            where=where,
            position=call.start,
        )
    try:
        check_platform(call.name, platform)
    except ActionParseError as exc:
        raise ActionParseError(exc.reason, where=where, position=call.start) from None
    for key, value in call.args:
        if key not in allowed:
            valid = ", ".join(allowed) or "none"
            raise ActionParseError(
                f"unknown argument {key!r} for {call.name}(); valid: {valid}",
                where=error_where(text, value.pos),
                position=value.pos,
            )
    try:
        return _BUILDERS[call.name](_Args(call, screen, coords))
    except (ValueProblem, ValueError) as exc:  # ActionError is a ValueError
        raise ActionParseError(f"{call.name}(): {exc}", where=where, position=call.start) from None


def _split_sections(pre: str) -> dict[str, str]:
    out = {"thought": "", "reflection": "", "action_summary": ""}
    headers = list(_HEADER.finditer(pre))
    if not headers:
        out["thought"] = pre.strip()
        return out
    seen: set[str] = set()
    for k, m in enumerate(headers):
        name = _SECTION[m.group(1)]
        if name in seen:
            raise ActionParseError(f"{m.group(1)}: appears twice", position=m.start())
        seen.add(name)
        end = headers[k + 1].start() if k + 1 < len(headers) else len(pre)
        out[name] = pre[m.end() : end].strip()
    lead = pre[: headers[0].start()].strip()
    if lead and "thought" not in seen:
        out["thought"] = lead
    return out


def check_size(text: object) -> str:
    """`text` itself when it is a string within MAX_RESPONSE_CHARS; ActionParseError otherwise."""
    if not isinstance(text, str):
        raise ActionParseError(f"a response must be text, got {type(text).__name__}")
    if len(text) > MAX_RESPONSE_CHARS:
        raise ActionParseError(f"response too long: {len(text)} characters (limit {MAX_RESPONSE_CHARS})")
    return text


def strip_fence(text: str) -> str:
    """`text` without surrounding whitespace and a Markdown code fence around it, if any."""
    body = text.strip()
    if body.startswith("```"):
        newline = body.find("\n")
        body = body[newline + 1 :] if newline >= 0 else ""
    if body.endswith("```"):
        body = body[:-3]
    return body


def parse_response(
    text: str, *, screen: tuple[int, int], coords: str = "smart_resize", platform: str = "desktop"
) -> ParsedResponse:
    """Parse a UI-TARS response into its sections and screen-pixel actions; raises ActionParseError."""
    check_options(screen, coords, platform)
    text = strip_fence(check_size(text))
    marker = _ACTION_LINE.search(text) or _ACTION_INLINE.search(text)
    if marker is None:
        raise ActionParseError("no 'Action:' in the response")
    sections = _split_sections(text[: marker.start()])
    try:
        calls = read_calls(text, marker.end(), len(text))
    except LexError as exc:
        raise ActionParseError(exc.reason, where=error_where(text, exc.pos), position=exc.pos) from None
    if not calls:
        raise ActionParseError("'Action:' is followed by no action", position=marker.end())
    built = tuple(build_action(call, text, screen, coords, platform) for call in calls)
    return ParsedResponse(
        thought=sections["thought"],
        reflection=sections["reflection"],
        action_summary=sections["action_summary"],
        actions=built,
        action_texts=tuple(text[c.start : c.end] for c in calls),
    )


def parse_edited_action(text: str, *, screen: tuple[int, int], platform: str = "desktop") -> ParsedResponse:
    """A person's action text in screen pixels: `Action:` may be left out, a `Thought:` kept.

    Used where people edit or correct an action (annotation, review); raises ActionParseError.
    """
    body = text.strip()
    if not _ACTION_LINE.search(body) and not _ACTION_INLINE.search(body):
        body = f"Action: {body}"
    return parse_response(body, screen=screen, coords="absolute", platform=platform)


# --- formatting --------------------------------------------------------------------------------


def format_action(
    action: A.Action, *, screen: tuple[int, int], coords: str = "smart_resize", style: str = "box"
) -> str:
    """The canonical UI-TARS text of one action, coordinates in the `coords` space."""
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; valid: {', '.join(STYLES)}")
    model_size(screen=screen, space=coords)
    return f"{action.kind}({', '.join(call_args(action, screen=screen, coords=coords, style=style))})"


def _section(name: str, value: str) -> str:
    value = value.strip()
    if _HEADER.search(value) or _ACTION_LINE.search(value):
        raise ValueError(f"{name} has a line that would read as a section header")
    return value


def format_response(
    *,
    thought: str,
    actions: Sequence[A.Action],
    screen: tuple[int, int],
    coords: str = "smart_resize",
    style: str = "box",
    reflection: str = "",
    action_summary: str = "",
) -> str:
    """A whole UI-TARS response: Reflection/Thought/Action_Summary sections (when given), then Action."""
    if not actions:
        raise ValueError("a response needs at least one action")
    lines = []
    for header, value in (
        ("Reflection", reflection),
        ("Thought", thought),
        ("Action_Summary", action_summary),
    ):
        body = _section(header, value)
        if body:
            lines.append(f"{header}: {body}")
    texts = [format_action(a, screen=screen, coords=coords, style=style) for a in actions]
    lines.append("Action: " + "\n\n".join(texts))
    return "\n".join(lines)
