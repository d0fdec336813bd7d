"""UI-TARS style system prompts whose action space is exactly what `grammar.parse_response` accepts.

The action lines come from the grammar's own table of actions per platform (`platform_actions`), so
a prompt never offers an action the parser would refuse; ``(x1,y1)`` and friends are placeholders
the model fills with coordinates in the convention the prompt's note describes. A sandbox's MCP tools
(`tools=`, as its `mcp_tools` call lists them) add the mcp_call action and a section listing each tool
with its server, description and argument schema; without tools the prompt offers no mcp_call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_core.actions.coords import parse_space
from agent_core.actions.grammar import SDK_ACTIONS, STYLES, WAIT_SECONDS, platform_actions

_BOX = "start_box='<|box_start|>(x1,y1)<|box_end|>'"
_POINT = "point='<point>x1 y1</point>'"
_DRAG = {
    "box": "start_box='<|box_start|>(x1,y1)<|box_end|>', end_box='<|box_start|>(x3,y3)<|box_end|>'",
    "point": "start_point='<point>x1 y1</point>', end_point='<point>x2 y2</point>'",
}
_ESCAPES = r"Use escape characters \', \", and \n in content part to ensure we can parse the content."

# name -> (arguments after the point, or None for no point; comment)
_LINES: dict[str, tuple[str | None, str]] = {
    "click": ("", ""),
    "left_double": ("", ""),
    "right_single": ("", ""),
    "middle_single": ("", "Middle-click: opens a link in a new tab, pastes the selection in X apps."),
    "hover": ("", "Move the mouse there without clicking."),
    "drag": ("", ""),
    "scroll": (
        ", direction='down or up or right or left'",
        "Show more information on the `direction` side.",
    ),
    "hotkey": (None, "Split keys with a space and use lowercase. Do not use more than 3 keys."),
    "press": (None, "Press and release a single key."),
    "keydown": (None, "Hold a key down until keyup."),
    "keyup": (None, "Release a key held by keydown."),
    "type": (None, f"{_ESCAPES} If you want to submit your input, use \\n at the end of content."),
    "wait": (None, f"Sleep for {WAIT_SECONDS:g}s and take a screenshot to check for any changes."),
    "finished": (
        None,
        f"Submit the task with your answer. {_ESCAPES} "
        "If the task cannot be done, use finished(content='infeasible: <why>').",
    ),
    "call_user": (None, "Call the user when you need the user's help."),
    "long_press": ("", ""),
    "open_app": (None, "Open an app by its name."),
    "press_home": (None, "Go to the home screen."),
    "press_back": (None, "Go back."),
    "terminal": (None, "Run a shell command in the sandbox and see its output."),
    "file_read": (None, "Read a file of the workspace."),
    "file_write": (None, f"Write a file of the workspace. {_ESCAPES}"),
    "mcp_call": (None, "Call a tool of an MCP server; arguments is a JSON object."),
}
_PLAIN_ARGS = {
    "hotkey": "key='ctrl c'",
    "press": "key='enter'",
    "keydown": "key='shift'",
    "keyup": "key='shift'",
    "type": "content='xxx'",
    "wait": "",
    "finished": "content='xxx'",
    "call_user": "",
    "open_app": "app_name='xxx'",
    "press_home": "",
    "press_back": "",
    "terminal": "command='xxx'",
    "file_read": "path='xxx'",
    "file_write": "path='xxx', content='xxx'",
    "mcp_call": "server='xxx', tool='xxx', arguments='{\"key\": \"value\"}'",
}
_COORD_NOTES = {
    "smart_resize": "Coordinates are pixels of the screenshot as you see it, with (0,0) at its top-left.",
    "relative": "Coordinates are relative: x and y run from 0 to 1000 across the screenshot, "
    "(0,0) at its top-left and (1000,1000) at its bottom-right.",
    "absolute": "Coordinates are pixels of the screen, with (0,0) at its top-left.",
}
_INTRO = {
    "computer": "You are a GUI agent. You are given a task and your action history, with screenshots. "
    "You need to perform the next action to complete the task.",
    "mobile": "You are a GUI agent operating an Android phone. You are given a task and your action history, "
    "with screenshots. You need to perform the next action to complete the task.",
}


def action_lines(platform: str, *, sdk: bool = False, style: str = "box", mcp: bool = False) -> list[str]:
    """The action-space lines of a prompt: one call template per action, with a comment where useful.

    `sdk` adds the terminal and file actions; `mcp` the mcp_call action (only when tools exist)."""
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; valid: {', '.join(STYLES)}")
    lines = []
    for name in platform_actions(platform):
        if name == "mcp_call" and not mcp:
            continue
        if name in SDK_ACTIONS and name != "mcp_call" and not sdk:
            continue
        after_point, comment = _LINES[name]
        if name == "drag":
            args = _DRAG[style]
        elif after_point is None:
            args = _PLAIN_ARGS[name]
        else:
            args = (_BOX if style == "box" else _POINT) + after_point
        lines.append(f"{name}({args})" + (f" # {comment}" if comment else ""))
    return lines


def system_prompt(
    platform: str,
    *,
    language: str = "English",
    sdk: bool = False,
    coords: str = "smart_resize",
    style: str = "box",
    tools: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The system prompt for `platform` ("desktop", "browser" or "mobile") in the UI-TARS format; with
    `tools` ({server, name, description, input_schema} each), a section listing them and mcp_call."""
    parse_space(coords)  # ValueError naming a bad space
    tool_section = tools_section(tools)
    # raises ValueError for a bad platform
    space = "\n".join(action_lines(platform, sdk=sdk, style=style, mcp=bool(tools)))
    intro = _INTRO["mobile" if platform == "mobile" else "computer"]
    if platform == "browser":
        intro += " The screen shows a web browser."
    return (
        f"{intro}\n\n"
        "## Output Format\n"
        "```\nThought: ...\nAction: ...\n```\n\n"
        "## Action Space\n\n"
        f"{space}\n\n"
        f"{tool_section}"
        "## Note\n"
        f"- Use {language} in `Thought` part.\n"
        "- Write a small plan and finally summarize your next action (with its target element) "
        "in one sentence in `Thought` part.\n"
        f"- {_COORD_NOTES[parse_space(coords)[0]]}\n"
        "- If the task is impossible or makes no sense, say why and declare it with "
        "finished(content='infeasible: <why>').\n"
    )


def _compact_schema(schema: Any) -> Any:
    """A JSON schema without its "title" entries (the SDK names every field twice)."""
    if isinstance(schema, Mapping):
        return {k: _compact_schema(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_compact_schema(v) for v in schema]
    return schema


def tools_section(tools: Sequence[Mapping[str, Any]]) -> str:
    """The prompt's "## Tools" section ("" without tools): each tool as `server.name: description` and
    its arguments' JSON schema. A tool without a server or name raises ValueError naming the field."""
    if not tools:
        return ""
    lines = [
        "## Tools\n",
        "MCP tools of this computer. Call one with mcp_call(server='<server>', tool='<name>', "
        "arguments='<a JSON object matching its schema>'); its result comes with the next screenshot.\n",
    ]
    for i, tool in enumerate(tools):
        for key in ("server", "name"):
            if not isinstance(tool.get(key), str) or not tool.get(key):
                raise ValueError(f"tools[{i}].{key}: must be a non-empty string")
        description = " ".join(str(tool.get("description") or "").split())
        schema = json.dumps(_compact_schema(tool.get("input_schema") or {}), separators=(",", ":"))
        lines.append(f"- {tool['server']}.{tool['name']}: {description}\n  arguments schema: {schema}")
    return "\n".join(lines) + "\n\n"
