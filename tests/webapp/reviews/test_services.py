"""Review services: labels, first error, corrections, verdicts, resubmission, auto-assignment."""

from __future__ import annotations

import pytest

from tests.conftest import Personas
from tests.factories import make_episode
from tests.webapp.reviews.conftest import ReviewWorld
from webapp.accounts.roles import Role
from webapp.accounts.services import user_create
from webapp.reviews.models import Review, StepLabel
from webapp.reviews.services import (
    ReviewInputError,
    ReviewTransitionError,
    review_clear_label,
    review_correct_step,
    review_decide,
    review_label_step,
    review_resubmit,
    review_set_first_error,
    review_start,
    reviews_assign_auto,
)

pytestmark = pytest.mark.django_db


def moves(review: Review) -> list[tuple[str, str]]:
    return list(review.events.order_by("at", "pk").values_list("from_state", "to_state"))


def test_opening_starts_the_review_once_and_only_for_its_reviewer(
    world: ReviewWorld, personas: Personas
) -> None:
    review_start(review=world.review, actor=personas.admin)
    world.review.refresh_from_db()
    assert world.review.state == Review.State.ASSIGNED

    started = review_start(review=world.review, actor=personas.reviewer)
    again = review_start(review=started, actor=personas.reviewer)
    assert again.state == Review.State.IN_PROGRESS
    assert moves(world.review) == [("", "assigned"), ("assigned", "in_progress")]


def test_labels_are_one_per_step_and_relabelling_replaces(world: ReviewWorld, personas: Personas) -> None:
    review_label_step(
        review=world.review, actor=personas.reviewer, step_index=1, label="wrong", note=" misclick "
    )
    review_label_step(review=world.review, actor=personas.reviewer, step_index=1, label="redundant")
    review_label_step(review=world.review, actor=personas.reviewer, step_index=0, label="correct")
    rows = list(StepLabel.objects.filter(review=world.review).values_list("step__index", "label", "note"))
    assert rows == [(0, "correct", ""), (1, "redundant", "")]


@pytest.mark.parametrize(("index", "label"), [(7, "wrong"), (0, "bad")])
def test_labels_refuse_unknown_steps_and_labels(
    world: ReviewWorld, personas: Personas, index: int, label: str
) -> None:
    with pytest.raises(ReviewInputError):
        review_label_step(review=world.review, actor=personas.reviewer, step_index=index, label=label)
    assert not StepLabel.objects.exists()


def test_another_reviewer_may_not_label(world: ReviewWorld) -> None:
    grace = user_create(username="grace", password="x", roles=[Role.REVIEWER])
    with pytest.raises(PermissionError):
        review_label_step(review=world.review, actor=grace, step_index=0, label="wrong")


def test_first_error_is_set_and_cleared(world: ReviewWorld, personas: Personas) -> None:
    review_set_first_error(review=world.review, actor=personas.reviewer, step_index=2)
    assert Review.objects.get(pk=world.review.pk).first_error_step == 2
    review_set_first_error(review=world.review, actor=personas.reviewer, step_index=None)
    assert Review.objects.get(pk=world.review.pk).first_error_step is None
    with pytest.raises(ReviewInputError):
        review_set_first_error(review=world.review, actor=personas.reviewer, step_index=3)


def test_a_correction_is_parsed_into_a_structured_action(world: ReviewWorld, personas: Personas) -> None:
    row = review_correct_step(
        review=world.review,
        actor=personas.reviewer,
        step_index=1,
        thought="Press OK instead",
        action_text="drag(start_box='(0,0)', end_box='(0,0)')",
    )
    assert row.label == ""  # a correction leaves the label to the reviewer: this step has none
    assert row.corrected_thought == "Press OK instead"
    assert row.corrected_action == {"type": "drag", "x1": 0, "y1": 0, "x2": 0, "y2": 0}
    assert row.corrected_action_text == "drag(start_box='(0,0)', end_box='(0,0)')"


def test_a_correction_uses_the_steps_screen_pixels(personas: Personas) -> None:
    from tests.factories import PNG_1X1, make_task
    from webapp.episodes.services import episode_create, episode_finish, episode_start, step_record
    from webapp.reviews.services import review_assign

    episode = episode_create(task=make_task(platform="desktop"), source="human", annotator=personas.annotator)
    episode_start(episode=episode)
    step_record(
        episode=episode,
        actor="human",
        action={"type": "click", "x": 1, "y": 1},
        screenshot_png=PNG_1X1,
        screen_size=(1280, 720),
    )
    episode_finish(episode=episode, reward=0.0)
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    row = review_correct_step(
        review=review, actor=personas.reviewer, step_index=0, action_text="Action: type(content='hi')"
    )
    assert row.corrected_action == {"type": "type", "content": "hi"}
    row = review_correct_step(
        review=review, actor=personas.reviewer, step_index=0, action_text="click(start_box='(640,360)')"
    )
    assert row.corrected_action == {"type": "click", "x": 640, "y": 360}
    with pytest.raises(ReviewInputError, match="not a valid action"):
        review_correct_step(
            review=review, actor=personas.reviewer, step_index=0, action_text="click(start_box='(5000,5)')"
        )


