"""Each model family's own prompt, as its authors publish it, and where in the conversation it goes.

A policy's `prompt` setting names one of FAMILIES; the agent loop builds each turn's messages with
`family_messages`. A family's prompt asks the model to answer in one `output_format`: `check_prompt`
refuses a policy whose own output_format disagrees when the policy is made, never mid-episode.

* ``platform`` (the default): `agent_core.prompts.system_prompt`, the platform's own action space with
  the sandbox's MCP tools, as the system message; then the platform's turns (`memory.build_messages`).
  Output format uitars.
* ``uitars-1.5``: UI-TARS-1.5's COMPUTER_USE (desktop, browser) or MOBILE_USE (mobile) as the first
  user turn, with no system message; then UI-TARS' own turns. Output format uitars.
* ``qwen2.5-vl``: "You are a helpful assistant." and qwen-agent's function-call block offering Qwen's
  computer_use (desktop, browser) or mobile_use (mobile) tool, as the system message; then the
  platform's turns. Output format tool_calls.

Where each text comes from (copied byte for byte; tests/agent_core/test_prompt_families.py holds
the published texts again and compares):

* UI-TARS-1.5: bytedance/UI-TARS, codes/prompts.py at commit 6b315cc0c3ae8ff3b5412a25aa3ebac1bae32f58
  (2025-05-06), the templates for the open UI-TARS-1.5 weights, whose points read
  ``start_box='<|box_start|>(x1,y1)<|box_end|>'``. The README's "Prompt Usage Guide" names them; since
  commit c46cfd37 the file is codes/ui_tars/prompt.py and holds only the variants for ByteDance's
  Doubao API model (``COMPUTER_USE_DOUBAO``, points as ``<point>x1 y1</point>``), which are not the
  open model's. GROUNDING (one click, no thought) is not a family: the agent loop needs thoughts.
  How the prompt is sent (README_deploy.md, data/test_messages_single_image.json): the filled-in
  template is the text of the first *user* message and the screenshot follows in a user message of
  its own; there is no system message, so the Qwen2.5-VL chat template writes its default "You are a
  helpful assistant." system line. Earlier responses are assistant messages, the last `images` of
  them preceded by their screenshots in user messages (the shape of the UI-TARS agent code published
  for OSWorld, whose `history_n` keeps the last screenshots). `family_messages` does the same.
* Qwen2.5-VL: QwenLM/Qwen2.5-VL at commit f0af2996e843cf46aa5f778c38d6694500c2ca81,
  cookbooks/utils/agent_function_call.py (classes ComputerUse and MobileUse: description and
  parameters) and cookbooks/mobile_agent.ipynb / computer_use.ipynb, which build the system message
  with qwen-agent's ``NousFnCallPrompt().preprocess_fncall_messages(messages=[Message(role="system",
  content=[ContentItem(text="You are a helpful assistant.")])], functions=[tool.function], lang=None)``
  and a tool made with ``display_width_px`` / ``display_height_px`` = the smart-resized screenshot.
  qwen-agent: QwenLM/Qwen-Agent at commit a00999882ef4bc48f1b79c5e053eaa897924585e (2025-01-24, the
  release of the cookbook's date): FN_CALL_TEMPLATE in qwen_agent/llm/fncall_prompts/
  nous_fncall_prompt.py, each function written ``json.dumps({"type": "function", "function": f},
  ensure_ascii=False)`` and the block appended to the system text after "\n\n"; ``f`` is
  BaseTool.function of qwen_agent/tools/base.py: name_for_human, name, description, parameters,
  args_format. mobile_agent.ipynb prints the rendered system message; the text built here equals it.
  (qwen-agent since commit 8102896, 2025-03-07, leaves name_for_human and args_format out; the
  cookbook's text, the one published with the model, keeps them.)

Where this platform differs from the published usage:

* The screen size in Qwen's tool description is the extent of the policy's coordinate space
  (`coords.model_size`): the smart-resized screenshot for the smart_resize spaces (the cookbook's
  choice), 1000x1000 for relative (Qwen3-VL), the screen for absolute. It follows each screenshot.
* After Qwen's system message the conversation is the platform's own ("Task instruction" turn, older
  turns as text, the last `images` turns with their screenshots): the cookbooks publish one-screenshot
  queries only.
* Episodic notes (earlier episodes' summaries) go in a user text turn right after UI-TARS' prompt, and
  in the platform's instruction turn for Qwen; the published prompts themselves stay as they are.
* A sandbox's MCP tools have no place in the published prompts, and the tool_calls parser reads only
  computer_use / mobile_use calls: a task with MCP tools under uitars-1.5 or qwen2.5-vl raises
  PromptError when its episode starts (use the platform family there).
"""

