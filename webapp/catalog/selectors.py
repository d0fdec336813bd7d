"""Reads of tasks and suites."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q, QuerySet

from webapp.catalog.models import Task, TaskSuite


def tasks_filtered(
    *, query: str = "", platform: str = "", suite: str = "", published: bool | None = None
) -> QuerySet[Task]:
    """Tasks matching a free-text query, platform, suite slug and publication state."""
    qs = Task.objects.prefetch_related("suites")
    if query:
        qs = qs.filter(Q(slug__icontains=query) | Q(title__icontains=query) | Q(instruction__icontains=query))
    if platform:
        qs = qs.filter(platform=platform)
    if suite:
        qs = qs.filter(suites__slug=suite)
    if published is not None:
        qs = qs.filter(is_published=published)
    return qs.distinct().order_by("slug")


def task_view_area(*, task: Task) -> dict[str, int] | None:
    """The screen area a live view of `task` should fit (a MiniWoB++ page draws in a corner), or None."""
    from agent_core.suites.miniwob import VIEW_AREA

    setup = (task.spec or {}).get("setup") if isinstance(task.spec, dict) else None
    if isinstance(setup, list) and any(isinstance(s, dict) and s.get("op") == "miniwob" for s in setup):
        return dict(VIEW_AREA)
    return None


def task_game(*, task: Task) -> str:
    """The game `task` plays (its `game` setup op: the games suite), or ""."""
    setup = (task.spec or {}).get("setup") if isinstance(task.spec, dict) else None
    for step in setup if isinstance(setup, list) else ():
        if isinstance(step, dict) and step.get("op") == "game":
            return str(step.get("game") or (step.get("args") or {}).get("game") or "")
    return ""


def suites_list() -> QuerySet[TaskSuite]:
    """All suites by slug."""
    return TaskSuite.objects.order_by("slug")


def suites_by_slug(*, slugs: Iterable[str]) -> dict[str, TaskSuite]:
    """The suites among `slugs` that exist, by slug (callers compare to find the unknown ones)."""
    return {suite.slug: suite for suite in TaskSuite.objects.filter(slug__in=set(slugs))}
