"""Reading and writing the calls of UI-TARS actions: ``name(key='value', key=(1,2))``, by hand.

Nothing here evaluates text: strings are unescaped by a fixed table and every other value stays text
for the grammar to interpret. Errors carry the offset in the whole response, so messages can say where.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from agent_core.actions import model as A
from agent_core.actions.coords import from_screen

# UI-TARS's scroll has no amount and its wait() "sleeps for 5s"; these fill the gaps.
SCROLL_AMOUNT = 5
WAIT_SECONDS = 5.0

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACE = re.compile(r"\s*")
# A quote closes a string only where the call can go on; models often leave quotes inside text unescaped.
_CLOSE_OK = re.compile(r"\s*(?:\)|,\s*(?:\)|[A-Za-z_][A-Za-z0-9_]*\s*=))")
_BARE = re.compile(r"[^\s,()\[\]'\"=]+")
_ACTION_PREFIX = re.compile(r"Action[ \t]*:")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "'": "'", '"': '"', "\\": "\\"}


def _skip(src: str, i: int) -> int:
    m = _SPACE.match(src, i)
    return m.end() if m else i


class LexError(Exception):
    """A call is malformed at `pos` (an offset in the response)."""

    def __init__(self, reason: str, pos: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.pos = pos


@dataclass(frozen=True)
class Value:
    """An argument: the unescaped text of a string or the raw text of a bare value; `pos` is its key's."""

    text: str
    quoted: bool
    pos: int


@dataclass(frozen=True)
class Call:
    """One call as written: its name, keyword arguments in order, and where it lies in the response."""

    name: str
    args: tuple[tuple[str, Value], ...]
    start: int
    end: int


def read_string(src: str, i: int) -> tuple[str, int]:
    """The unescaped string starting at the quote src[i], and the offset just past its closing quote."""
    quote = src[i]
    n = len(src)
    buf: list[str] = []
    first_close = -1
    first_buf: list[str] = []
    j = i + 1
    while j < n:
        c = src[j]
        if c == "\\" and j + 1 < n:
            nxt = src[j + 1]
            # Unknown escapes stay as written: Windows paths and regexes are common in typed text.
            buf.append(_ESCAPES.get(nxt, "\\" + nxt))
            j += 2
            continue
        if c == quote:
            if _CLOSE_OK.match(src, j + 1):
                return "".join(buf), j + 1
            if first_close < 0:
                first_close, first_buf = j, list(buf)
        buf.append(c)
        j += 1
    if first_close >= 0:
        # No quote is followed by a plausible continuation: close at the first one, so the caller
        # reports what is wrong after it (a missing ')' or ',') rather than an unterminated string.
        return "".join(first_buf), first_close + 1
    raise LexError(f"unterminated string (opening {quote} has no closing {quote})", i)


def _read_value(src: str, i: int) -> tuple[Value, int]:
    n = len(src)
    if i >= n:
        raise LexError("missing value after '='", i)
    c = src[i]
    if c in "'\"":
        text, end = read_string(src, i)
        return Value(text, True, i), end
    if c in "([":
        close = ")" if c == "(" else "]"
        end = src.find(close, i + 1)
        if end < 0:
            raise LexError(f"unbalanced {c!r}: no matching {close!r}", i)
        return Value(src[i : end + 1], False, i), end + 1
    m = _BARE.match(src, i)
    if not m:
        raise LexError(f"expected a value, found {src[i]!r}", i)
    return Value(m.group(), False, i), m.end()


