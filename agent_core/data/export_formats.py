"""Dataset record formats built from trajectory views: SFT chat, CT interleaved, AgentNet-style.

Records are plain dicts ready for JSON or Parquet; each names its images by paths relative to the
export folder (``images/<basename of the storage name>``), which `agent_core.data.export` copies there.
Every content part carries both "text" and "image" (one of them null) so JSON and Parquet readers
infer the same schema; `arrow_schema` gives the Parquet schema of each kind explicitly.

SFT (one record per target step; the chat UI-TARS / Qwen-VL fine-tuning reads): system prompt, the
instruction, then per step up to the target a user turn with its screenshot (only the last
``last_n`` steps keep theirs) and an assistant turn ``Thought: … Action: …`` whose coordinates are in
the ``coords`` space. Targets use the reviewer's correction where there is one; steps that did not
parse, or that a reviewer marked "wrong" without correcting, are never targets (nor is a step whose
action has coordinates but whose screen size is unknown). Earlier steps are
written as they happened (the screens that follow show their effect), with a corrected thought
applied only where the action itself was not corrected. That chat is written as it is here (layout
"chat") or in the form TRL, LLaMA-Factory or ms-swift reads (`agent_core.data.sft_layouts`).

CT (one record per episode): the instruction, then per step its screenshot and what the actor said
and did (or the output that did not parse and why, and any reviewer label or correction), then the
outcome (reward, final answer, review).

AgentNet (one record per episode, after OpenCUA's AgentNet JSONL): ``task_id``, ``instruction``,
``task_completed`` and ``traj`` of ``{index, image, value: {observation, thought, action, code,
last_step_correct, last_step_redundant, reflection}}`` with ``code`` in pyautogui with 0–1
coordinates, ``computer.wait(...)`` and ``computer.terminate(status=..., answer=...)``. Differences:
``task_id`` is ``e<episode id>`` (the task slug is in ``task``); ``task_completed`` comes from the
checker's reward (null with no checker); there are no LLM scores (alignment_score, efficiency_score,
task_difficulty, natural_language_task, actual_task, reason) and ``observation`` and ``reflection``
are empty; ``action`` is the UI-TARS action text in screen pixels, not a sentence; the step flags
come from reviewer labels ("wrong" → not correct, "redundant" → redundant; a step that did not parse
is not correct); a step whose action pyautogui cannot express (call_user, mobile, SDK actions) or
that did not parse has ``code`` "". Extra fields: episode_id, task, source, policy_version, platform,
reward.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import Any

from agent_core import actions as A
from agent_core.actions.coords import COORD_SPACES, is_space
from agent_core.actions.grammar import format_action, format_response
from agent_core.actions.pyautogui_code import format_pyautogui
from agent_core.flywheel import StepView, TrajectoryView
from agent_core.prompts import system_prompt
from agent_core.tasks.runner import declares_infeasible
from agent_core.thoughts import is_placeholder_thought, learnable_thought

IMAGES_DIR = "images"
SFT_LAYOUTS: tuple[str, ...] = ("chat", "trl", "llamafactory", "swift")
"""How SFT records are written: this platform's chat, or the form one outside stack reads (sft_layouts)."""
# Task platforms name the sandbox; the grammar and prompts name the action space (as agent.py maps).
_ACTION_PLATFORM = {"android": "mobile"}
# format_response needs a screen for actions without coordinates too; any valid size writes the same.
_ANY_SCREEN = (1000, 1000)


class ExportError(Exception):
    """An export cannot go on; the message says what (and which episode, step or file)."""


