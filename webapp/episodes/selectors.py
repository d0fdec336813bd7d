"""Reads of episodes and steps, always scoped to what the asking user may see."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet
from django.urls import reverse

from webapp.episodes.models import Episode, Step


def episodes_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Episode]:
    """Every episode for those who may see all; otherwise the ones they demonstrated or review."""
    if not user.is_authenticated or not user.is_active:
        return Episode.objects.none()
    qs = Episode.objects.select_related("task", "policy_version", "annotator")
    if user.has_perm("episodes.view_all_episodes"):
        return qs
    own = Q(annotator=user) if user.has_perm("episodes.annotate") else Q(pk__in=[])
    reviewing = Q(reviews__reviewer=user) if user.has_perm("reviews.review_episodes") else Q(pk__in=[])
    return qs.filter(own | reviewing).distinct()


def episode_visible_to(*, user: AbstractBaseUser | AnonymousUser, episode_id: int) -> Episode | None:
    """The episode if `user` may see it, else None (callers answer 404 or 403 as fits)."""
    return episodes_visible_to(user=user).filter(pk=episode_id).first()


def episodes_filtered(
    *,
    user: AbstractBaseUser | AnonymousUser,
    task_id: int | None = None,
    status: str | None = None,
    source: str | None = None,
    policy_version_id: int | None = None,
) -> QuerySet[Episode]:
    """Visible episodes narrowed by the list filters, newest first."""
    qs = episodes_visible_to(user=user)
    if task_id is not None:
        qs = qs.filter(task_id=task_id)
    if status:
        qs = qs.filter(status=status)
    if source:
        qs = qs.filter(source=source)
    if policy_version_id is not None:
        qs = qs.filter(policy_version_id=policy_version_id)
    return qs.order_by("-created_at", "-pk")


def steps_of(*, episode: Episode) -> QuerySet[Step]:
    """The episode's steps in order."""
    return Step.objects.filter(episode=episode).order_by("index")


def step_with_screenshot(*, episode: Episode, index: int) -> Step | None:
    """Step `index` of `episode` if it has a screenshot, else None."""
    return Step.objects.filter(episode=episode, index=index).exclude(screenshot="").first()


# --- replay --------------------------------------------------------------------------------------

_RAW_PREVIEW_CHARS = 1000
_RESULT_PREVIEW_CHARS = 4000


def step_result(info: Any) -> dict[str, Any] | None:
    """What an SDK action gave back (a terminal's exit code and output, a file's content, an MCP tool's
    result), as the replay shows it: each text capped at _RESULT_PREVIEW_CHARS; None for GUI input."""
    result = info.get("result") if isinstance(info, dict) else None
    if not isinstance(result, dict):
        return None
    shown: dict[str, Any] = {}
    cap = _RESULT_PREVIEW_CHARS
    for key, value in result.items():
        if isinstance(value, str) and len(value) > cap:
            value = value[:cap] + f"… ({len(value) - cap} more characters)"
        elif not isinstance(value, str | int | float | bool | type(None)):
            text = json.dumps(value, ensure_ascii=False, default=str)
            value = text if len(text) <= cap else text[:cap] + "…"
        shown[str(key)] = value
    return shown


def replay_steps(*, episode: Episode) -> list[dict[str, Any]]:
    """Every step's metadata for the replay page, rendered once as JSON (images load on demand)."""
    steps = Step.objects.filter(episode=episode).order_by("index").defer("token_ids", "logprobs", "a11y_tree")
    out: list[dict[str, Any]] = []
    previous_at: datetime | None = None
    for s in steps:
        has_shot = bool(s.screenshot)
        args = [episode.pk, s.index]
        out.append(
            {
                "index": s.index,
                "actor": s.actor,
                "thought": s.thought,
                "action": s.action,
                "action_text": s.action_text,
                "invalid_reason": s.invalid_reason,
                "raw_output": s.raw_output[:_RAW_PREVIEW_CHARS] if s.invalid_reason else "",
                "proposed_thought": s.proposed_thought,
                "proposed_action": s.proposed_action,
                "proposed_action_text": s.proposed_action_text,
                "width": s.screen_width,
                "height": s.screen_height,
                "screenshot": reverse("episodes:step_screenshot", args=args) if has_shot else "",
                "thumbnail": reverse("episodes:step_thumbnail", args=args) if has_shot else "",
                "observed_at": s.observed_at.isoformat(),
                "acted_at": s.acted_at.isoformat() if s.acted_at else None,
                "latency_ms": s.latency_ms,
                "since_previous_ms": _ms_between(previous_at, s.observed_at),
                "reward": s.reward,
                "result": step_result(s.info),
            }
        )
        previous_at = s.observed_at
    final = final_frame(episode=episode, index=len(out), previous_at=previous_at)
    if final is not None:
        out.append(final)
    return out


def final_frame(
    *, episode: Episode, index: int, previous_at: datetime | None = None
) -> dict[str, Any] | None:
    """The replay's last frame: the screen after the last action (the result), where it was recorded.
    It is no step (`final`: nothing to label or correct); its index follows the last step's."""
    if not episode.final_screenshot:
        return None
    ended = episode.finished_at
    return {
        "index": index,
        "final": True,
        "actor": "result",
        "thought": "",
        "action": None,
        "action_text": "",
        "invalid_reason": "",
        "raw_output": "",
        "proposed_thought": "",
        "proposed_action": None,
        "proposed_action_text": "",
        "width": episode.final_screen_width,
        "height": episode.final_screen_height,
        "screenshot": reverse("episodes:final_screenshot", args=[episode.pk]),
        "thumbnail": reverse("episodes:final_thumbnail", args=[episode.pk]),
        "observed_at": ended.isoformat() if ended else None,
        "acted_at": None,
        "latency_ms": None,
        "since_previous_ms": _ms_between(previous_at, ended) if ended else None,
        "reward": episode.reward,
        "result": None,
    }


def episode_replay(*, episode: Episode, start: int | None = None) -> dict[str, object]:
    """What the replay templates need: the steps as JSON, the step shown first and its neighbours."""
    steps = replay_steps(episode=episode)
    current = min(start, len(steps) - 1) if start is not None and steps else 0
    return {
        "episode": episode,
        "replay": {
            "episode": episode.pk,
            "steps": steps,
            "count": sum(1 for s in steps if not s.get("final")),
        },
        "current": steps[current] if steps else None,
        # The next step's screenshot is fetched in the background so the first → lands at once.
        "preload": steps[current + 1] if current + 1 < len(steps) else None,
    }


def _ms_between(earlier: datetime | None, later: datetime) -> int | None:
    return None if earlier is None else round((later - earlier).total_seconds() * 1000)
