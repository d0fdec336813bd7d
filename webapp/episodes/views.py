"""Episode pages: the list, one episode with its steps, and step screenshots behind access checks."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET

from webapp.accounts.access import page_requires
from webapp.common.paging import page_of, push_query, query_of
from webapp.common.params import int_param
from webapp.episodes.models import Episode, Source
from webapp.episodes.responses import (
    image_response,
    image_thumbnail_response,
    screenshot_response,
    thumbnail_response,
)
from webapp.episodes.selectors import (
    episode_replay,
    episode_visible_to,
    episodes_filtered,
    step_with_screenshot,
)

_MAY_LIST = ("episodes.view_all_episodes", "episodes.annotate", "reviews.review_episodes")
EPISODES_PER_PAGE = 50


@require_GET
@page_requires()
def episode_list(request: HttpRequest) -> HttpResponse:
    """Episodes the user may see, filtered by task, status, source and policy."""
    if not any(request.user.has_perm(p) for p in _MAY_LIST):
        raise PermissionDenied("your roles do not include episodes")
    params = request.GET
    episodes = episodes_filtered(
        user=request.user,
        task_id=int_param(params.get("task"), name="task", minimum=1),
        status=params.get("status") if params.get("status") in Episode.Status.values else None,
        source=params.get("source") if params.get("source") in Source.values else None,
        policy_version_id=int_param(params.get("policy"), name="policy", minimum=1),
    )
    # A page at a time, every one reachable (the list used to stop at 200); the filters stay in the URL.
    query = query_of(params, ("task", "status", "source", "policy"))
    page = page_of(episodes, params, per_page=EPISODES_PER_PAGE)
    context = {
        "page": page,
        "episodes": page.object_list,
        "total": page.paginator.count,
        "statuses": Episode.Status.choices,
        "sources": Source.choices,
        "params": params,
        "query": query,
    }
    if not request.htmx:
        return render(request, "episodes/episode_list.html", context)
    return push_query(render(request, "episodes/episode_list.html#results", context), request, query)


@require_GET
@page_requires()
def episode_detail(request: HttpRequest, episode_id: int) -> HttpResponse:
    """One episode replayed step by step (404 for one the user may not see, so ids cannot be probed)."""
    episode = episode_visible_to(user=request.user, episode_id=episode_id)
    if episode is None:
        raise Http404("no such episode")
    context = episode_replay(episode=episode, start=int_param(request.GET.get("step"), name="step"))
    if request.htmx:
        # A running episode's page polls its #live fragment (the timeline and the steps' JSON come
        # along out of band, so the step on screen stays put); 286 tells htmx to stop once it has ended.
        response = HttpResponse(
            render_to_string("episodes/episode_detail.html#live", context, request)
            + render_to_string("episodes/_timeline.html", {**context, "oob": True}, request)
        )
        if episode.is_done:
            response.status_code = 286
        return response
    return render(request, "episodes/episode_detail.html", context)


@require_GET
@page_requires()
def step_screenshot(request: HttpRequest, episode_id: int, index: int) -> FileResponse:
    """The screenshot of one step, streamed only to people who may see its episode."""
    episode = episode_visible_to(user=request.user, episode_id=episode_id)
    step = step_with_screenshot(episode=episode, index=index) if episode else None
    if step is None:
        raise Http404("no such screenshot")
    return screenshot_response(step)


@require_GET
@page_requires()
def step_thumbnail(request: HttpRequest, episode_id: int, index: int) -> HttpResponse:
    """A small JPEG of one step's screenshot for the timeline, behind the same checks as the screenshot."""
    episode = episode_visible_to(user=request.user, episode_id=episode_id)
    step = step_with_screenshot(episode=episode, index=index) if episode else None
    if step is None:
        raise Http404("no such screenshot")
    return thumbnail_response(step)


def _final_of(request: HttpRequest, episode_id: int) -> Episode:
    episode = episode_visible_to(user=request.user, episode_id=episode_id)
    if episode is None or not episode.final_screenshot:
        raise Http404("no such screenshot")
    return episode


@require_GET
@page_requires()
def final_screenshot(request: HttpRequest, episode_id: int) -> FileResponse:
    """The screen after the episode's last action, only to people who may see the episode."""
    return image_response(_final_of(request, episode_id).final_screenshot)


@require_GET
@page_requires()
def final_thumbnail(request: HttpRequest, episode_id: int) -> HttpResponse:
    """A small JPEG of the final screen for the timeline, behind the same checks."""
    return image_thumbnail_response(_final_of(request, episode_id).final_screenshot)
