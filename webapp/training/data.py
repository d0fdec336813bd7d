"""Training data from the database: recorded episodes back into the agent's own types.

`step_records_of` rebuilds an episode's StepRecords (screenshot and observation text read back from their
files) so that `agent_core.training.episodes` can rebuild every prompt exactly as the agent loop
built it; SFT examples of a dataset version apply the deciding review's labels and corrections, as
the SFT export does. Episodes stream a chunk at a time, so memory stays bounded by the chunk.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime

from django.core.files.storage import default_storage
from django.db.models import Prefetch, QuerySet

from agent_core import actions as A
from agent_core.agent import screen_action_text
from agent_core.data.trajectory import StepRecord
from agent_core.env import Obs
from agent_core.rl.episodes import RLEpisode
from agent_core.thoughts import learnable_thought
from agent_core.training.episodes import rl_episode, sft_examples
from agent_core.training.types import SFTExample
from webapp.datasets.models import DatasetVersion
from webapp.episodes.models import Episode, Step
from webapp.reviews.models import StepLabel
from webapp.reviews.trajectories import review_prefetches, trajectory_view

CHUNK = 50
"""Episodes loaded (with their steps) per query while streaming a dataset version."""
_STEP_OF_SOURCE = re.compile(r"#(\d+)$")


class DataError(ValueError):
    """A recorded episode cannot be turned into training data (a missing file, a malformed action)."""


def _read(name: str, *, what: str, episode: Episode) -> bytes:
    try:
        with default_storage.open(name, "rb") as f:
            return bytes(f.read())
    except OSError as exc:
        raise DataError(f"episode {episode.pk}: cannot read its {what} {name}: {exc}") from None


def _epoch(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


def _action(step: Step, episode: Episode) -> A.Action | None:
    data = step.action or {}
    if data.get("type") == "invalid" or step.invalid_reason:
        return None
    try:
        return A.action_from_dict(data)
    except A.ActionError as exc:
        raise DataError(f"episode {episode.pk} step {step.index}: {exc}") from None


def step_record_of(step: Step, episode: Episode) -> StepRecord:
    """One stored step as the agent loop recorded it (observation files read back)."""
    name = step.screenshot.name or ""
    screenshot = _read(name, what="screenshot", episode=episode) if name else b""
    a11y_name = step.a11y_tree.name or ""
    a11y = _read(a11y_name, what="observation text", episode=episode).decode() if a11y_name else None
    obs = Obs(
        screenshot=screenshot,
        width=step.screen_width or 0,
        height=step.screen_height or 0,
        mime="image/jpeg" if name.endswith((".jpg", ".jpeg")) else "image/png",
        a11y=a11y,
    )
    return StepRecord(
        index=step.index,
        observation=obs,
        thought=step.thought,
        action=_action(step, episode),
        action_text=step.action_text,
        raw_output=step.raw_output,
        invalid_reason=step.invalid_reason,
        observed_at=_epoch(step.observed_at),
        acted_at=_epoch(step.acted_at) or None,
        latency_ms=step.latency_ms,
        token_ids=tuple(int(t) for t in step.token_ids) if step.token_ids is not None else None,
        logprobs=tuple(float(v) for v in step.logprobs) if step.logprobs is not None else None,
        info=dict(step.info or {}),
    )


def _ordered_steps(episode: Episode) -> list[Step]:
    steps = getattr(episode, "ordered_steps", None)
    return list(steps) if steps is not None else list(episode.steps.order_by("index"))


def step_records_of(episode: Episode) -> tuple[str, str, list[StepRecord]]:
    """(the instruction as the agent saw it, the task's platform, the episode's StepRecords).

    The platform is the task's (desktop, browser, android): `agent_core.training.episodes` maps it to
    the action space as `run_episode` does."""
    task = episode.task
    instruction = episode.instruction
    steps = [step_record_of(step, episode) for step in _ordered_steps(episode)]
    return str(instruction), task.platform, steps


def with_step_data(queryset: QuerySet[Episode]) -> QuerySet[Episode]:
    """`queryset` with what step_records_of and the review labels read, prefetched a chunk at a time."""
    return queryset.select_related("task", "policy_version", "annotator").prefetch_related(
        Prefetch("steps", queryset=Step.objects.order_by("index"), to_attr="ordered_steps"),
        *review_prefetches(),
        "task__suites",
    )


def _corrected(examples: list[SFTExample], episode: Episode, steps: list[StepRecord]) -> list[SFTExample]:
    """The examples with the deciding review applied: a step marked wrong without a correction is no
    target; a corrected one teaches the correction (in screen pixels, as demonstrations do)."""
    view = trajectory_view(episode=episode)
    labels = {s.index: s for s in view.steps if s.label or s.corrected_action or s.corrected_thought}
    if not labels:
        return examples
    by_index = {s.index: s for s in steps}
    out: list[SFTExample] = []
    for example in examples:
        match = _STEP_OF_SOURCE.search(example.source)
        label = labels.get(int(match.group(1))) if match else None
        if label is None:
            out.append(example)
            continue
        step = by_index[label.index]
        if label.corrected_action is not None:
            try:
                action = A.action_from_dict(label.corrected_action)
            except A.ActionError:
                continue  # a correction that no longer parses teaches nothing
            thought = learnable_thought(label.corrected_thought) or learnable_thought(step.thought)
            screen = (step.observation.width, step.observation.height)
            action_text = screen_action_text(action, screen)
        elif learnable_thought(label.corrected_thought):
            thought, action_text = learnable_thought(label.corrected_thought), step.action_text
        elif label.label == StepLabel.Label.WRONG:
            continue
        else:
            out.append(example)
            continue
        response = (f"Thought: {thought}\n" if thought else "") + f"Action: {action_text}"
        out.append(
            replace(
                example, response=response, placeholder_thought=example.placeholder_thought and not thought
            )
        )
    return out


def sft_examples_for(version: DatasetVersion, *, history_images: int) -> Iterator[SFTExample]:
    """Every SFT example of a dataset version's episodes (valid steps, reviews applied), streamed."""
    members = with_step_data(Episode.objects.filter(memberships__version=version).order_by("pk"))
    for episode in members.iterator(chunk_size=CHUNK):
        instruction, platform, steps = step_records_of(episode)
        examples = sft_examples(
            instruction, platform, steps, history_images=history_images, source=f"episode {episode.pk}"
        )
        yield from _corrected(examples, episode, steps)


def rl_episode_of(episode: Episode, *, policy_version: int, history_images: int) -> RLEpisode:
    """A finished rollout as an RL episode (turns that kept their token ids and logprobs)."""
    instruction, platform, steps = step_records_of(episode)
    return rl_episode(
        episode.task.slug,
        int(episode.seed),
        episode.reward,
        instruction,
        platform,
        steps,
        policy_version=policy_version,
        history_images=history_images,
        episode_id=str(episode.pk),
    )