@pytest.mark.parametrize(
    "text", ["clik(start_box='(1,1)')", "click(", "type(content='a') press(key='enter')"]
)
def test_a_correction_that_does_not_parse_is_refused_and_nothing_stored(
    world: ReviewWorld, personas: Personas, text: str
) -> None:
    with pytest.raises(ReviewInputError):
        review_correct_step(review=world.review, actor=personas.reviewer, step_index=0, action_text=text)
    assert not StepLabel.objects.exists()


def test_accept_needs_a_quality_and_records_the_move(world: ReviewWorld, personas: Personas) -> None:
    review_start(review=world.review, actor=personas.reviewer)
    for bad in (None, 0, 6):
        with pytest.raises(ReviewInputError):
            review_decide(review=world.review, actor=personas.reviewer, verdict="accept", quality=bad)
    done = review_decide(review=world.review, actor=personas.reviewer, verdict="accept", quality=4)
    assert (done.state, done.quality) == (Review.State.ACCEPTED, 4)
    assert done.decided_at is not None
    assert moves(done)[-1] == ("in_progress", "accepted")
    with pytest.raises(ReviewTransitionError):
        review_label_step(review=done, actor=personas.reviewer, step_index=0, label="wrong")
    with pytest.raises(ReviewTransitionError):
        review_decide(review=done, actor=personas.reviewer, verdict="reject", reason="changed my mind")


def test_reject_needs_a_reason_and_send_back_a_comment(world: ReviewWorld, personas: Personas) -> None:
    with pytest.raises(ReviewInputError, match="reason"):
        review_decide(review=world.review, actor=personas.reviewer, verdict="reject", reason="  ")
    with pytest.raises(ReviewInputError, match="comment"):
        review_decide(review=world.review, actor=personas.reviewer, verdict="send_back")
    with pytest.raises(ReviewInputError, match="unknown verdict"):
        review_decide(review=world.review, actor=personas.reviewer, verdict="maybe")
    rejected = review_decide(
        review=world.review, actor=personas.reviewer, verdict="reject", reason="wrong window"
    )
    assert (rejected.state, rejected.reject_reason) == (Review.State.REJECTED, "wrong window")


def test_send_back_then_resubmit_returns_to_the_same_reviewer(world: ReviewWorld, personas: Personas) -> None:
    review_start(review=world.review, actor=personas.reviewer)
    sent = review_decide(
        review=world.review, actor=personas.reviewer, verdict="send_back", comment="step 2 is off"
    )
    assert (sent.state, sent.comment) == (Review.State.SENT_BACK, "step 2 is off")
    with pytest.raises(PermissionError):
        review_resubmit(review=sent, actor=personas.reviewer)
    back = review_resubmit(review=sent, actor=personas.annotator, comment="redone")
    assert back.state == Review.State.ASSIGNED and back.reviewer_id == personas.reviewer.pk
    assert moves(back) == [
        ("", "assigned"), ("assigned", "in_progress"), ("in_progress", "sent_back"), ("sent_back", "assigned")
    ]  # fmt: skip
    assert back.events.order_by("-pk").first().actor_id == personas.annotator.pk


def test_an_admin_may_decide_someone_elses_review(world: ReviewWorld, personas: Personas) -> None:
    done = review_decide(review=world.review, actor=personas.admin, verdict="accept", quality=5)
    assert done.state == Review.State.ACCEPTED
    assert done.events.order_by("-pk").first().actor_id == personas.admin.pk


