"""Writes for reviews: assignment and the state machine, each move recorded in the history."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agent_core.actions import action_to_dict
from agent_core.actions.grammar import PLATFORMS, ActionParseError, parse_edited_action
from webapp.common.text import MAX_NOTE, text_problem
from webapp.episodes.models import Episode, Step
from webapp.reviews.models import Review, ReviewEvent, StepLabel


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
    locked = Review.objects.select_for_update(no_key=True).get(pk=review.pk)
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


class ReviewInputError(ValueError):
    """A review action's input is not acceptable (bad label, unparsable action text, missing reason)."""


def _text(value: str, field: str) -> str:
    """`value` if it is text a review may keep (capped, no NUL); else ReviewInputError naming `field`."""
    problem = text_problem(value, max_length=MAX_NOTE)
    if problem:
        raise ReviewInputError(f"the {field} {problem}")
    return value


OPEN_STATES = (Review.State.ASSIGNED, Review.State.IN_PROGRESS)


def review_may_act(*, review: Review, user: AbstractBaseUser) -> bool:
    """Only the assigned reviewer, or an admin, may label, correct or decide a review."""
    return bool(user.is_active and (user.pk == review.reviewer_id or user.is_superuser))


def _check_open(review: Review, actor: AbstractBaseUser) -> None:
    if not review_may_act(review=review, user=actor):
        raise PermissionError(f"{actor} may not act on review {review.pk}")
    if review.state not in OPEN_STATES:
        raise ReviewTransitionError(f"review {review.pk} is {review.state}; it no longer takes changes")


def _step(review: Review, step_index: int) -> Step:
    step = Step.objects.filter(episode_id=review.episode_id, index=step_index).first()
    if step is None:
        raise ReviewInputError(f"episode {review.episode_id} has no step {step_index}")
    return step


def review_start(*, review: Review, actor: AbstractBaseUser) -> Review:
    """The reviewer opened the review: ASSIGNED → IN_PROGRESS (anything else is left as it is)."""
    if review.state != Review.State.ASSIGNED or actor.pk != review.reviewer_id:
        return review
    try:
        return review_transition(review=review, actor=actor, to_state=Review.State.IN_PROGRESS)
    except ReviewTransitionError:  # a concurrent open already moved it
        review.refresh_from_db()
        return review


@transaction.atomic
def review_label_step(
    *, review: Review, actor: AbstractBaseUser, step_index: int, label: str, note: str = ""
) -> StepLabel:
    """Label one step correct / redundant / wrong, with an optional note (relabelling replaces)."""
    _check_open(review, actor)
    if label not in StepLabel.Label.values:
        raise ReviewInputError(f"unknown label {label!r}; valid: {', '.join(StepLabel.Label.values)}")
    step = _step(review, step_index)
    row, _ = StepLabel.objects.update_or_create(
        review=review, step=step, defaults={"label": label, "note": _text(note, "note").strip()}
    )
    return row


@transaction.atomic
def review_clear_label(*, review: Review, actor: AbstractBaseUser, step_index: int) -> None:
    """Remove a step's label; its corrections stay (a blank correction clears those)."""
    _check_open(review, actor)
    row = StepLabel.objects.filter(review=review, step__index=step_index).first()
    if row is None:
        return
    if row.corrected_thought or row.corrected_action_text or row.corrected_action is not None:
        row.label = ""
        row.save(update_fields=["label"])
    else:
        row.delete()


@transaction.atomic
def review_set_first_error(*, review: Review, actor: AbstractBaseUser, step_index: int | None) -> Review:
    """Mark the first step that went wrong (None clears it)."""
    _check_open(review, actor)
    if step_index is not None:
        _step(review, step_index)
    Review.objects.filter(pk=review.pk).update(first_error_step=step_index, updated_at=timezone.now())
    review.first_error_step = step_index
    return review


def parse_action_text(text: str, *, screen: tuple[int, int] | None, platform: str) -> dict[str, Any]:
    """One action in the UI-TARS grammar (absolute screen pixels, as steps store it) as its dict."""
    # Without a known screen size any pixel is accepted; the grammar needs some extent to check against.
    size = screen if screen and screen[0] and screen[1] else (100_000, 100_000)
    body = text.strip()
    if not body:
        raise ReviewInputError("the action text is empty")
    try:
        parsed = parse_edited_action(body, screen=size, platform=platform)
    except ActionParseError as exc:
        raise ReviewInputError(f"not a valid action: {exc}") from None
    if len(parsed.actions) != 1:
        raise ReviewInputError(f"a step has one action; this text has {len(parsed.actions)}")
    return action_to_dict(parsed.actions[0])