# The published texts keep their authors' long lines (E501).
# ruff: noqa: E501
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_core.actions.coords import model_size
from agent_core.actions.formats import FORMATS
from agent_core.actions.grammar import PLATFORMS
from agent_core.data.trajectory import StepRecord
from agent_core.env import Obs
from agent_core.memory import build_messages, image_part, response_text
from agent_core.policies.base import PolicyError
from agent_core.prompts import system_prompt

DEFAULT_FAMILY = "platform"


class PromptError(PolicyError, ValueError):
    """A prompt family that cannot be used as configured (a policy's bad configuration, so a PolicyError
    to the loop's callers, and a ValueError); the message names the setting at fault."""


@dataclass(frozen=True)
class PromptFamily:
    """One model family's prompt: the output format it asks for, and where the prompt goes."""

    name: str
    output_format: str
    """The `output_format` (agent_core.actions.compat.FORMATS) the prompt asks the model to write."""
    placement: str
    """"system": the prompt is the system message; "first_user": the first user turn's text."""
    mcp_tools: bool
    """Whether it can offer a sandbox's MCP tools."""
    coords: str = "smart_resize"
    """The coordinate space the family's models click in when nothing else says (a served endpoint
    without a checkpoint here): UI-TARS-1.5's parser resizes from 78,400 pixels (bare smart_resize),
    Qwen2.5-VL's processor from 3,136 (they differ on screens under 78,400 pixels)."""


FAMILIES: dict[str, PromptFamily] = {
    "platform": PromptFamily("platform", "uitars", "system", mcp_tools=True),
    "uitars-1.5": PromptFamily("uitars-1.5", "uitars", "first_user", mcp_tools=False),
    "qwen2.5-vl": PromptFamily(
        "qwen2.5-vl", "tool_calls", "system", mcp_tools=False, coords="smart_resize:3136:12845056"
    ),
}

# --- UI-TARS-1.5 (bytedance/UI-TARS codes/prompts.py @ 6b315cc), verbatim ---------------------

COMPUTER_USE = """You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform the next action to complete the task.

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
- Use {language} in `Thought` part.
- Write a small plan and finally summarize your next action (with its target element) in one sentence in `Thought` part.

## User Instruction
{instruction}
"""  # noqa: W291

MOBILE_USE = """You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform the next action to complete the task. 
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
- Use {language} in `Thought` part.
- Write a small plan and finally summarize your next action (with its target element) in one sentence in `Thought` part.

## User Instruction
{instruction}
"""  # noqa: W291

# --- Qwen2.5-VL (QwenLM/Qwen2.5-VL cookbooks/utils/agent_function_call.py @ f0af299), verbatim ----
# The descriptions are the classes' f-strings with {self.display_width_px}x{self.display_height_px}
# written {width}x{height}.

_COMPUTER_USE_DESCRIPTION = """
Use a mouse and keyboard to interact with a computer, and take screenshots.
* This is an interface to a desktop GUI. You do not have access to a terminal or applications menu. You must click on desktop icons to start applications.
* Some applications may take time to start or process actions, so you may need to wait and take successive screenshots to see the results of your actions. E.g. if you click on Firefox and a window doesn't open, try wait and taking another screenshot.
* The screen's resolution is {width}x{height}.
* Whenever you intend to move the cursor to click on an element like an icon, you should consult a screenshot to determine the coordinates of the element before moving the cursor.
* If you tried clicking on a program or link but it failed to load, even after waiting, try adjusting your cursor position so that the tip of the cursor visually falls on the element that you want to click.
* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. Don't click boxes on their edges unless asked.
""".strip()

_COMPUTER_USE_PARAMETERS: dict[str, Any] = {
    "properties": {
        "action": {
            "description": """
The action to perform. The available actions are:
* `key`: Performs key down presses on the arguments passed in order, then performs key releases in reverse order.
* `type`: Type a string of text on the keyboard.
* `mouse_move`: Move the cursor to a specified (x, y) pixel coordinate on the screen.
* `left_click`: Click the left mouse button.
* `left_click_drag`: Click and drag the cursor to a specified (x, y) pixel coordinate on the screen.
* `right_click`: Click the right mouse button.
* `middle_click`: Click the middle mouse button.
* `double_click`: Double-click the left mouse button.
* `scroll`: Performs a scroll of the mouse scroll wheel.
* `wait`: Wait specified seconds for the change to happen.
* `terminate`: Terminate the current task and report its completion status.
""".strip(),
            "enum": [
                "key",
                "type",
                "mouse_move",
                "left_click",
                "left_click_drag",
                "right_click",
                "middle_click",
                "double_click",
                "scroll",
                "wait",
                "terminate",
            ],
            "type": "string",
        },
        "keys": {
            "description": "Required only by `action=key`.",
            "type": "array",
        },
        "text": {
            "description": "Required only by `action=type`.",
            "type": "string",
        },
        "coordinate": {
            "description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates to move the mouse to. Required only by `action=mouse_move` and `action=left_click_drag`.",
            "type": "array",
        },
        "pixels": {
            "description": "The amount of scrolling to perform. Positive values scroll up, negative values scroll down. Required only by `action=scroll`.",
            "type": "number",
        },
        "time": {
            "description": "The seconds to wait. Required only by `action=wait`.",
            "type": "number",
        },
        "status": {
            "description": "The status of the task. Required only by `action=terminate`.",
            "type": "string",
            "enum": ["success", "failure"],
        },
    },
    "required": ["action"],
    "type": "object",
}

