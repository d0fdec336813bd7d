"""The JSON form of whole responses: {"thought": …, "actions": [action_to_dict forms], "coords": …}.

The other form `agent_core.actions.grammar` reads and writes besides the UI-TARS text: the same
`ParsedResponse`, with the same checks (platform, size, coordinate space) and the same
`ActionParseError` for anything malformed.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import Any

from agent_core.actions import model as A
from agent_core.actions.coords import from_screen, parse_space, to_screen
from agent_core.actions.grammar import (
    SIGNATURES,
    ActionParseError,
    ParsedResponse,
    check_options,
    check_platform,
    check_size,
    platform_actions,
    strip_fence,
)
from agent_core.actions.lexer import MAX_JSON_DEPTH, too_deep

_POINT_FIELDS = (("x", "y"), ("x1", "y1"), ("x2", "y2"))
_JSON_KEYS = frozenset({"thought", "reflection", "action_summary", "actions", "coords"})


def response_to_json(
    parsed: ParsedResponse, *, screen: tuple[int, int] | None = None, coords: str = "absolute"
) -> dict[str, Any]:
    """The JSON form of a response; coordinates in `coords` (screen pixels unless told otherwise)."""
    if coords != "absolute" and screen is None:
        raise ValueError(f"coords={coords!r} needs screen=(width, height)")
    parse_space(coords)  # ValueError naming a bad space
    out_actions = []
    for action in parsed.actions:
        data = A.action_to_dict(action)
        if screen is not None and coords != "absolute":
            for fx, fy in _POINT_FIELDS:
                if fx in data:
                    data[fx], data[fy] = from_screen(data[fx], data[fy], screen=screen, space=coords)
        out_actions.append(data)
    return {
        "coords": coords,
        "thought": parsed.thought,
        "reflection": parsed.reflection,
        "action_summary": parsed.action_summary,
        "actions": out_actions,
    }


def _json_action(data: object, index: int, screen: tuple[int, int], coords: str, platform: str) -> A.Action:
    where = f"actions[{index}]"
    if not isinstance(data, dict):
        raise ActionParseError(f"an action must be an object, got {type(data).__name__}", where=where)
    fields = dict(data)
    kind = fields.get("type")
    if not isinstance(kind, str) or kind not in SIGNATURES:
        valid = ", ".join(platform_actions(platform))
        raise ActionParseError(f"unknown action type {reprlib.repr(kind)}; valid: {valid}", where=where)
    check_platform(kind, platform)
    try:
        for fx, fy in _POINT_FIELDS:
            if fx in fields or fy in fields:
                if fields.get(fx) is None or fields.get(fy) is None:
                    raise ValueError(f"both {fx} and {fy} are needed")
                fields[fx], fields[fy] = to_screen(fields[fx], fields[fy], screen=screen, space=coords)
        for name in ("seconds", "timeout"):
            value = fields.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {reprlib.repr(value)}")
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if "keys" in fields and not isinstance(fields["keys"], list):
            raise ValueError("keys must be a list of key names")
        if "arguments" in fields and not isinstance(fields["arguments"], dict):
            raise ValueError("arguments must be an object")
        return A.action_from_dict(fields)
    except ValueError as exc:  # ActionError is a ValueError too
        raise ActionParseError(f"{kind}: {exc}", where=where) from None
    except RecursionError:  # too_deep() refuses such input first; this is a last line of defence
        raise ActionParseError(f"{kind}: a value is nested too deeply", where=where) from None


def parse_json_response(
    text: str, *, screen: tuple[int, int], coords: str = "smart_resize", platform: str = "desktop"
) -> ParsedResponse:
    """Parse {"thought": …, "actions": [action_to_dict forms]} text; raises ActionParseError."""
    check_options(screen, coords, platform)
    body = strip_fence(check_size(text))
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ActionParseError(f"not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(data, dict):
        raise ActionParseError(f"the response must be a JSON object, got {type(data).__name__}")
    if too_deep(data):
        raise ActionParseError(f"the JSON nests deeper than {MAX_JSON_DEPTH} levels")
    unknown = sorted(set(data) - _JSON_KEYS)
    if unknown:
        raise ActionParseError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; valid: {', '.join(sorted(_JSON_KEYS))}"
        )
    if data.get("coords", coords) != coords:
        raise ActionParseError(
            f"the response says coords {reprlib.repr(data.get('coords'))} but {coords!r} was expected"
        )
    sections = {}
    for key in ("thought", "reflection", "action_summary"):
        value = data.get(key, "")
        if not isinstance(value, str):
            raise ActionParseError(f"{key} must be a string, got {type(value).__name__}")
        sections[key] = value
    items = data.get("actions")
    if not isinstance(items, list) or not items:
        raise ActionParseError("'actions' must be a non-empty list")
    built = tuple(_json_action(item, k, screen, coords, platform) for k, item in enumerate(items))
    try:
        texts = tuple(json.dumps(item, ensure_ascii=False) for item in items)
    except (ValueError, RecursionError) as exc:
        raise ActionParseError(f"an action cannot be re-encoded: {str(exc)[:80]}") from None
    return ParsedResponse(
        thought=sections["thought"],
        reflection=sections["reflection"],
        action_summary=sections["action_summary"],
        actions=built,
        action_texts=texts,
    )