@transaction.atomic
def review_correct_step(
    *,
    review: Review,
    actor: AbstractBaseUser,
    step_index: int,
    thought: str | None = None,
    action_text: str | None = None,
) -> StepLabel | None:
    """Store a corrected thought and/or action text for a step; None leaves that part as it is.

    The action text must parse with the UI-TARS grammar; its structured form is stored beside it.
    An empty value, or one equal to what the step already has, clears that correction. A correction
    never changes the step's label: a better-worded thought says nothing about whether the step was
    right, and the label is the reviewer's own call (unlabelled, the row keeps only the correction).
    With nothing to correct and no row yet, nothing is stored and None is returned; a row left with
    neither a label nor a correction is removed (None).
    """
    _check_open(review, actor)
    step = _step(review, step_index)
    fields: dict[str, Any] = {}
    if thought is not None:
        text = _text(thought, "thought").strip()
        fields["corrected_thought"] = "" if text == step.thought.strip() else text
    if action_text is not None:
        text = _text(action_text, "action text").strip()
        if text and text != step.action_text.strip():
            size = (step.screen_width or 0, step.screen_height or 0)
            platform = _grammar_platform(review.episode.task.platform)
            fields.update(
                corrected_action=parse_action_text(text, screen=size, platform=platform),
                corrected_action_text=text,
            )
        else:
            fields.update(corrected_action=None, corrected_action_text="")
    row = StepLabel.objects.filter(review=review, step=step).first()
    if row is None:
        if not any(fields.values()):
            return None
        row = StepLabel(review=review, step=step, label="")
    for field, value in fields.items():
        setattr(row, field, value)
    if not (row.label or row.corrected_thought or row.corrected_action_text or row.corrected_action):
        if row.pk is not None:
            row.delete()
        return None
    row.save()
    return row


def _grammar_platform(platform: str) -> str:
    """The grammar's name for a task platform (its phones are "mobile")."""
    if platform == "android":
        return "mobile"
    return platform if platform in PLATFORMS else "desktop"


VERDICTS = {
    "accept": Review.State.ACCEPTED,
    "reject": Review.State.REJECTED,
    "send_back": Review.State.SENT_BACK,
}


def review_decide(
    *,
    review: Review,
    actor: AbstractBaseUser,
    verdict: str,
    quality: int | None = None,
    reason: str = "",
    comment: str = "",
) -> Review:
    """Accept (quality 1–5), reject (a reason) or send back to the annotator (a comment)."""
    if not review_may_act(review=review, user=actor):
        raise PermissionError(f"{actor} may not decide review {review.pk}")
    to_state = VERDICTS.get(verdict)
    if to_state is None:
        raise ReviewInputError(f"unknown verdict {verdict!r}; valid: {', '.join(VERDICTS)}")
    _text(reason, "reason")
    _text(comment, "comment")
    if to_state == Review.State.ACCEPTED and (quality is None or not 1 <= quality <= 5):
        raise ReviewInputError("an accept needs a quality from 1 to 5")
    if to_state == Review.State.REJECTED and not reason.strip():
        raise ReviewInputError("a rejection needs a reason")
    if to_state == Review.State.SENT_BACK and not comment.strip():
        raise ReviewInputError("sending back needs a comment for the annotator")
    if to_state == Review.State.SENT_BACK and review.episode.annotator_id is None:
        raise ReviewInputError("an agent rollout has no annotator to send it back to")
    with transaction.atomic():
        decided = review_transition(
            review=review,
            actor=actor,
            to_state=to_state,
            quality=quality if to_state == Review.State.ACCEPTED else None,
            reject_reason=reason.strip() if to_state == Review.State.REJECTED else "",
            comment=(comment or reason).strip(),
        )
        if to_state == Review.State.SENT_BACK:
            decided.comment = comment.strip()
            decided.save(update_fields=["comment", "updated_at"])
    return decided


def review_resubmit(*, review: Review, actor: AbstractBaseUser, comment: str = "") -> Review:
    """The annotator fixed a sent-back trajectory: SENT_BACK → ASSIGNED, back to the same reviewer."""
    if not (actor.pk == review.episode.annotator_id or actor.is_superuser):
        raise PermissionError(f"{actor} did not demonstrate episode {review.episode_id}")
    return review_transition(
        review=review, actor=actor, to_state=Review.State.ASSIGNED, comment=_text(comment, "comment").strip()
    )


def reviews_assign_auto(
    *,
    episodes: Iterable[Episode],
    reviewers: Sequence[AbstractBaseUser],
    per_episode: int = 1,
    assigned_by: AbstractBaseUser | None = None,
) -> list[Review]:
    """Assign each ended episode to `per_episode` reviewers, round-robin.

    A reviewer never gets their own demonstration nor an episode they already review; an episode with
    fewer eligible reviewers than `per_episode` gets as many as there are. `assigned_by` is recorded
    in the history (the reviewer themself when None).
    """
    if per_episode < 1:
        raise ValueError("per_episode must be at least 1")
    pool = [r for r in reviewers if r.has_perm("reviews.review_episodes")]
    created: list[Review] = []
    if not pool:
        return created
    turn = 0
    for episode in episodes:
        if not episode.is_done:
            continue
        taken = set(Review.objects.filter(episode=episode).values_list("reviewer_id", flat=True))
        needed = per_episode - len(taken)
        # Walk the ring once from where the last episode stopped, taking the first eligible ones.
        for offset in range(len(pool)):
            if needed <= 0:
                break
            reviewer = pool[(turn + offset) % len(pool)]
            if reviewer.pk == episode.annotator_id or reviewer.pk in taken:
                continue
            created.append(
                review_assign(episode=episode, reviewer=reviewer, assigned_by=assigned_by or reviewer)
            )
            taken.add(reviewer.pk)
            needed -= 1
            turn = (turn + offset + 1) % len(pool)
    return created
