"""Each model family's prompt is its authors' published text, byte for byte; what it offers parses.

The fixtures below are copied from the fetched repositories (not from agent_core.prompt_families):

* UITARS_*: bytedance/UI-TARS, codes/prompts.py at commit 6b315cc0c3ae8ff3b5412a25aa3ebac1bae32f58,
  the COMPUTER_USE and MOBILE_USE templates as Python source, with {language} and {instruction}
  filled in as the tests below fill them.
* QWEN_MOBILE_1092x2408: QwenLM/Qwen2.5-VL, cookbooks/mobile_agent.ipynb at commit
  f0af2996e843cf46aa5f778c38d6694500c2ca81, the system message of the prompt the notebook prints
  (its "[Example] English App & Query" cell's output, between "<|im_start|>system\\n" and
  "<|im_end|>"), for a 1080x2400 screenshot smart-resized to 1092x2408.
* QWEN_COMPUTER_1288x728: what the same notebook's code builds with the ComputerUse class of
  cookbooks/utils/agent_function_call.py (same commit) and qwen-agent at commit
  a00999882ef4bc48f1b79c5e053eaa897924585e (NousFnCallPrompt.preprocess_fncall_messages over
  [system "You are a helpful assistant."] with functions=[ComputerUse(cfg={"display_width_px": 1288,
  "display_height_px": 728}).function], lang=None), rendered by running those two files' code; the
  same rendering of MobileUse reproduces QWEN_MOBILE_1092x2408 exactly.
"""

# The published texts keep their authors' long lines and trailing spaces.
# ruff: noqa: E501
from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from agent_core.actions.compat import parse_output
from agent_core.agent import AgentConfig, run_episode
from agent_core.memory import build_messages
from agent_core.policies.base import PolicyError, make_policy
from agent_core.policies.local import LocalPolicy
from agent_core.policies.openai import OpenAIPolicy
from agent_core.prompt_families import (
    COMPUTER_USE,
    FAMILIES,
    MOBILE_USE,
    PromptError,
    check_family,
    check_prompt,
    family_messages,
    family_prompt,
    qwen_tool,
)
from agent_core.prompts import system_prompt
from tests.agent_core.fakes import FakeEnv, TextPolicy, prepared

UITARS_COMPUTER_ENGLISH = """You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform the next action to complete the task.

## Output Format
```
Thought: ...
Action: ...
```

## Action Space

click(start_box='<|box_start|>(x1,y1)<|box_end|>')
left_double(start_box='<|box_start|>(x1,y1)<|box_end|>')
right_single(start_box='<|box_start|>(x1,y1)<|box_end|>')
drag(start_box='<|box_start|>(x1,y1)<|box_end|>', end_box='<|box_start|>(x3,y3)<|box_end|>')
hotkey(key='')
type(content='xxx') # Use escape characters \\', \\\", and \\n in content part to ensure we can parse the content in normal python string format. If you want to submit your input, use \\n at the end of content. 
scroll(start_box='<|box_start|>(x1,y1)<|box_end|>', direction='down or up or right or left')
wait() #Sleep for 5s and take a screenshot to check for any changes.
finished(content='xxx') # Use escape characters \\', \\", and \\n in content part to ensure we can parse the content in normal python string format.


## Note
- Use English in `Thought` part.
- Write a small plan and finally summarize your next action (with its target element) in one sentence in `Thought` part.

## User Instruction
Open the settings and turn on dark mode.
"""  # noqa: W291

UITARS_MOBILE_CHINESE = """You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform the next action to complete the task. 
## Output Format
```
Thought: ...
Action: ...
```
## Action Space

click(start_box='<|box_start|>(x1,y1)<|box_end|>')
long_press(start_box='<|box_start|>(x1,y1)<|box_end|>')
type(content='') #If you want to submit your input, use "\\n" at the end of `content`.
scroll(start_box='<|box_start|>(x1,y1)<|box_end|>', direction='down or up or right or left')
open_app(app_name=\'\')
drag(start_box='<|box_start|>(x1,y1)<|box_end|>', end_box='<|box_start|>(x3,y3)<|box_end|>')
press_home()
press_back()
finished(content='xxx') # Use escape characters \\', \\", and \\n in content part to ensure we can parse the content in normal python string format.


## Note
- Use Chinese in `Thought` part.
- Write a small plan and finally summarize your next action (with its target element) in one sentence in `Thought` part.

## User Instruction
打开设置，开启深色模式
"""  # noqa: W291

