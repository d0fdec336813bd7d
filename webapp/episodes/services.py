"""Writes for episodes and steps (every persisted step is broadcast to the episode's live group), and the
tasks' difficulty statistics they roll up to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from agent_core.env import Obs
from agent_core.tasks.runner import PreparedTask
from webapp.catalog.models import Task
from webapp.common.live import broadcast, episode_group
from webapp.common.storage import blob_store
from webapp.episodes.models import Episode, Source, Step
from webapp.episodes.selectors import step_result
from webapp.policies.models import PolicyVersion


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
    step = Step(
        episode_id=episode.pk,
        index=0,  # claimed in the same write
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
    _step_insert(step)
    # Committed already unless the caller holds a transaction; then it is sent when that commits.
    # robust: a live-view outage is logged, never un-does or fails the persisted step.
    transaction.on_commit(
        lambda: broadcast(episode_group(episode.pk), "step.created", step_payload(step)), robust=True
    )
    episode.num_steps = step.index + 1
    return step


def _step_insert(step: Step) -> None:
    """Insert `step` as the next step of its running episode, and mark the episode alive.

    One transaction, and one commit, per step: the episode row's UPDATE takes the next index (it locks
    the row until the transaction ends, so concurrent writers of one episode queue up and a rolled-back
    step gives its index back), moves `heartbeat_at` (a persisted step is the worker's sign of life:
    no second write per step) and the INSERT stores the row. On PostgreSQL both are one statement sent
    in one round trip (a data-modifying WITH), committed on its own; on SQLite, whose round trips are
    calls within the process, they are two statements in one transaction.
    """
    now = timezone.now()
    episode_table = connection.ops.quote_name(Episode._meta.db_table)
    claim = (
        f"UPDATE {episode_table} SET num_steps = num_steps + 1, heartbeat_at = %s "  # noqa: S608
        f"WHERE id = %s AND status = %s RETURNING num_steps - 1"
    )
    claim_params: list[Any] = [
        Episode._meta.get_field("heartbeat_at").get_db_prep_save(now, connection),
        step.episode_id,
        Episode.Status.RUNNING,
    ]
    fields = [f for f in Step._meta.local_concrete_fields if not f.primary_key and f.attname != "index"]
    # As Model.save would prepare them (auto_now_add fills created_at on `step`, JSON is adapted).
    values = [f.get_db_prep_save(f.pre_save(step, add=True), connection) for f in fields]
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in [*fields, Step._meta.get_field("index")])
    insert = f"INSERT INTO {qn(Step._meta.db_table)} ({columns})"
    placeholders = ", ".join(["%s"] * len(fields))
    returning = f"RETURNING {qn('id')}, {qn('index')}"
    row: tuple[Any, ...] | None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            sql = f"WITH claimed AS ({claim}) {insert} SELECT {placeholders}, claimed.* FROM claimed"  # noqa: S608
            cursor.execute(f"{sql} {returning}", [*claim_params, *values])
            row = cursor.fetchone()
    else:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(claim, claim_params)
            claimed = cursor.fetchone()
            row = None
            if claimed is not None:
                cursor.execute(f"{insert} VALUES ({placeholders}, %s) {returning}", [*values, claimed[0]])
                row = cursor.fetchone()
    if row is None:
        status = Episode.objects.filter(pk=step.episode_id).values_list("status", flat=True).first()
        raise EpisodeStateError(f"episode {step.episode_id} is {status or 'missing'}, not running")
    step.pk, step.index = int(row[0]), int(row[1])
    step._state.adding, step._state.db = False, connection.alias


@dataclass(frozen=True)
class Screen:
    """A screenshot to keep with an episode: its bytes, size and file type."""

    image: bytes
    width: int
    height: int
    ext: str = "png"


def screen_of(obs: Obs | None) -> Screen | None:
    """An observation's screenshot as a Screen to keep (None when there is none)."""
    if obs is None or not obs.screenshot:
        return None
    return Screen(obs.screenshot, obs.width, obs.height, "jpg" if obs.mime == "image/jpeg" else "png")


def episode_finish(
    *,
    episode: Episode,
    reward: float | None,
    env_error: bool = False,
    error: str = "",
    final_screen: Screen | None = None,
    **outcome: Any,
) -> Episode:
    """End a running episode: finished with its reward, or failed as an infrastructure failure
    (`env_error`, no reward, `error` says what happened).

    `final_screen` is the screen after the last action (the result): replay shows it last."""
    if env_error and reward is not None:
        raise ValueError("an env_error episode has no reward")
    if reward is not None and not 0.0 <= reward <= 1.0:
        raise ValueError(f"reward {reward} is outside [0, 1]")
    unknown = sorted(set(outcome) - set(EPISODE_OUTCOME_FIELDS))
    if unknown:
        raise ValueError(f"unknown outcome field(s) {', '.join(unknown)}")
    status = Episode.Status.FAILED if env_error else Episode.Status.FINISHED
    final: dict[str, Any] = {}
    if final_screen is not None and final_screen.image:
        final = {
            "final_screenshot": blob_store(final_screen.image, kind="screens", ext=final_screen.ext),
            "final_screen_width": final_screen.width or None,
            "final_screen_height": final_screen.height or None,
        }
    ended = Episode.end(
        episode.pk,
        status,
        reward=reward,
        env_error=env_error,
        error=storable(error),
        **final,
        **storable(outcome),
    )
    if not ended:
        raise EpisodeStateError(f"episode {episode.pk} is not running")
    episode.refresh_from_db()
    _publish_status(episode)
    return episode


def episode_abort(*, episode: Episode, reason: str, status: str = Episode.Status.FAILED) -> Episode:
    """End a pending or running episode without a reward, saying why: failed (it lost its sandbox) or
    cancelled (its annotator abandoned it)."""
    if not Episode.end(episode.pk, status, error=storable(reason), whence=Episode.ACTIVE):
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
        "result": step_result(step.info),
    }


def _publish_status(episode: Episode) -> None:
    payload = {
        "episode": episode.pk,
        "status": episode.status,
        "reward": episode.reward,
        "error": episode.error,
    }
    transaction.on_commit(
        lambda: broadcast(episode_group(episode.pk), "episode.status", payload), robust=True
    )


def task_stats_refresh() -> int:
    """Recompute every task's attempts and successes from finished, non-env_error episodes."""
    rows = (
        Episode.objects.filter(status=Episode.Status.FINISHED, env_error=False)
        .values("task_id")
        .annotate(n=Count("pk"), ok=Count("pk", filter=Q(reward__gte=1.0)))
    )
    stats = {row["task_id"]: (row["n"], row["ok"]) for row in rows}
    changed = 0
    for task in Task.objects.only("pk", "attempts", "successes"):
        attempts, successes = stats.get(task.pk, (0, 0))
        if (task.attempts, task.successes) != (attempts, successes):
            Task.objects.filter(pk=task.pk).update(attempts=attempts, successes=successes)
            changed += 1
    return changed


def prepared_to_json(prepared: PreparedTask) -> dict[str, Any]:
    """What Episode.prepared keeps of a task prepared in its sandbox (seed, params, instruction, setup,
    and the MCP tools its prompt lists)."""
    return {
        "seed": prepared.seed,
        "params": dict(prepared.params),
        "instruction": prepared.instruction,
        "setup": dict(prepared.setup),
        "tools": [dict(t) for t in prepared.tools],
    }