def _read_call(src: str, i: int) -> Call:
    n = len(src)
    m = _NAME.match(src, i)
    if not m:
        raise LexError(f"expected an action call like click(...), found {src[i : i + 20]!r}", i)
    name = m.group()
    j = _skip(src, m.end())
    if j >= n or src[j] != "(":
        raise LexError(f"expected '(' after {name!r}", j)
    j += 1
    args: list[tuple[str, Value]] = []
    seen: set[str] = set()
    while True:
        j = _skip(src, j)
        if j >= n:
            raise LexError(f"unbalanced parentheses: {name}( is never closed", i)
        if src[j] == ")":
            return Call(name, tuple(args), i, j + 1)
        km = _NAME.match(src, j)
        after = _skip(src, km.end()) if km else j
        if not km or after >= n or src[after] != "=":
            if src[j] in "'\"([" or _BARE.match(src, j):
                raise LexError(f"positional argument in {name}(): write key=value", j)
            raise LexError(f"unexpected {src[j]!r} in {name}()", j)
        key = km.group()
        if key in seen:
            raise LexError(f"argument {key!r} given twice in {name}()", j)
        seen.add(key)
        value, end = _read_value(src, _skip(src, after + 1))
        args.append((key, Value(value.text, value.quoted, j)))  # errors about an argument point at its key
        j = end
        j = _skip(src, j)
        if j < n and src[j] == ",":
            j += 1
        elif j < n and src[j] == ")":
            continue
        elif j >= n:
            raise LexError(f"unbalanced parentheses: {name}( is never closed", i)
        else:
            raise LexError(f"expected ',' or ')' after argument {key!r}, found {src[j]!r}", j)


def read_calls(src: str, start: int, end: int) -> list[Call]:
    """Every call in src[start:end], separated by whitespace (an extra 'Action:' between calls is allowed)."""
    calls: list[Call] = []
    i = start
    view = src[:end]
    while True:
        i = _skip(view, i)
        if i >= end:
            return calls
        if calls:
            m = _ACTION_PREFIX.match(view, i)
            if m:
                i = _skip(view, m.end())
                if i >= end:
                    return calls
        call = _read_call(view, i)
        calls.append(call)
        i = call.end


# --- values ------------------------------------------------------------------------------------

# ASCII digits only: `\d` would admit digits float() rejects; the length cap keeps int() cheap and safe.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT = re.compile(r"\+?[0-9]+")
_WHOLE = re.compile(r"[+-]?[0-9]+")
MAX_NUMBER_CHARS = 32
_BOX_TOKENS = re.compile(r"<\|box_start\|>|<\|box_end\|>")
_TAGGED = re.compile(r"<(point|bbox)>(.*)</\1>", re.S)
_PAIRS = {"(": ")", "[": "]"}


MAX_JSON_DEPTH = 32


def too_deep(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether lists/dicts nest deeper than `limit` (checked without recursion, so any depth is safe)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | tuple | dict):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


class ValueProblem(Exception):
    """A value is not what its argument needs; the message says why."""


def to_number(text: str, what: str) -> float:
    """A finite number written in plain decimal (or exponent) notation."""
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS or not _NUMBER.fullmatch(text):
        raise ValueProblem(f"{what} must be a number, got {text[:40]!r}")
    if _WHOLE.fullmatch(text):
        return int(text)
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueProblem(f"{what} is too large: {text[:40]!r}")
    return value


def to_int(text: str, what: str) -> int:
    """A non-negative integer."""
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS or not _INT.fullmatch(text):
        raise ValueProblem(f"{what} must be a whole number, got {text[:40]!r}")
    return int(text)


def to_point(text: str, what: str) -> tuple[float, float]:
    """Model coordinates of a point: '(x,y)', '[x, y]', '<point>x y</point>', or a box's centre."""
    body = _BOX_TOKENS.sub("", text).strip()
    tagged = _TAGGED.fullmatch(body)
    if tagged:
        body = tagged.group(2).strip()
    elif body[:1] in _PAIRS:
        if body[-1:] != _PAIRS[body[0]]:
            raise ValueProblem(f"unbalanced brackets in {what}: {text[:60]!r}")
        body = body[1:-1]
    if not body.strip():
        raise ValueProblem(f"{what} holds no coordinates")
    parts = body.split(",") if "," in body else body.split()
    nums = [to_number(p, f"coordinate {p.strip()[:40]!r} in {what}") for p in parts]
    if len(nums) == 2:
        return nums[0], nums[1]
    if len(nums) == 4:
        return (nums[0] + nums[2]) / 2, (nums[1] + nums[3]) / 2
    raise ValueProblem(f"{what} needs 2 numbers (x,y) or 4 (x1,y1,x2,y2), got {len(nums)}")


