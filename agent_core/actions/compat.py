"""`parse_output`: a model's output in any of `FORMATS`, ours (UI-TARS text, JSON) or other agents'.

Other agents' forms are pyautogui code (`pyautogui_code`), OSWorld's computer_13 dicts (`computer13`),
Qwen-VL's computer_use / mobile_use function calls (`tool_calls`) and the XML function calls of newer
UI-TARS / Seed models (`xml_calls`); each module's docstring gives the grammar it accepts.

pyautogui code is read with `ast` and never run: only calls with literal arguments are understood.
Both forms keep track of the pointer, as the real mouse would, so ``moveTo`` then ``dragTo`` (or
``mouseDown`` … ``mouseUp``) becomes one `Drag`, a ``click()`` without coordinates clicks where the
pointer is, and a scroll without coordinates scrolls there. The pointer starts where the sandbox's is
(`pointer=`, carried across turns by the agent); where that is unknown, a scroll without coordinates
is at the screen centre and a click or drag without them is refused.
OSWorld's tokens map as the platform does: DONE → ``Finished("")``, FAIL → ``Finished("infeasible")``,
WAIT → ``Wait(WAIT_SECONDS)``. Anything not understood raises `ActionParseError` with a reason.
"""

from __future__ import annotations

import json
import re

from agent_core.actions import model as A
from agent_core.actions.computer13 import computer13_actions
from agent_core.actions.formats import FORMATS as FORMATS
from agent_core.actions.grammar import (
    MAX_RESPONSE_CHARS,
    ActionParseError,
    ParsedResponse,
    check_platform,
    parse_response,
    platform_actions,
)
from agent_core.actions.json_form import parse_json_response
from agent_core.actions.pointer import TOKENS, Point, check_coords
from agent_core.actions.pyautogui_code import pyautogui_actions
from agent_core.actions.tool_calls import parse_tool_calls
from agent_core.actions.xml_calls import parse_xml_calls

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.S)


def _blocks_and_prose(text: str) -> tuple[list[str], str]:
    blocks = [str(b) for b in _FENCE.findall(text)]
    if not blocks:
        return [text], ""
    return blocks, _FENCE.sub("", text).strip()


def _computer13_text(
    blocks: list[str], screen: tuple[int, int], coords: str, pointer: Point | None
) -> tuple[list[A.Action], list[str]]:
    items: list[object] = []
    for block in blocks:
        body = block.strip()
        if body in TOKENS:
            items.append(body)
            continue
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ActionParseError(f"not valid JSON: {str(exc)[:120]}") from None
        items.extend(data if isinstance(data, list) else [data])
    return computer13_actions(items, screen, coords, pointer)


def parse_output(
    text: str,
    *,
    fmt: str,
    screen: tuple[int, int],
    coords: str = "smart_resize",
    platform: str = "desktop",
    pointer: Point | None = None,
) -> ParsedResponse:
    """Parse a model's output in format `fmt` (one of FORMATS); raises ActionParseError. `pointer` is
    where the sandbox's pointer is (screen pixels), for the forms whose calls may act where it is
    (pyautogui, computer13, tool_calls); the UI-TARS forms always name their points."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; valid: {', '.join(FORMATS)}")
    if fmt == "uitars":
        return parse_response(text, screen=screen, coords=coords, platform=platform)
    if fmt == "json":
        return parse_json_response(text, screen=screen, coords=coords, platform=platform)
    if fmt == "tool_calls":
        return parse_tool_calls(text, screen=screen, coords=coords, platform=platform, pointer=pointer)
    if fmt == "xml_calls":
        return parse_xml_calls(text, screen=screen, coords=coords, platform=platform)
    check_coords(screen, coords)
    platform_actions(platform)  # raises ValueError for an unknown platform
    if not isinstance(text, str):
        raise ActionParseError(f"a response must be text, got {type(text).__name__}")
    if len(text) > MAX_RESPONSE_CHARS:
        raise ActionParseError(f"response too long: {len(text)} characters (limit {MAX_RESPONSE_CHARS})")
    blocks, thought = _blocks_and_prose(text)
    if fmt == "pyautogui":
        actions, texts = pyautogui_actions("\n".join(blocks), screen, coords, pointer)
    else:
        actions, texts = _computer13_text(blocks, screen, coords, pointer)
    for action in actions:
        check_platform(action.kind, platform)
    return ParsedResponse(
        thought=thought, reflection="", action_summary="", actions=tuple(actions), action_texts=tuple(texts)
    )
