"""Memory: working memory (the prompt of the current episode) and episodic memory (earlier episodes).

Working memory keeps the last N steps at full fidelity (screenshot + response) and older steps as
text only, as UI-TARS does to bound the context. What an SDK action gave back (an MCP tool's result, a
terminal's output, a file's content) is the observation text of the turn after it: the model reads it
beside the next screenshot (capped at RESULT_CHARS), and older turns keep it in their text line.
Episodic memory holds short summaries of earlier episodes of the same task family; the most relevant
ones are retrieved into the prompt.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_core.actions import Action
from agent_core.data.trajectory import EpisodeOutcome, StepRecord
from agent_core.env import Obs
from agent_core.thoughts import learnable_thought

_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class EpisodeSummary:
    """What is remembered of one finished episode."""

    task_id: str
    family: str
    instruction: str
    reward: float | None
    summary: str


def summarize_episode(instruction: str, outcome: EpisodeOutcome, *, max_actions: int = 12) -> str:
    """A few lines an agent can learn from: the outcome, the actions taken, the final answer."""
    valid = [s for s in outcome.steps if s.action is not None]
    invalid = len(outcome.steps) - len(valid)
    verdict = (
        "no reward"
        if outcome.reward is None
        else ("succeeded" if outcome.reward >= 1.0 else f"failed (reward {outcome.reward:g})")
    )
    lines = [f"Task: {instruction.strip()[:300]}", f"Outcome: {verdict} after {len(outcome.steps)} steps"]
    lines[-1] += f", stopped by {outcome.stop_reason}" + (f", {invalid} invalid" if invalid else "")
    acts = [s.action_text.strip() for s in valid if s.action_text.strip()]
    if acts:
        shown = acts[:max_actions] + (
            [f"… {len(acts) - max_actions} more"] if len(acts) > max_actions else []
        )
        lines.append("Actions: " + "; ".join(shown))
    if outcome.final_answer:
        lines.append(f"Final answer: {outcome.final_answer[:200]}")
    return "\n".join(lines)


class EpisodicMemory:
    """Summaries of earlier episodes; `retrieve` ranks the same family first, then word overlap."""

    def __init__(self, summaries: Iterable[EpisodeSummary] = ()) -> None:
        self.summaries: list[EpisodeSummary] = list(summaries)

    def add(self, summary: EpisodeSummary) -> None:
        """Remember one more episode."""
        self.summaries.append(summary)

    def retrieve(self, *, family: str, instruction: str, k: int = 3) -> list[EpisodeSummary]:
        """The `k` most relevant summaries for a new episode (successes before failures on ties)."""
        words = set(_WORD.findall(instruction.lower()))

        def score(item: tuple[int, EpisodeSummary]) -> tuple[int, float, int, int]:
            idx, s = item
            other = set(_WORD.findall(s.instruction.lower()))
            overlap = len(words & other) / (len(words | other) or 1)
            return (int(s.family == family), overlap, int((s.reward or 0) >= 1.0), idx)

        ranked = sorted(enumerate(self.summaries), key=score, reverse=True)
        return [s for _, s in ranked[:k] if s.family == family or _WORD.search(s.instruction)]


def episodic_prompt(summaries: Sequence[EpisodeSummary]) -> str:
    """The text block that puts retrieved summaries into the prompt ('' when there are none)."""
    if not summaries:
        return ""
    parts = [f"## Earlier attempt {i + 1}\n{s.summary}" for i, s in enumerate(summaries)]
    return "Notes from earlier episodes of similar tasks:\n" + "\n\n".join(parts)


def image_part(obs: Obs) -> dict[str, Any]:
    """An observation's screenshot as an OpenAI chat image part (data URL)."""
    data = base64.b64encode(obs.screenshot).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{obs.mime};base64,{data}"}}


def response_text(step: StepRecord) -> str:
    """What the actor said at a step: its raw response, or the canonical text when it gave structure."""
    if step.raw_output:
        return step.raw_output
    thought = learnable_thought(step.thought)  # a placeholder ("oracle step 3") says nothing
    return (f"Thought: {thought}\n" if thought else "") + f"Action: {step.action_text}"