QWEN_MOBILE_1092x2408 = r"""You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name_for_human": "mobile_use", "name": "mobile_use", "description": "Use a touchscreen to interact with a mobile device, and take screenshots.\n* This is an interface to a mobile device with touchscreen. You can perform actions like clicking, typing, swiping, etc.\n* Some applications may take time to start or process actions, so you may need to wait and take successive screenshots to see the results of your actions.\n* The screen's resolution is 1092x2408.\n* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. Don't click boxes on their edges unless asked.", "parameters": {"properties": {"action": {"description": "The action to perform. The available actions are:\n* `key`: Perform a key event on the mobile device.\n    - This supports adb's `keyevent` syntax.\n    - Examples: \"volume_up\", \"volume_down\", \"power\", \"camera\", \"clear\".\n* `click`: Click the point on the screen with coordinate (x, y).\n* `long_press`: Press the point on the screen with coordinate (x, y) for specified seconds.\n* `swipe`: Swipe from the starting point with coordinate (x, y) to the end point with coordinates2 (x2, y2).\n* `type`: Input the specified text into the activated input box.\n* `system_button`: Press the system button.\n* `open`: Open an app on the device.\n* `wait`: Wait specified seconds for the change to happen.\n* `terminate`: Terminate the current task and report its completion status.", "enum": ["key", "click", "long_press", "swipe", "type", "system_button", "open", "wait", "terminate"], "type": "string"}, "coordinate": {"description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates to move the mouse to. Required only by `action=click`, `action=long_press`, and `action=swipe`.", "type": "array"}, "coordinate2": {"description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates to move the mouse to. Required only by `action=swipe`.", "type": "array"}, "text": {"description": "Required only by `action=key`, `action=type`, and `action=open`.", "type": "string"}, "time": {"description": "The seconds to wait. Required only by `action=long_press` and `action=wait`.", "type": "number"}, "button": {"description": "Back means returning to the previous interface, Home means returning to the desktop, Menu means opening the application background menu, and Enter means pressing the enter. Required only by `action=system_button`", "enum": ["Back", "Home", "Menu", "Enter"], "type": "string"}, "status": {"description": "The status of the task. Required only by `action=terminate`.", "type": "string", "enum": ["success", "failure"]}}, "required": ["action"], "type": "object"}, "args_format": "Format the arguments as a JSON object."}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>"""

QWEN_COMPUTER_1288x728 = r"""You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name_for_human": "computer_use", "name": "computer_use", "description": "Use a mouse and keyboard to interact with a computer, and take screenshots.\n* This is an interface to a desktop GUI. You do not have access to a terminal or applications menu. You must click on desktop icons to start applications.\n* Some applications may take time to start or process actions, so you may need to wait and take successive screenshots to see the results of your actions. E.g. if you click on Firefox and a window doesn't open, try wait and taking another screenshot.\n* The screen's resolution is 1288x728.\n* Whenever you intend to move the cursor to click on an element like an icon, you should consult a screenshot to determine the coordinates of the element before moving the cursor.\n* If you tried clicking on a program or link but it failed to load, even after waiting, try adjusting your cursor position so that the tip of the cursor visually falls on the element that you want to click.\n* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. Don't click boxes on their edges unless asked.", "parameters": {"properties": {"action": {"description": "The action to perform. The available actions are:\n* `key`: Performs key down presses on the arguments passed in order, then performs key releases in reverse order.\n* `type`: Type a string of text on the keyboard.\n* `mouse_move`: Move the cursor to a specified (x, y) pixel coordinate on the screen.\n* `left_click`: Click the left mouse button.\n* `left_click_drag`: Click and drag the cursor to a specified (x, y) pixel coordinate on the screen.\n* `right_click`: Click the right mouse button.\n* `middle_click`: Click the middle mouse button.\n* `double_click`: Double-click the left mouse button.\n* `scroll`: Performs a scroll of the mouse scroll wheel.\n* `wait`: Wait specified seconds for the change to happen.\n* `terminate`: Terminate the current task and report its completion status.", "enum": ["key", "type", "mouse_move", "left_click", "left_click_drag", "right_click", "middle_click", "double_click", "scroll", "wait", "terminate"], "type": "string"}, "keys": {"description": "Required only by `action=key`.", "type": "array"}, "text": {"description": "Required only by `action=type`.", "type": "string"}, "coordinate": {"description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates to move the mouse to. Required only by `action=mouse_move` and `action=left_click_drag`.", "type": "array"}, "pixels": {"description": "The amount of scrolling to perform. Positive values scroll up, negative values scroll down. Required only by `action=scroll`.", "type": "number"}, "time": {"description": "The seconds to wait. Required only by `action=wait`.", "type": "number"}, "status": {"description": "The status of the task. Required only by `action=terminate`.", "type": "string", "enum": ["success", "failure"]}}, "required": ["action"], "type": "object"}, "args_format": "Format the arguments as a JSON object."}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>"""

