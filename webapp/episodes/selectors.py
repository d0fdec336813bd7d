"""Reads of episodes and steps, always scoped to what the asking user may see."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet

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