def test_auto_assignment_is_round_robin_and_skips_own_work_and_existing_reviewers(personas: Personas) -> None:
    grace = user_create(username="grace", password="x", roles=[Role.REVIEWER])
    # Heidi both annotates and reviews: she never gets her own demonstration.
    heidi = user_create(username="heidi", password="x", roles=[Role.REVIEWER, Role.ANNOTATOR])
    reviewers = [personas.reviewer, grace, heidi]
    heidis = make_episode(annotator=heidi, steps=1, reward=1.0)
    others = [make_episode(annotator=personas.annotator, steps=1, reward=1.0) for _ in range(3)]
    running = make_episode(annotator=personas.annotator, steps=1, finish=False)
    made = reviews_assign_auto(
        episodes=[heidis, *others, running], reviewers=reviewers, assigned_by=personas.admin
    )

    by_episode = {r.episode_id: r.reviewer_id for r in made}
    assert running.pk not in by_episode
    assert by_episode[heidis.pk] != heidi.pk
    assert sorted(by_episode.values()) == sorted(
        [personas.reviewer.pk, grace.pk, heidi.pk, personas.reviewer.pk]
    )

    # Two per episode: each already has one, so each gets exactly one more, never the same person twice.
    more = reviews_assign_auto(
        episodes=[heidis, *others], reviewers=reviewers, per_episode=2, assigned_by=personas.admin
    )
    assert len(more) == 4
    for episode in [heidis, *others]:
        ids = list(Review.objects.filter(episode=episode).values_list("reviewer_id", flat=True))
        assert len(ids) == len(set(ids)) == 2
    assert heidi.pk not in Review.objects.filter(episode=heidis).values_list("reviewer_id", flat=True)


def test_auto_assignment_ignores_people_without_the_review_permission(personas: Personas) -> None:
    episode = make_episode(annotator=personas.annotator, steps=1, reward=1.0)
    assert reviews_assign_auto(episodes=[episode], reviewers=[personas.researcher, personas.outsider]) == []


def test_a_correction_equal_to_the_step_or_blank_clears_it(world: ReviewWorld, personas: Personas) -> None:
    step = world.episode.steps.get(index=0)
    same = review_correct_step(
        review=world.review,
        actor=personas.reviewer,
        step_index=0,
        thought=step.thought,
        action_text=step.action_text,
    )
    assert same is None and not StepLabel.objects.exists()

    review_label_step(review=world.review, actor=personas.reviewer, step_index=0, label="wrong")
    review_correct_step(
        review=world.review, actor=personas.reviewer, step_index=0, action_text="press(key='enter')"
    )
    row = review_correct_step(review=world.review, actor=personas.reviewer, step_index=0, action_text=" ")
    assert row is not None and (row.corrected_action, row.corrected_action_text) == (None, "")
    assert row.label == StepLabel.Label.WRONG  # the label stays until the reviewer changes it


def test_review_text_over_the_cap_or_with_nul_is_refused_naming_it(
    world: ReviewWorld, personas: Personas
) -> None:
    bob, long = personas.reviewer, "x" * 10_001
    with pytest.raises(ReviewInputError, match="the note may be at most 10000 characters"):
        review_label_step(review=world.review, actor=bob, step_index=0, label="wrong", note=long)
    with pytest.raises(ReviewInputError, match="the thought may not contain NUL"):
        review_correct_step(review=world.review, actor=bob, step_index=0, thought="a\x00b")
    with pytest.raises(ReviewInputError, match="the action text may be at most"):
        review_correct_step(review=world.review, actor=bob, step_index=0, action_text=long)
    with pytest.raises(ReviewInputError, match="the reason may be at most"):
        review_decide(review=world.review, actor=bob, verdict="reject", reason=long)
    with pytest.raises(ReviewInputError, match="the comment may be at most"):
        review_decide(review=world.review, actor=bob, verdict="send_back", comment=long)
    assert not StepLabel.objects.exists()
    world.review.refresh_from_db()
    assert world.review.state == Review.State.ASSIGNED
    review_decide(review=world.review, actor=bob, verdict="send_back", comment="redo step 2")
    with pytest.raises(ReviewInputError, match="the comment may be at most"):
        review_resubmit(review=world.review, actor=personas.annotator, comment=long)


def test_a_corrected_thought_never_changes_the_steps_label(world: ReviewWorld, personas: Personas) -> None:
    """Saving a better-worded thought says nothing about whether the step was right: an unlabelled
    step stays unlabelled (it used to be labelled wrong, silently), a labelled one keeps its label."""
    bob = personas.reviewer
    row = review_correct_step(review=world.review, actor=bob, step_index=0, thought="I open the menu first")
    assert row is not None and (row.label, row.corrected_thought) == ("", "I open the menu first")
    review_label_step(review=world.review, actor=bob, step_index=1, label="correct")
    row = review_correct_step(review=world.review, actor=bob, step_index=1, thought="Then I press OK")
    assert row is not None and row.label == StepLabel.Label.CORRECT
    review_clear_label(review=world.review, actor=bob, step_index=1)  # the label goes, the thought stays
    row = StepLabel.objects.get(review=world.review, step__index=1)
    assert (row.label, row.corrected_thought) == ("", "Then I press OK")