INSTRUCTION = "Open the settings and turn on dark mode."
SCREEN = (1280, 720)  # smart-resized to 1288x728


def _offered(prompt: str) -> list[str]:
    """The action names a UI-TARS prompt's "## Action Space" section lists."""
    space = prompt.split("## Action Space", 1)[1].split("## Note", 1)[0]
    return re.findall(r"^(\w+)\(", space, re.M)


def _qwen_actions(system: str) -> list[str]:
    """The action enum of the one tool in a Qwen system text's <tools> block."""
    (line,) = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    return list(json.loads(line)["function"]["parameters"]["properties"]["action"]["enum"])


# --- the published texts, byte for byte ------------------------------------------------------


@pytest.mark.parametrize("platform", ["desktop", "browser"])
def test_uitars_computer_prompt_is_the_published_text(platform):
    prompt = family_prompt("uitars-1.5", platform=platform, instruction=INSTRUCTION, screen=SCREEN)
    assert prompt == UITARS_COMPUTER_ENGLISH


def test_uitars_mobile_prompt_is_the_published_text():
    prompt = family_prompt(
        "uitars-1.5",
        platform="mobile",
        instruction="打开设置，开启深色模式",
        screen=(1080, 2400),
        language="Chinese",
    )
    assert prompt == UITARS_MOBILE_CHINESE


def test_qwen_computer_use_system_is_the_published_text():
    prompt = family_prompt("qwen2.5-vl", platform="desktop", instruction=INSTRUCTION, screen=SCREEN)
    assert prompt == QWEN_COMPUTER_1288x728


def test_qwen_mobile_use_system_is_the_text_the_cookbook_prints():
    # The notebook's screenshot is 1080x2400; its processor resized it to 1092x2408, the size it wrote.
    prompt = family_prompt("qwen2.5-vl", platform="mobile", instruction=INSTRUCTION, screen=(1080, 2400))
    assert prompt == QWEN_MOBILE_1092x2408


@pytest.mark.parametrize(
    ("coords", "size"),
    [
        ("smart_resize", "1932x1092"),
        ("smart_resize:3136:1003520", "1316x728"),  # Qwen2.5-VL's processor limits: fewer pixels
        ("relative", "1000x1000"),
        ("absolute", "1920x1080"),
    ],
)
def test_qwen_resolution_is_the_screenshot_in_the_policys_coordinate_space(coords, size):
    prompt = family_prompt(
        "qwen2.5-vl", platform="desktop", instruction=INSTRUCTION, screen=(1920, 1080), coords=coords
    )
    assert f"* The screen's resolution is {size}.\\n" in prompt
    assert prompt == QWEN_COMPUTER_1288x728.replace("1288x728", size)


# --- where each family puts its prompt -------------------------------------------------------


def test_the_platform_family_is_the_platforms_system_prompt_and_turns():
    obs = FakeEnv().observe()
    messages = family_messages(
        "platform", platform="browser", instruction=INSTRUCTION, observation=obs, episodic="Notes"
    )
    assert messages == build_messages(
        system=system_prompt("browser"),
        instruction=INSTRUCTION,
        observation=obs,
        history=[],
        episodic="Notes",
    )
    assert FAMILIES["platform"].output_format == "uitars"


def test_qwen_puts_its_prompt_in_the_system_message_before_the_platforms_turns():
    obs = FakeEnv().observe()
    messages = family_messages("qwen2.5-vl", platform="desktop", instruction=INSTRUCTION, observation=obs)
    assert messages[0] == {"role": "system", "content": QWEN_COMPUTER_1288x728}
    rest = build_messages(system="", instruction=INSTRUCTION, observation=obs, history=[])[1:]
    assert messages[1:] == rest


