"""JSON API for episodes and their steps, scoped to what the caller may see."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import FileResponse, HttpRequest
from django.urls import reverse
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from webapp.common.api import ErrorOut, PageIn, RowId, api_enum, page_of, require_any_perm
from webapp.episodes.models import Actor, Episode, Source, Step
from webapp.episodes.responses import image_response, screenshot_response
from webapp.episodes.selectors import episode_visible_to, episodes_filtered, step_with_screenshot, steps_of

router = Router(tags=["episodes"])

# Documented in the OpenAPI description; the handlers in webapp.api write these bodies.
DENIED = {401: ErrorOut, 403: ErrorOut}

EpisodeStatus = api_enum("EpisodeStatus", Episode.Status)
EpisodeSource = api_enum("EpisodeSource", Source)
StepActor = api_enum("StepActor", Actor)

# Any one of these lets a user ask about episodes; which ones they see is up to episodes_visible_to.
MAY_SEE_EPISODES = ("episodes.view_all_episodes", "episodes.annotate", "reviews.review_episodes")


class StepOut(Schema):
    index: int
    actor: StepActor
    thought: str
    action: dict[str, Any]
    action_text: str
    proposed_thought: str
    proposed_action: dict[str, Any] | None
    proposed_action_text: str
    observed_at: datetime
    acted_at: datetime | None
    latency_ms: int | None
    screen_width: int | None
    screen_height: int | None
    screenshot_url: str | None

    @staticmethod
    def resolve_screenshot_url(obj: Step, context: dict[str, Any]) -> str | None:
        if not obj.screenshot:
            return None
        # The API's own route, so a script with a token can fetch it (the page route needs a session).
        path = reverse("api:episode_step_screenshot", args=[obj.episode_id, obj.index])
        return context["request"].build_absolute_uri(path)


class StepPage(Schema):
    count: int
    items: list[StepOut]


class EpisodeOut(Schema):
    id: int
    task: int
    task_slug: str
    instruction: str = Field(description="What the episode was told: its task's template, filled in")
    source: EpisodeSource
    status: EpisodeStatus
    policy: int | None
    policy_name: str | None
    seed: int
    reward: float | None
    env_error: bool
    error: str
    num_steps: int
    final_screenshot_url: str | None = Field(
        None, description="The screen after the last action (the result), once the episode has ended"
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_task(obj: Episode) -> int:
        return obj.task_id

    @staticmethod
    def resolve_final_screenshot_url(obj: Episode, context: dict[str, Any]) -> str | None:
        if not obj.final_screenshot:
            return None
        path = reverse("api:episode_final_screenshot", args=[obj.pk])
        return context["request"].build_absolute_uri(path)

    @staticmethod
    def resolve_task_slug(obj: Episode) -> str:
        return obj.task.slug

    @staticmethod
    def resolve_policy(obj: Episode) -> int | None:
        return obj.policy_version_id

    @staticmethod
    def resolve_policy_name(obj: Episode) -> str | None:
        return obj.policy_version.name if obj.policy_version_id else None


class EpisodeDetailOut(EpisodeOut):
    steps: list[StepOut]

    @staticmethod
    def resolve_steps(obj: Episode) -> list[Step]:
        return list(steps_of(episode=obj))


class EpisodePage(Schema):
    count: int
    items: list[EpisodeOut]


class EpisodeFilters(PageIn):
    task: RowId | None = None
    status: EpisodeStatus | None = None
    source: EpisodeSource | None = None
    policy: RowId | None = None


def _visible_episode(request: HttpRequest, episode_id: int) -> Episode:
    """The episode if the caller may see it, else 404 whether or not it exists (ids cannot be probed)."""
    require_any_perm(request, *MAY_SEE_EPISODES)
    episode = episode_visible_to(user=request.user, episode_id=episode_id)
    if episode is None:
        raise HttpError(404, f"no episode with id {episode_id}")
    return episode


@router.get("/episodes", response={200: EpisodePage, 400: ErrorOut, **DENIED})
def episode_list(request: HttpRequest, filters: Query[EpisodeFilters]) -> dict[str, Any]:
    """Episodes the caller may see, newest first, narrowed by task, status, source and policy."""
    require_any_perm(request, *MAY_SEE_EPISODES)
    episodes = episodes_filtered(
        user=request.user,
        task_id=filters.task,
        status=filters.status,
        source=filters.source,
        policy_version_id=filters.policy,
    )
    return page_of(episodes, filters)


@router.get("/episodes/{episode_id}", response={200: EpisodeDetailOut, 404: ErrorOut, **DENIED})
def episode_detail(request: HttpRequest, episode_id: int) -> Episode:
    """One episode with all its steps in order (page through /steps for very long ones)."""
    return _visible_episode(request, episode_id)


@router.get("/episodes/{episode_id}/steps", response={200: StepPage, 400: ErrorOut, 404: ErrorOut, **DENIED})
def episode_steps(request: HttpRequest, episode_id: int, page: Query[PageIn]) -> dict[str, Any]:
    """A page of an episode's steps in index order."""
    episode = _visible_episode(request, episode_id)
    return page_of(steps_of(episode=episode), page)


@router.get(
    "/episodes/{episode_id}/steps/{index}/screenshot",
    response={200: None, 404: ErrorOut, **DENIED},
    url_name="episode_step_screenshot",
    openapi_extra={"responses": {200: {"description": "PNG", "content": {"image/png": {}}}}},
)
def episode_step_screenshot(request: HttpRequest, episode_id: int, index: int) -> FileResponse:
    """The PNG screen the actor saw before step `index` (404 if the step has none)."""
    step = step_with_screenshot(episode=_visible_episode(request, episode_id), index=index)
    if step is None:
        raise HttpError(404, f"episode {episode_id} has no screenshot for step {index}")
    return screenshot_response(step)


@router.get(
    "/episodes/{episode_id}/final-screenshot",
    response={200: None, 404: ErrorOut, **DENIED},
    url_name="episode_final_screenshot",
    openapi_extra={"responses": {200: {"description": "PNG or JPEG", "content": {"image/png": {}}}}},
)
def episode_final_screenshot(request: HttpRequest, episode_id: int) -> FileResponse:
    """The screen after the episode's last action: its result (404 while it has none)."""
    episode = _visible_episode(request, episode_id)
    if not episode.final_screenshot:
        raise HttpError(404, f"episode {episode_id} has no final screenshot")
    return image_response(episode.final_screenshot)