def quote(text: str) -> str:
    """`text` as a single-quoted string that read_string gives back unchanged."""
    escaped = (
        text.replace("\\", "\\\\")
        .replace("'", "\\'")
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f"'{escaped}'"


def format_number(value: float) -> str:
    """A number as to_number reads it back exactly (shortest repr; at most ~24 characters)."""
    return str(value) if isinstance(value, int) else repr(float(value))


# --- writing -----------------------------------------------------------------------------------


def _point_arg(which: str, x: int, y: int, screen: tuple[int, int], coords: str, style: str) -> str:
    mx, my = from_screen(x, y, screen=screen, space=coords)
    if style == "box":
        return f"{'end' if which == 'end' else 'start'}_box='({mx},{my})'"
    key = {"start": "start_point", "end": "end_point"}.get(which, "point")
    return f"{key}='<point>{mx} {my}</point>'"


def _key(key: str) -> str:
    if not key or len(key.split()) != 1 or key != key.strip():
        raise ValueError(f"key {key!r} cannot be written in the grammar (empty or has spaces)")
    return key


def call_args(action: A.Action, *, screen: tuple[int, int], coords: str, style: str) -> list[str]:
    """The canonical `key=value` arguments of `action` (ValueError when it has no faithful text form)."""

    def pt(key: str, x: int, y: int) -> str:
        return _point_arg(key, x, y, screen, coords, style)

    if isinstance(action, A.Drag):
        return [pt("start", action.x1, action.y1), pt("end", action.x2, action.y2)]
    if isinstance(action, A.Scroll):
        out = [pt("only", action.x, action.y), f"direction={quote(action.direction)}"]
        return out + ([f"amount='{action.amount}'"] if action.amount != SCROLL_AMOUNT else [])
    if isinstance(action, A.LongPress):
        extra = [f"seconds='{format_number(action.seconds)}'"] if action.seconds != 1.0 else []
        return [pt("only", action.x, action.y), *extra]
    if isinstance(action, A.PointerAction):
        return [pt("only", action.x, action.y)]
    if isinstance(action, A.Hotkey):
        keys = [_key(k) for k in action.keys]
        if len(keys) == 1 and "+" in keys[0][:-1]:
            raise ValueError(f"hotkey {keys[0]!r} would read back as several keys")
        return [f"key={quote(' '.join(keys))}"]
    if isinstance(action, A.Press | A.KeyDown | A.KeyUp):
        return [f"key={quote(_key(action.key))}"]
    if isinstance(action, A.Type):
        return [f"content={quote(action.content)}"]
    if isinstance(action, A.Wait):
        return [] if action.seconds == WAIT_SECONDS else [f"seconds='{format_number(action.seconds)}'"]
    if isinstance(action, A.Finished):
        return [f"content={quote(action.content)}"] if action.content else []
    if isinstance(action, A.OpenApp):
        return [f"app_name={quote(action.app_name)}"]
    if isinstance(action, A.Terminal):
        extra = [f"timeout='{format_number(action.timeout)}'"] if action.timeout != 30.0 else []
        return [f"command={quote(action.command)}", *extra]
    if isinstance(action, A.FileRead):
        return [f"path={quote(action.path)}"]
    if isinstance(action, A.FileWrite):
        return [f"path={quote(action.path)}", f"content={quote(action.content)}"]
    if isinstance(action, A.McpCall):
        out = [f"server={quote(action.server)}", f"tool={quote(action.tool)}"]
        if action.arguments:
            try:
                encoded = json.dumps(dict(action.arguments), ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"mcp_call arguments are not JSON: {exc}") from None
            out.append(f"arguments={quote(encoded)}")
        return out
    if isinstance(action, A.CallUser | A.PressHome | A.PressBack):
        return []
    raise ValueError(f"no text form for action {action!r}")