class _UITars(TextPolicy):
    prompt = "uitars-1.5"
    coords = "smart_resize"


def test_uitars_puts_its_prompt_in_the_first_user_turn_and_earlier_responses_as_assistant_turns():
    click = "Thought: the switch\nAction: click(start_box='<|box_start|>(10,10)<|box_end|>')"
    policy = _UITars([click, click, click])
    env = FakeEnv()
    outcome = run_episode(
        env,
        policy,
        replace(prepared(), instruction=INSTRUCTION),
        config=AgentConfig(history_images=2),
        score=False,
    )
    assert outcome.stop_reason == "finished" and len(env.acted) == 3
    first, last = policy.inputs[0].messages, policy.inputs[3].messages
    assert [m["role"] for m in first] == ["user", "user"]  # no system message: the template writes its own
    assert first[0] == {"role": "user", "content": UITARS_COMPUTER_ENGLISH}
    # Every earlier response stays; only the last two turns keep their screenshots.
    assert [m["role"] for m in last] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert [m["content"] for m in last if m["role"] == "assistant"] == [click] * 3
    images = [m for m in last[1:] if m["role"] == "user"]
    assert all(len(m["content"]) == 1 and m["content"][0]["type"] == "image_url" for m in images)


class _Qwen(TextPolicy):
    prompt = "qwen2.5-vl"
    output_format = "tool_calls"
    coords = "smart_resize"


def test_a_qwen_policy_sees_the_tool_and_its_calls_act():
    call = '<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [644, 364]}}\n</tool_call>'
    done = '<tool_call>\n{"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}}\n</tool_call>'
    policy = _Qwen([call, done])
    env = FakeEnv()
    outcome = run_episode(env, policy, prepared(), score=False)
    assert outcome.stop_reason == "finished"
    assert policy.inputs[0].messages[0] == {"role": "system", "content": QWEN_COMPUTER_1288x728}
    assert [(a.kind, a.x, a.y) for a in env.acted] == [("click", 640, 360)]


TOOLS = ({"server": "records", "name": "lookup", "description": "", "input_schema": {}},)


@pytest.mark.parametrize("family", ["uitars-1.5", "qwen2.5-vl"])
def test_a_published_prompt_refuses_mcp_tools_before_the_episode_starts(family):
    with pytest.raises(
        PromptError, match=f"prompt '{family}' has no place for the sandbox's MCP tools \\(servers records\\)"
    ):
        check_family(family, platform="desktop", tools=TOOLS)
    policy = _Qwen([]) if family == "qwen2.5-vl" else _UITars([])
    with pytest.raises(PolicyError, match="use prompt 'platform' for tasks with MCP servers"):
        run_episode(FakeEnv(), policy, replace(prepared(), tools=TOOLS), score=False)
    assert policy.inputs == []  # refused before the policy was asked anything
    assert check_family("platform", platform="desktop", tools=TOOLS).mcp_tools


# --- every action a published prompt offers parses with its family's parser -----------------

BOX, BOX2 = "start_box='<|box_start|>(100,200)<|box_end|>'", "end_box='<|box_start|>(300,400)<|box_end|>'"
UITARS_CALLS = {
    "click": f"click({BOX})",
    "left_double": f"left_double({BOX})",
    "right_single": f"right_single({BOX})",
    "drag": f"drag({BOX}, {BOX2})",
    "hotkey": "hotkey(key='ctrl c')",
    "type": "type(content='dark mode\\n')",
    "scroll": f"scroll({BOX}, direction='down')",
    "wait": "wait()",
    "finished": "finished(content='It is on.')",
    "long_press": f"long_press({BOX})",
    "open_app": "open_app(app_name='Settings')",
    "press_home": "press_home()",
    "press_back": "press_back()",
}
UITARS_OFFERED = [
    *((platform, name) for platform in ("desktop", "browser") for name in _offered(UITARS_COMPUTER_ENGLISH)),
    *(("mobile", name) for name in _offered(UITARS_MOBILE_CHINESE)),
]


def test_the_uitars_examples_cover_every_offered_action():
    assert {name for _, name in UITARS_OFFERED} == set(UITARS_CALLS)


