"""Writes for episodes and steps. Every persisted step is broadcast to the episode's live group."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.utils import timezone

from webapp.catalog.models import Task
from webapp.common.live import broadcast, episode_group
from webapp.common.storage import blob_store
from webapp.episodes.models import Episode, Source, Step
from webapp.training.models import PolicyVersion


class EpisodeStateError(Exception):
    """The episode is not in a state that allows this write."""


def episode_create(
    *,
    task: Task,
    source: str,
    annotator: AbstractBaseUser | None = None,
    policy_version: PolicyVersion | None = None,
    seed: int = 0,
) -> Episode:
    """A pending episode of `task`."""
    if source not in Source.values:
        raise ValueError(f"unknown source {source!r}; valid: {', '.join(Source.values)}")
    if source in (Source.HUMAN, Source.MIXED) and annotator is None:
        raise ValueError(f"a {source} episode needs an annotator")
    return Episode.objects.create(
        task=task, source=source, annotator=annotator, policy_version=policy_version, seed=seed
    )


def episode_start(*, episode: Episode) -> Episode:
    """Move a pending episode to running (atomically: a second start of the same episode fails)."""
    now = timezone.now()
    claimed = Episode.objects.filter(pk=episode.pk, status=Episode.Status.PENDING).update(
        status=Episode.Status.RUNNING, started_at=now
    )
    if claimed != 1:
        raise EpisodeStateError(f"episode {episode.pk} is not pending")
    episode.refresh_from_db()
    _publish_status(episode)
    return episode


NUL_STANDIN = "\ufffd"
"""What a NUL character in a step's text becomes: PostgreSQL text and jsonb cannot hold one."""


def storable(value: Any) -> Any:
    """`value` with every NUL character of its strings (nested in dicts and lists too) replaced by
    NUL_STANDIN. A policy sampling bytes can write a NUL; its step must still be recorded, not abort the
    episode (the sampled token ids, kept beside the text, stay exact)."""
    if isinstance(value, str):
        return value.replace("\x00", NUL_STANDIN) if "\x00" in value else value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def step_record(
    *,
    episode: Episode,
    actor: str,
    action: dict[str, Any],
    action_text: str = "",
    thought: str = "",
    screenshot_png: bytes | None = None,
    a11y_tree: str | None = None,
    screen_size: tuple[int, int] | None = None,
    proposed_action: dict[str, Any] | None = None,
    proposed_action_text: str = "",
    proposed_thought: str = "",
    invalid_reason: str = "",
    raw_output: str = "",
    token_ids: list[int] | None = None,
    logprobs: list[float] | None = None,
    info: dict[str, Any] | None = None,
    screenshot_ext: str = "png",
    observed_at: datetime | None = None,
    acted_at: datetime | None = None,
    latency_ms: int | None = None,
) -> Step:
    """Persist the next step of a running episode (row + observation files) and broadcast it."""
    if not isinstance(action, dict) or "type" not in action:
        raise ValueError("action must be a structured action with a 'type'")
    action, info = storable(action), storable(info)
    proposed_action = storable(proposed_action)
    thought, action_text, raw_output, invalid_reason = (
        storable(thought), storable(action_text), storable(raw_output), storable(invalid_reason)
    )  # fmt: skip
    proposed_thought, proposed_action_text = storable(proposed_thought), storable(proposed_action_text)
    # Files first: content-addressed writes are idempotent, so a failed row insert leaves no
    # dangling reference and a retried one reuses the same file.
    screenshot_name = blob_store(screenshot_png, kind="screens", ext=screenshot_ext) if screenshot_png else ""
    a11y_name = blob_store(a11y_tree.encode(), kind="a11y", ext="txt") if a11y_tree else ""
    with transaction.atomic():
        index = _claim_step_index(episode.pk)
        step = Step.objects.create(
            episode_id=episode.pk,
            index=index,
            actor=actor,
            screenshot=screenshot_name,
            a11y_tree=a11y_name,
            screen_width=screen_size[0] if screen_size else None,
            screen_height=screen_size[1] if screen_size else None,
            thought=thought,
            action=action,
            action_text=action_text,
            proposed_action=proposed_action,
            proposed_action_text=proposed_action_text,
            proposed_thought=proposed_thought,
            invalid_reason=invalid_reason,
            raw_output=raw_output,
            token_ids=token_ids,
            logprobs=logprobs,
            info=info or {},
            observed_at=observed_at or timezone.now(),
            acted_at=acted_at,
            latency_ms=latency_ms,
        )
        # robust: a live-view outage is logged, never un-does or fails the persisted step.
        transaction.on_commit(
            lambda: broadcast(episode_group(episode.pk), "step.created", step_payload(step)), robust=True
        )
    episode.num_steps = step.index + 1
    return step