def _turns(history: Sequence[StepRecord]) -> list[StepRecord]:
    # Several actions of one response share a turn: keep the first step of each response.
    return [s for s in history if not s.info.get("continued")]


RESULT_CHARS = 2000
"""Most characters of one SDK result the model reads (a longer one keeps its start, says how much more)."""


def _capped(text: str, limit: int) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def result_text(step: StepRecord, *, limit: int = RESULT_CHARS) -> str:
    """What an SDK action gave back, as the model reads it ("" for GUI input and invalid steps)."""
    return sdk_result_text(step.action, step.info.get("result"), limit=limit)


def sdk_result_text(action: Action | None, result: Any, *, limit: int = RESULT_CHARS) -> str:
    """`result` (a step's info["result"]) of `action` as the model reads it; "" where there is none."""
    if not isinstance(result, Mapping) or action is None:
        return ""
    kind = action.kind
    if kind == "mcp_call":
        server, tool = result.get("server", getattr(action, "server", "?")), result.get("tool", "?")
        error = " (error)" if result.get("is_error") else ""
        return f"Tool result of {server}.{tool}{error}:\n" + _capped(str(result.get("content", "")), limit)
    if kind == "terminal":
        flags = ", timed out" if result.get("timed_out") else ""
        out = "\n".join(str(result.get(k) or "") for k in ("stdout", "stderr") if result.get(k))
        return f"Terminal output (exit code {result.get('exit_code')}{flags}):\n" + _capped(out, limit)
    if kind == "file_read":
        content = str(result.get("content", ""))
        return f"Content of {getattr(action, 'path', '?')}:\n" + _capped(content, limit)
    if kind == "file_write":
        return f"Wrote {result.get('written', '?')} bytes to {getattr(action, 'path', '?')}."
    return ""


def _turn_results(history: Sequence[StepRecord]) -> dict[int, str]:
    """The SDK results of each turn (its first step's index → their text), continued actions included."""
    out: dict[int, list[str]] = {}
    first = None
    for step in history:
        if first is None or not step.info.get("continued"):
            first = step.index
        text = result_text(step)
        if text:
            out.setdefault(first, []).append(text)
    return {k: "\n\n".join(v) for k, v in out.items()}


def build_messages(
    *,
    system: str,
    instruction: str,
    observation: Obs,
    history: Sequence[StepRecord],
    images: int = 3,
    episodic: str = "",
) -> list[Mapping[str, Any]]:
    """The prompt in OpenAI chat form: system, instruction, older turns as text, the last `images`
    turns with their screenshots, then the current screen."""
    turns = _turns(history)
    cut = max(0, len(turns) - max(0, images))
    older, recent = turns[:cut], turns[cut:]
    user = f"Task instruction:\n{instruction.strip()}"
    if episodic:
        user += f"\n\n{episodic}"
    results = _turn_results(history)
    if older:
        lines = []
        for s in older:
            line = f"Step {s.index + 1}: {response_text(s)}"
            if s.index in results:
                line += "\n" + _capped(results[s.index], RESULT_CHARS // 4)
            lines.append(line)
        user += "\n\nEarlier steps of this episode (screenshots omitted):\n" + "\n".join(lines)
    messages: list[Mapping[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": [{"type": "text", "text": user}]},
    ]
    pending = ""  # the last turn's SDK result: the text observation beside the next screenshot
    for step in recent:
        messages.append({"role": "user", "content": _observed(step.observation, pending)})
        messages.append({"role": "assistant", "content": response_text(step)})
        pending = results.get(step.index, "")
    if older and not recent:
        pending = results.get(older[-1].index, "")
    messages.append({"role": "user", "content": _observed(observation, pending)})
    return messages


def _observed(obs: Obs, result: str) -> list[dict[str, Any]]:
    """A user turn: the previous action's result as text (where it gave one), then the screen."""
    return ([{"type": "text", "text": result}] if result else []) + [image_part(obs)]