_MOBILE_USE_DESCRIPTION = """
Use a touchscreen to interact with a mobile device, and take screenshots.
* This is an interface to a mobile device with touchscreen. You can perform actions like clicking, typing, swiping, etc.
* Some applications may take time to start or process actions, so you may need to wait and take successive screenshots to see the results of your actions.
* The screen's resolution is {width}x{height}.
* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. Don't click boxes on their edges unless asked.
""".strip()

_MOBILE_USE_PARAMETERS: dict[str, Any] = {
    "properties": {
        "action": {
            "description": """
The action to perform. The available actions are:
* `key`: Perform a key event on the mobile device.
    - This supports adb's `keyevent` syntax.
    - Examples: "volume_up", "volume_down", "power", "camera", "clear".
* `click`: Click the point on the screen with coordinate (x, y).
* `long_press`: Press the point on the screen with coordinate (x, y) for specified seconds.
* `swipe`: Swipe from the starting point with coordinate (x, y) to the end point with coordinates2 (x2, y2).
* `type`: Input the specified text into the activated input box.
* `system_button`: Press the system button.
* `open`: Open an app on the device.
* `wait`: Wait specified seconds for the change to happen.
* `terminate`: Terminate the current task and report its completion status.
""".strip(),
            "enum": [
                "key",
                "click",
                "long_press",
                "swipe",
                "type",
                "system_button",
                "open",
                "wait",
                "terminate",
            ],
            "type": "string",
        },
        "coordinate": {
            "description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates to move the mouse to. Required only by `action=click`, `action=long_press`, and `action=swipe`.",
            "type": "array",
        },
        "coordinate2": {
            "description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates to move the mouse to. Required only by `action=swipe`.",
            "type": "array",
        },
        "text": {
            "description": "Required only by `action=key`, `action=type`, and `action=open`.",
            "type": "string",
        },
        "time": {
            "description": "The seconds to wait. Required only by `action=long_press` and `action=wait`.",
            "type": "number",
        },
        "button": {
            "description": "Back means returning to the previous interface, Home means returning to the desktop, Menu means opening the application background menu, and Enter means pressing the enter. Required only by `action=system_button`",
            "enum": [
                "Back",
                "Home",
                "Menu",
                "Enter",
            ],
            "type": "string",
        },
        "status": {
            "description": "The status of the task. Required only by `action=terminate`.",
            "type": "string",
            "enum": ["success", "failure"],
        },
    },
    "required": ["action"],
    "type": "object",
}

QWEN_SYSTEM = "You are a helpful assistant."
"""The system text the cookbooks start from, before qwen-agent appends the tools."""
# qwen-agent's FN_CALL_TEMPLATE (nous_fncall_prompt.py @ a009998), verbatim.
FN_CALL_TEMPLATE = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tool_descs}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""
_QWEN_TOOLS = {
    "computer_use": (_COMPUTER_USE_DESCRIPTION, _COMPUTER_USE_PARAMETERS),
    "mobile_use": (_MOBILE_USE_DESCRIPTION, _MOBILE_USE_PARAMETERS),
}


def prompt_family(name: str) -> PromptFamily:
    """The family called `name`; PromptError listing the valid ones for any other."""
    family = FAMILIES.get(name) if isinstance(name, str) else None
    if family is None:
        raise PromptError(f"prompt: unknown prompt family {name!r}; valid: {', '.join(FAMILIES)}")
    return family


def check_prompt(prompt: str | None, output_format: str | None) -> tuple[str, str]:
    """(family, output format) of a policy configured with `prompt` and `output_format`, either of
    which may be left out (None): no prompt is the platform's, whatever the format; no format is the
    family's (uitars without a prompt). PromptError when a named family asks for another format."""
    if output_format is not None and output_format not in FORMATS:
        raise PromptError(f"output_format: unknown format {output_format!r}; valid: {', '.join(FORMATS)}")
    if prompt is None:
        return DEFAULT_FAMILY, output_format or FAMILIES[DEFAULT_FAMILY].output_format
    family = prompt_family(prompt)
    if output_format is not None and output_format != family.output_format:
        raise PromptError(
            f"prompt {family.name!r} asks for output_format {family.output_format!r}, "
            f"but output_format is {output_format!r}"
        )
    return family.name, family.output_format


