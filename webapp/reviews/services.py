"""Writes for reviews: assignment and the state machine, each move recorded in the history."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from webapp.episodes.models import Episode
from webapp.reviews.models import Review, ReviewEvent


class ReviewTransitionError(Exception):
    """The review's state machine does not allow this move."""


@transaction.atomic
def review_assign(*, episode: Episode, reviewer: AbstractBaseUser, assigned_by: AbstractBaseUser) -> Review:
    """Assign `episode` to `reviewer` (who must hold the review permission)."""
    if not reviewer.has_perm("reviews.review_episodes"):
        raise PermissionError(f"{reviewer} may not review episodes")
    if not episode.is_done:
        raise ReviewTransitionError(f"episode {episode.pk} has not ended")
    review = Review.objects.create(episode=episode, reviewer=reviewer)
    ReviewEvent.objects.create(review=review, actor=assigned_by, from_state="", to_state=review.state)
    return review


@transaction.atomic
def review_transition(
    *,
    review: Review,
    actor: AbstractBaseUser,
    to_state: str,
    quality: int | None = None,
    reject_reason: str = "",
    comment: str = "",
) -> Review:
    """Move `review` to `to_state` if the state machine allows it, recording who and why."""
    locked = Review.objects.select_for_update().get(pk=review.pk)
    if not locked.can_move_to(to_state):
        raise ReviewTransitionError(f"a review cannot go from {locked.state} to {to_state}")
    if to_state == Review.State.REJECTED and not reject_reason.strip():
        raise ReviewTransitionError("a rejection needs a reason")
    if to_state == Review.State.ACCEPTED and quality is not None and not 1 <= quality <= 5:
        raise ReviewTransitionError("quality is 1 to 5")
    from_state = locked.state
    locked.state = to_state
    if to_state in (Review.State.ACCEPTED, Review.State.REJECTED):
        locked.decided_at = timezone.now()
    if quality is not None:
        locked.quality = quality
    if reject_reason:
        locked.reject_reason = reject_reason
    locked.save()
    ReviewEvent.objects.create(
        review=locked, actor=actor, from_state=from_state, to_state=to_state, comment=comment
    )
    return locked
