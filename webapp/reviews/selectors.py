"""Reads of reviews."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from webapp.reviews.models import Review

OPEN_STATES = (Review.State.ASSIGNED, Review.State.IN_PROGRESS)


def reviews_queue(*, reviewer: AbstractBaseUser) -> QuerySet[Review]:
    """The reviewer's open reviews, oldest first."""
    return (
        Review.objects.filter(reviewer=reviewer, state__in=OPEN_STATES)
        .select_related("episode", "episode__task")
        .order_by("created_at")
    )