@pytest.mark.parametrize(("platform", "name"), UITARS_OFFERED)
def test_every_uitars_action_parses(platform, name):
    text = f"Thought: go\nAction: {UITARS_CALLS[name]}"
    parsed = parse_output(text, fmt="uitars", screen=SCREEN, coords="smart_resize", platform=platform)
    assert [a.kind for a in parsed.actions] == [name]


# Each action as the published parameters describe it: a click's coordinate is "required only by"
# mouse_move and left_click_drag, so clicks and drags act where the pointer is (the agent passes
# where the sandbox's pointer is: `sandbox_pointer`).
POINTER = (100, 100)
QWEN_CALLS: dict[tuple[str, str], tuple[dict[str, object], str]] = {
    ("computer_use", "key"): ({"keys": ["ctrl", "c"]}, "hotkey"),
    ("computer_use", "type"): ({"text": "dark mode"}, "type"),
    ("computer_use", "mouse_move"): ({"coordinate": [644, 364]}, "hover"),
    ("computer_use", "left_click"): ({}, "click"),
    ("computer_use", "left_click_drag"): ({"coordinate": [644, 364]}, "drag"),
    ("computer_use", "right_click"): ({}, "right_single"),
    ("computer_use", "middle_click"): ({}, "middle_single"),
    ("computer_use", "double_click"): ({}, "left_double"),
    ("computer_use", "scroll"): ({"pixels": -3}, "scroll"),
    ("computer_use", "wait"): ({"time": 2}, "wait"),
    ("computer_use", "terminate"): ({"status": "success"}, "finished"),
    ("mobile_use", "key"): ({"text": "volume_up"}, "press"),
    ("mobile_use", "click"): ({"coordinate": [546, 1204]}, "click"),
    ("mobile_use", "long_press"): ({"coordinate": [546, 1204], "time": 2}, "long_press"),
    ("mobile_use", "swipe"): ({"coordinate": [546, 1800], "coordinate2": [546, 600]}, "drag"),
    ("mobile_use", "type"): ({"text": "dark mode"}, "type"),
    ("mobile_use", "system_button"): ({"button": "Back"}, "press_back"),
    ("mobile_use", "open"): ({"text": "Settings"}, "open_app"),
    ("mobile_use", "wait"): ({"time": 2}, "wait"),
    ("mobile_use", "terminate"): ({"status": "failure"}, "finished"),
}
QWEN_OFFERED = [("computer_use", a) for a in _qwen_actions(QWEN_COMPUTER_1288x728)] + [
    ("mobile_use", a) for a in _qwen_actions(QWEN_MOBILE_1092x2408)
]


def _tool_call(tool: str, arguments: dict[str, object]) -> str:
    return "<tool_call>\n" + json.dumps({"name": tool, "arguments": arguments}) + "\n</tool_call>"


def test_the_qwen_examples_cover_every_offered_action():
    assert set(QWEN_OFFERED) == set(QWEN_CALLS)
    assert qwen_tool("computer_use", width=1, height=1)["parameters"]["properties"]["action"]["enum"] == [
        a for t, a in QWEN_OFFERED if t == "computer_use"
    ]


@pytest.mark.parametrize(
    ("tool", "action"),
    QWEN_OFFERED,
)
def test_every_qwen_action_parses(tool, action):
    arguments, kind = QWEN_CALLS[(tool, action)]
    platform, screen = ("mobile", (1080, 2400)) if tool == "mobile_use" else ("desktop", SCREEN)
    text = _tool_call(tool, {"action": action, **arguments})
    parsed = parse_output(
        text, fmt="tool_calls", screen=screen, coords="smart_resize", platform=platform, pointer=POINTER
    )
    assert [a.kind for a in parsed.actions] == [kind]


@pytest.mark.parametrize(
    ("button", "kind"),
    [
        ("Home", "press_home"),
        ("Enter", "type"),
        ("Menu", "press"),
    ],
)
def test_every_qwen_system_button_parses(button, kind):
    text = _tool_call("mobile_use", {"action": "system_button", "button": button})
    parsed = parse_output(text, fmt="tool_calls", screen=(1080, 2400), platform="mobile")
    assert [a.kind for a in parsed.actions] == [kind]


