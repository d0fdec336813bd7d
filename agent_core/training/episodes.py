"""Training samples rebuilt from recorded steps: the prompts exactly as the agent loop built them.

A trainer must see the prompt the policy saw (or will see at rollout time), so the messages come from
the same `build_messages` call `agent_core.agent.run_episode` makes, with the same system prompt, and
without episodic memory (training rollouts run with `episodic_k=0`). Several actions of one response
share a turn: the turn's first step carries the response.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_core.agent import ACTION_PLATFORM
from agent_core.data.trajectory import StepRecord
from agent_core.prompt_families import DEFAULT_FAMILY, FAMILIES, family_messages
from agent_core.rl.episodes import RLEpisode, RLTurn
from agent_core.thoughts import is_placeholder_thought, learnable_thought
from agent_core.training.types import SFTExample


@dataclass(frozen=True)
class _Prompt:
    """How run_episode wrote an episode's prompts: for a task of `platform` (desktop, browser or
    android), in `language`, in prompt `family` (agent_core.prompt_families) for the `coords` space."""

    platform: str
    language: str = "English"
    family: str = DEFAULT_FAMILY
    coords: str = "smart_resize"

    def messages(
        self, instruction: str, step: StepRecord, history: Sequence[StepRecord], images: int
    ) -> list[Mapping[str, Any]]:
        return family_messages(
            self.family,
            platform=ACTION_PLATFORM.get(self.platform, "desktop"),
            instruction=instruction,
            observation=step.observation,
            history=history,
            images=images,
            language=self.language,
            coords=self.coords,
        )


def _written_in(steps: Sequence[StepRecord], platform: str, language: str) -> _Prompt:
    """The prompt family and coordinate space the episode's sampled turns say they were written in
    (their prompt stamp, `agent_core.turns.sampled`); the platform's prompt where none says."""
    for step in steps:
        stamp = step.info.get("prompt")
        if isinstance(stamp, Mapping) and stamp.get("family") in FAMILIES:
            coords = stamp.get("coords")
            return _Prompt(
                platform, language, stamp["family"], coords if isinstance(coords, str) else "smart_resize"
            )
    return _Prompt(platform, language)


def target_text(step: StepRecord) -> str:
    """What a model should answer at `step`: its own response where a model wrote one, else the
    canonical UI-TARS text of the step (demonstrations and scripted policies give structure). A
    placeholder thought ("oracle step 3") is never a target: the text keeps only the action."""
    if step.token_ids and step.raw_output:
        return step.raw_output
    thought = learnable_thought(step.thought)
    return (f"Thought: {thought}\n" if thought else "") + f"Action: {step.action_text}"


def _turns(
    steps: Sequence[StepRecord],
    prompt: _Prompt,
    instruction: str,
    history_images: int,
    keep: Callable[[StepRecord], bool],
) -> Iterator[tuple[StepRecord, list[Mapping[str, Any]]]]:
    """Each kept turn's first step with the prompt run_episode built for it (history: the steps before)."""
    for i, step in enumerate(steps):
        if step.info.get("continued") or not keep(step):
            continue
        yield step, prompt.messages(instruction, step, list(steps[:i]), history_images)


def _placeholder(step: StepRecord) -> bool:
    """Whether the step's recorded thought was a placeholder the target leaves out."""
    own = bool(step.token_ids and step.raw_output)
    return not own and bool(step.thought.strip()) and is_placeholder_thought(step.thought)


def _learnable(step: StepRecord) -> bool:
    return step.action is not None and bool(step.action_text)


def _sampled(step: StepRecord) -> bool:
    return (
        bool(step.token_ids) and step.logprobs is not None and len(step.logprobs) == len(step.token_ids or ())
    )


def sft_examples(
    instruction: str,
    platform: str,
    steps: Sequence[StepRecord],
    *,
    history_images: int = 3,
    language: str = "English",
    source: str = "",
) -> list[SFTExample]:
    """One example per valid turn of a recorded episode (invalid turns teach nothing: skipped, but
    they stay in the history of later turns, as they did when the episode ran)."""
    out: list[SFTExample] = []
    for step, messages in _turns(steps, _Prompt(platform, language), instruction, history_images, _learnable):
        out.append(
            SFTExample(
                messages=messages,
                response=target_text(step),
                a11y=step.observation.a11y,
                source=f"{source}#{step.index}" if source else f"step {step.index}",
                placeholder_thought=_placeholder(step),
            )
        )
    return out


def rl_episode(
    task_id: str,
    seed: int,
    reward: float | None,
    instruction: str,
    platform: str,
    steps: Sequence[StepRecord],
    *,
    policy_version: int,
    history_images: int = 3,
    language: str = "English",
    episode_id: str = "",
) -> RLEpisode:
    """An RL episode: one turn per model response that kept its token ids and logprobs."""
    written = _written_in(steps, platform, language)
    turns: list[RLTurn] = []
    for index, (step, messages) in enumerate(_turns(steps, written, instruction, history_images, _sampled)):
        stamp = step.info.get("prompt")
        turns.append(
            RLTurn(
                index=index,
                prompt=stamp if isinstance(stamp, Mapping) else None,
                messages=messages,
                a11y=step.observation.a11y,
                response_ids=tuple(step.token_ids or ()),
                rollout_logprobs=tuple(step.logprobs or ()),
                parsed=step.action is not None or step.invalid_reason.startswith(_ENV_REFUSED),
            )
        )
    return RLEpisode(
        task_id=task_id,
        seed=seed,
        reward=float(reward or 0.0),
        turns=tuple(turns),
        policy_version=policy_version,
        episode_id=episode_id,
        steps=len(steps),
    )


# An invalid step whose reason is the environment refusing a parsed action is not a format error.
_ENV_REFUSED = "the environment rejected"