def check_family(name: str, *, platform: str, tools: Sequence[Mapping[str, Any]] = ()) -> PromptFamily:
    """The family `name`, checked against an episode: its platform (desktop, browser or mobile) and the
    sandbox's MCP tools, which only the platform family can offer (PromptError otherwise)."""
    family = prompt_family(name)
    if platform not in PLATFORMS:
        raise PromptError(f"platform: unknown platform {platform!r}; valid: {', '.join(PLATFORMS)}")
    if tools and not family.mcp_tools:
        servers = sorted({str(t.get("server")) for t in tools})
        raise PromptError(
            f"prompt {family.name!r} has no place for the sandbox's MCP tools (servers "
            f"{', '.join(servers)}); use prompt {DEFAULT_FAMILY!r} for tasks with MCP servers"
        )
    return family


def qwen_tool(name: str, *, width: int, height: int) -> dict[str, Any]:
    """Qwen's computer_use or mobile_use tool as qwen-agent's BaseTool.function gives it, for a
    screenshot of width x height as the model sees it."""
    description, parameters = _QWEN_TOOLS[name]
    return {
        "name_for_human": name,
        "name": name,
        "description": description.format(width=width, height=height),
        "parameters": parameters,
        # qwen-agent writes the Chinese form only when the tool's texts hold Chinese; these do not.
        "args_format": "Format the arguments as a JSON object.",
    }


def qwen_system_text(tool: str, *, width: int, height: int) -> str:
    """The system message's text qwen-agent's NousFnCallPrompt builds from the cookbooks' messages."""
    tool_descs = json.dumps(
        {"type": "function", "function": qwen_tool(tool, width=width, height=height)}, ensure_ascii=False
    )
    return QWEN_SYSTEM + "\n\n" + FN_CALL_TEMPLATE.format(tool_descs=tool_descs)


def family_prompt(
    name: str,
    *,
    platform: str,
    instruction: str,
    screen: tuple[int, int],
    language: str = "English",
    coords: str = "smart_resize",
    tools: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The family's prompt text for an episode on `platform` (desktop, browser or mobile) with a screen
    of `screen` (width, height) pixels: the system message, or UI-TARS' first user turn."""
    family = check_family(name, platform=platform, tools=tools)
    if family.name == "uitars-1.5":
        template = MOBILE_USE if platform == "mobile" else COMPUTER_USE
        return template.format(language=language, instruction=instruction)
    if family.name == "qwen2.5-vl":
        width, height = model_size(screen=screen, space=coords)
        return qwen_system_text(
            "mobile_use" if platform == "mobile" else "computer_use", width=width, height=height
        )
    # As run_episode has always written it (its note reads coordinates as smart_resize pixels).
    return system_prompt(platform, language=language, tools=tools)


def family_messages(
    name: str,
    *,
    platform: str,
    instruction: str,
    observation: Obs,
    history: Sequence[StepRecord] = (),
    images: int = 3,
    episodic: str = "",
    language: str = "English",
    coords: str = "smart_resize",
    tools: Sequence[Mapping[str, Any]] = (),
) -> list[Mapping[str, Any]]:
    """The prompt of one turn in OpenAI chat form, as the family places its prompt: the platform's
    turns after a system message, or UI-TARS' published conversation (see the module docstring)."""
    screen = (observation.width, observation.height)
    text = family_prompt(
        name,
        platform=platform,
        instruction=instruction,
        screen=screen,
        language=language,
        coords=coords,
        tools=tools,
    )
    if FAMILIES[name].placement == "system":
        return build_messages(
            system=text,
            instruction=instruction,
            observation=observation,
            history=history,
            images=images,
            episodic=episodic,
        )
    messages: list[Mapping[str, Any]] = [{"role": "user", "content": text}]
    if episodic:
        messages.append({"role": "user", "content": [{"type": "text", "text": episodic}]})
    # One turn per response: several actions of one response share it (its first step carries it).
    turns = [s for s in history if not s.info.get("continued")]
    cut = max(0, len(turns) - max(0, images))
    for i, step in enumerate(turns):
        if i >= cut:
            messages.append({"role": "user", "content": [image_part(step.observation)]})
        messages.append({"role": "assistant", "content": response_text(step)})
    messages.append({"role": "user", "content": [image_part(observation)]})
    return messages