# --- configuration: refused when the policy is made ------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "output_format", "resolved"),
    [
        (None, None, ("platform", "uitars")),
        (None, "json", ("platform", "json")),  # as before families: the platform prompt, any format
        ("platform", None, ("platform", "uitars")),
        ("uitars-1.5", None, ("uitars-1.5", "uitars")),
        ("qwen2.5-vl", None, ("qwen2.5-vl", "tool_calls")),
        ("qwen2.5-vl", "tool_calls", ("qwen2.5-vl", "tool_calls")),
    ],
)
def test_check_prompt_resolves_the_family_and_its_format(prompt, output_format, resolved):
    assert check_prompt(prompt, output_format) == resolved


@pytest.mark.parametrize(
    ("prompt", "output_format", "message"),
    [
        (
            "qwen2.5-vl",
            "uitars",
            "prompt 'qwen2.5-vl' asks for output_format 'tool_calls', but output_format is 'uitars'",
        ),
        (
            "uitars-1.5",
            "json",
            "prompt 'uitars-1.5' asks for output_format 'uitars', but output_format is 'json'",
        ),
        (
            "platform",
            "tool_calls",
            "prompt 'platform' asks for output_format 'uitars', but output_format is 'tool_calls'",
        ),
        (
            "qwen3-vl",
            None,
            "prompt: unknown prompt family 'qwen3-vl'; valid: platform, uitars-1.5, qwen2.5-vl",
        ),
        (None, "yaml", "output_format: unknown format 'yaml'; valid: uitars, json, pyautogui"),
    ],
)
def test_check_prompt_refuses_a_mismatch_naming_both(prompt, output_format, message):
    with pytest.raises(PromptError, match=re.escape(message)):
        check_prompt(prompt, output_format)


def test_an_openai_policy_with_a_mismatched_prompt_is_refused_when_made():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "openai policy: prompt 'uitars-1.5' asks for output_format 'uitars', but output_format is 'tool_calls'"
        ),
    ):
        OpenAIPolicy(base_url="http://h/v1", model="m", prompt="uitars-1.5", output_format="tool_calls")
    with pytest.raises(PolicyError, match="unknown prompt family"):
        make_policy("openai", base_url="http://h/v1", model="m", prompt="uitars-2")
    policy = make_policy("openai", base_url="http://h/v1", model="m", prompt="qwen2.5-vl")
    assert (policy.prompt, policy.output_format) == ("qwen2.5-vl", "tool_calls")
    plain = make_policy("openai", base_url="http://h/v1", model="m", output_format="json")
    assert (plain.prompt, plain.output_format) == ("platform", "json")


def test_a_local_policy_with_a_mismatched_prompt_is_refused_when_made(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(
        PolicyError,
        match=re.escape(
            "local policy: prompt 'qwen2.5-vl' asks for output_format 'tool_calls', but output_format is 'json'"
        ),
    ):
        LocalPolicy(model_path=tmp_path, prompt="qwen2.5-vl", output_format="json")
    policy = LocalPolicy(model_path=tmp_path, prompt="uitars-1.5")
    assert (policy.prompt, policy.output_format) == ("uitars-1.5", "uitars")


def test_the_published_templates_are_kept_as_their_authors_wrote_them():
    # The two details most easily lost in a copy: MOBILE_USE's first line ends in a space and has no
    # blank line after it; COMPUTER_USE's type() line ends in a space.
    assert MOBILE_USE.startswith(
        "You are a GUI agent. You are given a task and your action history, with screenshots. "
        "You need to perform the next action to complete the task. \n## Output Format\n"
    )
    assert "use \\n at the end of content. \nscroll(" in COMPUTER_USE
    assert "{language}" in COMPUTER_USE and "{instruction}" in COMPUTER_USE


def test_an_endpoint_without_a_checkpoint_clicks_in_its_familys_space_unless_told():
    from agent_core.policies.openai import OpenAIPolicy

    qwen = OpenAIPolicy(base_url="http://127.0.0.1:9/v1", model="m", prompt="qwen2.5-vl")
    assert qwen.coords == "smart_resize:3136:12845056"  # Qwen2.5-VL's processor limits
    assert (
        OpenAIPolicy(base_url="http://127.0.0.1:9/v1", model="m", prompt="uitars-1.5").coords
        == "smart_resize"
    )
    told = OpenAIPolicy(base_url="http://127.0.0.1:9/v1", model="m", prompt="qwen2.5-vl", coords="relative")
    assert told.coords == "relative"