def _claim_step_index(episode_id: int) -> int:
    """Take the next step index of a running episode, in one round trip.

    The UPDATE locks the episode row until the transaction ends (so concurrent writers of one
    episode queue up, as with SELECT FOR UPDATE) and RETURNING gives the new count; a rolled-back
    step gives its index back. PostgreSQL and SQLite >= 3.35 both support RETURNING.
    """
    table = connection.ops.quote_name(Episode._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET num_steps = num_steps + 1 WHERE id = %s AND status = %s RETURNING num_steps",  # noqa: S608
            [episode_id, Episode.Status.RUNNING],
        )
        row = cursor.fetchone()
    if row is None:
        status = Episode.objects.filter(pk=episode_id).values_list("status", flat=True).first()
        raise EpisodeStateError(f"episode {episode_id} is {status or 'missing'}, not running")
    return int(row[0]) - 1


def episode_finish(
    *,
    episode: Episode,
    reward: float | None,
    env_error: bool = False,
    error_message: str = "",
    **outcome: Any,
) -> Episode:
    """End a running episode with its reward, or as an infrastructure failure (no reward)."""
    if env_error and reward is not None:
        raise ValueError("an env_error episode has no reward")
    if reward is not None and not 0.0 <= reward <= 1.0:
        raise ValueError(f"reward {reward} is outside [0, 1]")
    unknown = sorted(set(outcome) - set(EPISODE_OUTCOME_FIELDS))
    if unknown:
        raise ValueError(f"unknown outcome field(s) {', '.join(unknown)}")
    status = Episode.Status.ABORTED if env_error else Episode.Status.FINISHED
    updated = Episode.objects.filter(pk=episode.pk, status=Episode.Status.RUNNING).update(
        status=status,
        reward=reward,
        env_error=env_error,
        error_message=storable(error_message),
        finished_at=timezone.now(),
        **storable(outcome),
    )
    if updated != 1:
        raise EpisodeStateError(f"episode {episode.pk} is not running")
    episode.refresh_from_db()
    _publish_status(episode)
    return episode


def episode_abort(*, episode: Episode, reason: str) -> Episode:
    """End a pending or running episode without a reward, saying why (abandoned, lost its sandbox)."""
    updated = Episode.objects.filter(
        pk=episode.pk, status__in=[Episode.Status.PENDING, Episode.Status.RUNNING]
    ).update(status=Episode.Status.ABORTED, error_message=storable(reason[:5000]), finished_at=timezone.now())
    if updated != 1:
        raise EpisodeStateError(f"episode {episode.pk} has already ended")
    episode.refresh_from_db()
    _publish_status(episode)
    return episode


EPISODE_OUTCOME_FIELDS = ("stop_reason", "final_answer", "check_details", "summary")


def step_payload(step: Step) -> dict[str, Any]:
    """The JSON a live viewer receives for a new step."""
    return {
        "episode": step.episode_id,
        "index": step.index,
        "actor": step.actor,
        "thought": step.thought,
        "action": step.action,
        "action_text": step.action_text,
        "invalid_reason": step.invalid_reason,
        "has_screenshot": bool(step.screenshot),
        "observed_at": step.observed_at.isoformat(),
    }


def _publish_status(episode: Episode) -> None:
    payload = {
        "episode": episode.pk,
        "status": episode.status,
        "reward": episode.reward,
        "error": episode.error_message,
    }
    transaction.on_commit(
        lambda: broadcast(episode_group(episode.pk), "episode.status", payload), robust=True
    )
