"""System prompts list exactly the action space the grammar accepts."""

from __future__ import annotations

import re

import pytest

from agent_core.actions.grammar import SDK_ACTIONS, parse_response, platform_actions
from agent_core.prompts import action_lines, system_prompt

PLATFORMS = ["desktop", "browser", "mobile"]


def fill(template: str) -> str:
    """A prompt's call template with its placeholders filled the way a model would fill them."""
    call = template.split(" # ")[0]
    call = re.sub(r"\bx\d\b", "10", call)
    call = re.sub(r"\by\d\b", "20", call)
    return call.replace("down or up or right or left", "down")


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("sdk", [False, True])
@pytest.mark.parametrize("mcp", [False, True])
@pytest.mark.parametrize("style", ["box", "point"])
def test_every_listed_action_parses_on_its_platform(platform, sdk, mcp, style):
    lines = action_lines(platform, sdk=sdk, style=style, mcp=mcp)
    names = [line.split("(")[0] for line in lines]
    offered = {"mcp_call": mcp}
    expected = [n for n in platform_actions(platform) if n not in SDK_ACTIONS or offered.get(n, sdk)]
    assert names == expected
    for line in lines:
        parsed = parse_response(f"Thought: t\nAction: {fill(line)}", screen=(1280, 720), platform=platform)
        assert parsed.actions[0].kind == line.split("(")[0]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_prompt_layout(platform):
    prompt = system_prompt(platform, language="Chinese")
    assert prompt.startswith("You are a GUI agent")
    assert "## Output Format\n```\nThought: ...\nAction: ...\n```" in prompt
    assert "## Action Space" in prompt
    assert "- Use Chinese in `Thought` part." in prompt
    assert "finished(content='infeasible: <why>')" in prompt
    assert "Coordinates are pixels of the screenshot" in prompt
    for line in action_lines(platform):
        assert line in prompt


def test_platform_specific_actions():
    desktop, mobile = system_prompt("desktop"), system_prompt("mobile")
    assert "hotkey(" in desktop and "hotkey(" not in mobile
    assert "press_home()" in mobile and "press_home()" not in desktop
    assert "long_press(" in mobile and "open_app(" in mobile
    assert "terminal(" not in desktop and "terminal(" in system_prompt("desktop", sdk=True)
    assert "web browser" in system_prompt("browser")


def test_styles_and_coordinate_notes():
    assert "click(point='<point>x1 y1</point>')" in system_prompt("desktop", style="point")
    assert "click(start_box='<|box_start|>(x1,y1)<|box_end|>')" in system_prompt("desktop")
    assert "from 0 to 1000" in system_prompt("desktop", coords="relative")
    assert "pixels of the screen" in system_prompt("desktop", coords="absolute")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"platform": "watch"}, "valid: desktop, browser, mobile"),
        ({"platform": "desktop", "coords": "normalized"}, "valid: smart_resize"),
        ({"platform": "desktop", "style": "xml"}, "valid: box, point"),
    ],
)
def test_bad_arguments(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        system_prompt(**kwargs)


TOOLS = [
    {
        "server": "records",
        "name": "lookup",
        "description": "The record stored\n  under `key`.",
        "input_schema": {
            "type": "object",
            "title": "lookupArguments",
            "properties": {"key": {"title": "Key", "type": "string"}},
            "required": ["key"],
        },
    },
    {"server": "files", "name": "list_dir", "description": "", "input_schema": {"type": "object"}},
]


def test_tools_add_their_section_and_the_mcp_call_action():
    prompt = system_prompt("desktop", tools=TOOLS)
    assert "## Tools" in prompt and prompt.index("## Action Space") < prompt.index("## Tools")
    assert "- records.lookup: The record stored under `key`.\n" in prompt
    assert (
        '  arguments schema: {"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}'
        in prompt
    )
    assert "- files.list_dir: \n" in prompt
    assert "mcp_call(server='xxx'" in prompt
    # The tools' call, as a model would write it from the prompt, parses into the action.
    call = "mcp_call(server='records', tool='lookup', arguments='{\"key\": \"SKU-7\"}')"
    response = f"Thought: look it up\nAction: {call}"
    (action,) = parse_response(response, screen=(1280, 720), platform="desktop").actions
    assert (action.server, action.tool, dict(action.arguments)) == ("records", "lookup", {"key": "SKU-7"})


@pytest.mark.parametrize("sdk", [False, True])
def test_no_tools_no_mcp_call(sdk):
    prompt = system_prompt("desktop", sdk=sdk)
    assert "mcp_call(" not in prompt and "## Tools" not in prompt
    assert ("terminal(" in prompt) == sdk


@pytest.mark.parametrize(
    ("tool", "field"), [({"name": "x"}, "server"), ({"server": "s", "name": ""}, "name")]
)
def test_a_tool_without_server_or_name_is_refused(tool, field):
    with pytest.raises(ValueError, match=f"tools\\[0\\].{field}: must be a non-empty string"):
        system_prompt("desktop", tools=[tool])


def test_an_episode_of_a_task_with_tools_prompts_with_them_and_one_without_does_not():
    from dataclasses import replace

    from agent_core.agent import run_episode
    from tests.agent_core.fakes import FakeEnv, TextPolicy, prepared

    with_tools = TextPolicy([])
    run_episode(FakeEnv(), with_tools, replace(prepared(), tools=tuple(TOOLS)))
    system = with_tools.inputs[0].messages[0]["content"]
    assert "## Tools" in system and "- records.lookup: " in system and "mcp_call(" in system
    without = TextPolicy([])
    run_episode(FakeEnv(), without, prepared())
    assert "mcp_call(" not in without.inputs[0].messages[0]["content"]