@dataclass(frozen=True)
class ExportOptions:
    """How records are built and written."""

    last_n: int = 5
    """SFT: steps (the target included) whose screenshot is kept as an image; older ones are text only."""
    coords: str = "smart_resize"
    """Coordinate space of actions in SFT/CT text (one of agent_core.actions.coords.COORD_SPACES)."""
    shard_records: int = 1000
    """Records per shard file."""
    row_group_records: int = 256
    """Parquet row-group size, which is also the most records buffered in memory."""
    success_threshold: float = 1.0
    """Reward at or above which the checker counts the task done (CT outcome, AgentNet task_completed)."""
    layout: str = "chat"
    """SFT: how each record is laid out, one of SFT_LAYOUTS (see agent_core.data.sft_layouts)."""

    def check(self) -> None:
        """Raise ExportError for an option out of range."""
        if not is_space(self.coords):
            raise ExportError(
                f"unknown coords {self.coords!r}; valid: {', '.join(COORD_SPACES)}, smart_resize:<min>:<max>"
            )
        if self.layout not in SFT_LAYOUTS:
            raise ExportError(f"unknown layout {self.layout!r}; valid: {', '.join(SFT_LAYOUTS)}")
        for name, low in (("last_n", 0), ("shard_records", 1), ("row_group_records", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ExportError(f"{name} must be an integer >= {low}, got {value!r}")

    def to_json(self) -> dict[str, Any]:
        """The options as JSON."""
        return asdict(self)


def image_path(storage_name: str) -> str:
    """Where a screenshot lies in an export, relative to its folder."""
    name = PurePosixPath(storage_name).name
    if name in ("", ".", ".."):
        raise ExportError(f"screenshot name {storage_name!r} has no file name")
    return f"{IMAGES_DIR}/{name}"


def _part(kind: str, value: str) -> dict[str, Any]:
    return {
        "type": kind,
        "text": value if kind == "text" else None,
        "image": value if kind == "image" else None,
    }


def _message(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "content": list(parts)}


def _where(traj: TrajectoryView, step: StepView) -> str:
    return f"episode {traj.episode_id} step {step.index}"


def _build(traj: TrajectoryView, step: StepView, data: object, what: str) -> A.Action:
    try:
        if not isinstance(data, dict):
            raise A.ActionError(f"expected an object, got {type(data).__name__}")
        return A.action_from_dict(data)
    except A.ActionError as exc:
        raise ExportError(f"{_where(traj, step)}: the {what} action is malformed: {exc}") from None


def recorded_action(traj: TrajectoryView, step: StepView) -> A.Action | None:
    """The action the step really took (None when its output did not parse)."""
    return _build(traj, step, dict(step.action or {}), "recorded") if step.parsed else None


def corrected_action(traj: TrajectoryView, step: StepView) -> A.Action | None:
    """The reviewer's corrected action, if any."""
    if step.corrected_action is None:
        return None
    return _build(traj, step, dict(step.corrected_action), "corrected")


def _response(thought: str, action: A.Action, screen: tuple[int, int] | None, coords: str) -> str | None:
    if screen is None:
        if isinstance(action, A.PointerAction | A.Drag):
            return None  # coordinates cannot be mapped without the screen size
        screen = _ANY_SCREEN
    try:
        return format_response(thought=thought, actions=[action], screen=screen, coords=coords)
    except ValueError:  # a thought with a line that reads as a section header
        return None


def target_text(traj: TrajectoryView, step: StepView, coords: str) -> str | None:
    """The assistant text a step teaches (correction applied), or None when it is no target."""
    corrected = corrected_action(traj, step)
    action = corrected or recorded_action(traj, step)
    if action is None:
        return None
    if step.label == "wrong" and corrected is None and not learnable_thought(step.corrected_thought):
        return None
    # A placeholder thought ("oracle step 3") is never taught: the target keeps only its action.
    thought = learnable_thought(step.corrected_thought) or learnable_thought(step.thought)
    return _response(thought, action, step.screen, coords)


def history_text(traj: TrajectoryView, step: StepView, coords: str) -> str:
    """The assistant text of a step as it happened, for the history of later steps."""
    action = recorded_action(traj, step)
    if action is None:
        return step.raw_output.strip() or step.action_text or "(no valid action)"
    corrected = learnable_thought(step.corrected_thought) if step.corrected_action is None else ""
    thought = corrected or learnable_thought(step.thought)
    text = _response(thought, action, step.screen, coords) or _response("", action, step.screen, coords)
    return text or (f"Thought: {thought}\n" if thought else "") + f"Action: {step.action_text}"


def placeholder_thoughts(traj: TrajectoryView) -> int:
    """How many of the trajectory's steps recorded a thought that is a placeholder (left out of every
    record: "oracle step 3", "random", "n/a"; an empty one is no thought, not counted)."""
    return sum(1 for s in traj.steps if s.thought.strip() and is_placeholder_thought(s.thought))


def _platform(traj: TrajectoryView) -> str:
    return _ACTION_PLATFORM.get(traj.platform, traj.platform)


def _system(traj: TrajectoryView, coords: str) -> str:
    try:
        return system_prompt(_platform(traj), coords=coords, tools=traj.tools)
    except ValueError as exc:
        raise ExportError(f"episode {traj.episode_id}: {exc}") from None


def _reward(traj: TrajectoryView) -> float | None:
    return float(traj.reward) if traj.reward is not None and math.isfinite(traj.reward) else None


# --- SFT ---------------------------------------------------------------------------------------


def sft_records(traj: TrajectoryView, *, options: ExportOptions) -> Iterator[dict[str, Any]]:
    """One multi-turn chat record per target step of the trajectory."""
    steps = traj.steps
    targets = [target_text(traj, s, options.coords) for s in steps]
    if not any(t is not None for t in targets):
        return
    system = _system(traj, options.coords)
    history = [history_text(traj, s, options.coords) for s in steps]
    for t, target in enumerate(targets):
        if target is None:
            continue
        messages = [
            _message("system", _part("text", system)),
            _message("user", _part("text", traj.instruction)),
        ]
        images: list[str] = []
        for k in range(t + 1):
            # The previous action's SDK result is the text the model read beside this screen.
            if k and steps[k - 1].result:
                messages.append(_message("user", _part("text", steps[k - 1].result)))
            if steps[k].screenshot and t - k < options.last_n:
                images.append(image_path(steps[k].screenshot))
                messages.append(_message("user", _part("image", images[-1])))
            messages.append(_message("assistant", _part("text", target if k == t else history[k])))
        yield {
            "id": f"e{traj.episode_id}-s{steps[t].index}",
            "episode_id": traj.episode_id,
            "step_index": steps[t].index,
            "task": traj.task,
            "source": traj.source,
            "policy_version": traj.policy_version,
            "messages": messages,
            "images": images,
        }


# --- CT ----------------------------------------------------------------------------------------


def _ct_step(traj: TrajectoryView, step: StepView, coords: str) -> str:
    lines = [f"Step {step.index} ({step.actor}):"]
    if step.parsed:
        lines.append(history_text(traj, step, coords))
        if step.result:
            lines.append(step.result)
    else:
        why = step.invalid_reason or "no action"
        lines.append(f"Output that did not parse ({why}):\n{step.raw_output or step.action_text}")
    if step.label:
        lines.append(f"Reviewer label: {step.label}")
    if step.corrected_action is not None or step.corrected_thought:
        fixed = target_text(traj, step, coords)
        if fixed:
            lines.append(f"Reviewer's correction:\n{fixed}")
    return "\n".join(lines)


def _outcome(traj: TrajectoryView, threshold: float) -> str:
    reward = _reward(traj)
    if reward is None:
        lines = ["Outcome: no checker verdict"]
    else:
        lines = [f"Outcome: reward {reward:g} ({'success' if reward >= threshold else 'failure'})"]
    if traj.final_answer:
        lines.append(f"Final answer: {traj.final_answer}")
    if traj.review:
        lines.append(f"Review: {traj.review}")
    return "\n".join(lines)


def ct_records(traj: TrajectoryView, *, options: ExportOptions) -> Iterator[dict[str, Any]]:
    """One interleaved text-and-image record for the whole trajectory."""
    content = [_part("text", f"Task: {traj.instruction}")]
    images: list[str] = []
    for step in traj.steps:
        if step.screenshot:
            images.append(image_path(step.screenshot))
            content.append(_part("image", images[-1]))
        content.append(_part("text", _ct_step(traj, step, options.coords)))
    content.append(_part("text", _outcome(traj, options.success_threshold)))
    yield {
        "id": f"e{traj.episode_id}",
        "episode_id": traj.episode_id,
        "task": traj.task,
        "source": traj.source,
        "policy_version": traj.policy_version,
        "reward": _reward(traj),
        "v": traj.verdict.v if traj.verdict is not None else None,
        "content": content,
        "images": images,
    }


# --- AgentNet ----------------------------------------------------------------------------------


def agentnet_code(action: A.Action, screen: tuple[int, int] | None) -> str:
    """AgentNet's code for an action: pyautogui with 0–1 coordinates or a computer.* call; "" if none."""
    if isinstance(action, A.Finished):
        status = "failure" if declares_infeasible(action.content) else "success"
        answer = f", answer={action.content!r}" if action.content and status == "success" else ""
        return f"computer.terminate(status={status!r}{answer})"
    if isinstance(action, A.Wait):
        return f"computer.wait(seconds={float(action.seconds)!r})"
    if screen is None:
        if isinstance(action, A.PointerAction | A.Drag):
            return ""  # fractions of an unknown screen cannot be computed
        screen = _ANY_SCREEN
    try:
        return format_pyautogui(action, screen=screen, normalized=True)
    except ValueError:  # no pyautogui form: call_user, mobile and SDK actions
        return ""


def _pixel_text(step: StepView, action: A.Action | None) -> str:
    if action is None:
        return ""
    if step.action_text:
        return step.action_text
    if step.screen is None and isinstance(action, A.PointerAction | A.Drag):
        return ""  # absolute formatting clamps points onto the screen it is given
    return format_action(action, screen=step.screen or _ANY_SCREEN, coords="absolute")


def _agentnet_step(traj: TrajectoryView, step: StepView) -> dict[str, Any]:
    action = recorded_action(traj, step)
    return {
        "index": step.index,
        "image": image_path(step.screenshot) if step.screenshot else None,
        "value": {
            "observation": "",
            "thought": learnable_thought(step.thought),
            "action": _pixel_text(step, action),
            "code": agentnet_code(action, step.screen) if action is not None else "",
            "last_step_correct": action is not None and step.label != "wrong",
            "last_step_redundant": step.label == "redundant",
            "reflection": "",
        },
    }


def agentnet_records(traj: TrajectoryView, *, options: ExportOptions) -> Iterator[dict[str, Any]]:
    """One AgentNet-style record for the whole trajectory."""
    reward = _reward(traj)
    yield {
        "task_id": f"e{traj.episode_id}",
        "episode_id": traj.episode_id,
        "task": traj.task,
        "instruction": traj.instruction,
        "source": traj.source,
        "policy_version": traj.policy_version,
        "platform": traj.platform,
        "reward": reward,
        "task_completed": None if reward is None else reward >= options.success_threshold,
        "traj": [_agentnet_step(traj, s) for s in traj.steps],
    }


def record_images(kind: str, record: dict[str, Any]) -> list[str]:
    """Image paths a record of `kind` refers to, in order (repeats included)."""
    if kind == "agentnet":
        return [s["image"] for s in record["traj"] if s["image"]]
    return list(record["images"])


# --- Parquet schemas ---------------------------------------------------------------------------


def arrow_schema(kind: str) -> Any:
    """The explicit pyarrow schema of records of `kind` ("sft", "ct" or "agentnet")."""
    import pyarrow as pa  # type: ignore[import-untyped]

    s, i64 = pa.string(), pa.int64()
    part = pa.struct([("type", s), ("text", s), ("image", s)])
    common = [("task", s), ("source", s), ("policy_version", s)]
    if kind == "sft":
        message = pa.struct([("role", s), ("content", pa.list_(part))])
        fields = [("id", s), ("episode_id", i64), ("step_index", i64), *common]
        return pa.schema([*fields, ("messages", pa.list_(message)), ("images", pa.list_(s))])
    if kind == "ct":
        fields = [("id", s), ("episode_id", i64), *common, ("reward", pa.float64()), ("v", i64)]
        return pa.schema([*fields, ("content", pa.list_(part)), ("images", pa.list_(s))])
    if kind == "agentnet":
        value = pa.struct(
            [
                ("observation", s),
                ("thought", s),
                ("action", s),
                ("code", s),
                ("last_step_correct", pa.bool_()),
                ("last_step_redundant", pa.bool_()),
                ("reflection", s),
            ]
        )
        step = pa.struct([("index", i64), ("image", s), ("value", value)])
        return pa.schema(
            [
                ("task_id", s),
                ("episode_id", i64),
                ("task", s),
                ("instruction", s),
                ("source", s),
                ("policy_version", s),
                ("platform", s),
                ("reward", pa.float64()),
                ("task_completed", pa.bool_()),
                ("traj", pa.list_(step)),
            ]
        )
    raise ExportError(f"unknown kind {kind!r}; valid: sft, ct, agentnet")
