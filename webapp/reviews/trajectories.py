"""Trajectory views of episodes: what agent_core's flywheel reads of one episode (its steps, and the
labels and corrections of the review that decides it), built from the episode's rows and its reviews.
The flywheel round (webapp.datasets.rounds), exports and training data read episodes through these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import Exists, F, OuterRef, Prefetch, QuerySet

from agent_core.actions import ActionError, action_from_dict
from agent_core.flywheel import StepView, TrajectoryView, review_verdict
from agent_core.memory import sdk_result_text
from webapp.episodes.models import Episode, Step
from webapp.reviews.models import Review, ReviewEvent, StepLabel


def _reviews() -> QuerySet[Review]:
    """An episode's reviews in the order they were decided, each knowing whether it was ever sent back."""
    sent_back = ReviewEvent.objects.filter(review=OuterRef("pk"), to_state=Review.State.SENT_BACK)
    return Review.objects.annotate(was_sent_back=Exists(sent_back)).order_by(
        F("decided_at").asc(nulls_last=True), "updated_at", "pk"
    )


def review_prefetches() -> list[Prefetch[Any]]:
    """What `trajectory_view` reads of an episode's reviews and forks, for prefetch_related."""
    return [
        Prefetch("reviews", queryset=_reviews(), to_attr="routing_reviews"),
        Prefetch("routing_reviews__labels", queryset=StepLabel.objects.all(), to_attr="all_labels"),
        Prefetch("forks", queryset=_finished_forks(), to_attr="finished_forks"),
    ]


def _finished_forks() -> QuerySet[Episode]:
    return Episode.objects.filter(status=Episode.Status.FINISHED, env_error=False).only("pk", "forked_from")


def with_trajectory_data(queryset: QuerySet[Episode]) -> QuerySet[Episode]:
    """`queryset` with what trajectory_view reads, fetched a chunk of episodes at a time."""
    # info can be large: only the SDK result is read (the text a model read after a tool call).
    steps = (
        Step.objects.order_by("index")
        .defer("token_ids", "logprobs", "info", "a11y_tree")
        .annotate(sdk_result=F("info__result"))
    )
    return queryset.select_related("task", "policy_version", "annotator").prefetch_related(
        Prefetch("steps", queryset=steps, to_attr="ordered_steps"), *review_prefetches(), "task__suites"
    )


def _review_of(episode: Episode) -> tuple[str, dict[int, StepLabel]]:
    """The episode's review verdict (agent_core.flywheel.review_verdict: every state of every review
    counts) and the labels of the review that decides it."""
    reviews = getattr(episode, "routing_reviews", None)
    if reviews is None:
        reviews = list(_reviews().filter(episode=episode))
    verdict = review_verdict((r.state, bool(r.was_sent_back)) for r in reviews)
    if not verdict:
        return "", {}
    state = {"sent_back": Review.State.SENT_BACK}.get(verdict, verdict)
    deciding = [r for r in reviews if r.state == state] or [r for r in reviews if r.was_sent_back]
    labels = getattr(deciding[-1], "all_labels", None)
    if labels is None:
        labels = list(deciding[-1].labels.all())
    return verdict, {label.step_id: label for label in labels}


def _superseded_by(episode: Episode) -> int | None:
    forks = getattr(episode, "finished_forks", None)
    if forks is None:
        forks = list(_finished_forks().filter(forked_from=episode))
    return min((f.pk for f in forks), default=None)


def trajectory_view(*, episode: Episode) -> TrajectoryView:
    """The agent_core view of one episode, with its decided review's labels and corrections."""
    review, labels = _review_of(episode)
    steps = getattr(episode, "ordered_steps", None)
    if steps is None:
        steps = list(episode.steps.order_by("index"))
    views = []
    for step in steps:
        label = labels.get(step.pk)
        screen = (step.screen_width, step.screen_height) if step.screen_width and step.screen_height else None
        views.append(
            StepView(
                index=step.index,
                actor=step.actor,
                screenshot=step.screenshot.name or "",
                screen=screen,
                thought=step.thought,
                # An output that did not parse is stored as {"type": "invalid", ...}: no action.
                action=None if (not step.action or step.action.get("type") == "invalid") else step.action,
                action_text=step.action_text,
                invalid_reason=step.invalid_reason,
                raw_output=step.raw_output,
                label=label.label if label else "",
                corrected_thought=label.corrected_thought if label else "",
                corrected_action=label.corrected_action if label else None,
                result=_result_text(step),
            )
        )
    task = episode.task
    return TrajectoryView(
        episode_id=episode.pk,
        task=task.slug,
        instruction=episode.instruction,
        platform=task.platform,
        source=episode.source,
        policy_version=episode.policy_version.name if episode.policy_version_id else "",
        reward=episode.reward,
        max_steps=task.max_steps,
        review=review,
        steps=tuple(views),
        suites=tuple(sorted(s.slug for s in task.suites.all())),
        annotator=episode.annotator.get_username() if episode.annotator_id else "",
        final_answer=episode.final_answer,
        superseded_by=_superseded_by(episode),
        tools=tuple(t for t in (episode.prepared or {}).get("tools") or () if isinstance(t, dict)),
    )


def _result_text(step: Step) -> str:
    """The step's SDK result as the model read it ("" for GUI input, an invalid step, an odd record)."""
    if hasattr(step, "sdk_result"):  # loaded by with_trajectory_data, without the rest of info
        result = step.sdk_result
    else:
        result = step.info.get("result") if isinstance(step.info, dict) else None
    if not isinstance(result, dict) or not step.action or step.action.get("type") == "invalid":
        return ""
    try:
        action = action_from_dict(step.action)
    except (ActionError, KeyError, TypeError, ValueError):
        return ""
    return sdk_result_text(action, result)


def trajectories(
    queryset: QuerySet[Episode], *, chunk: int = 100
) -> Iterator[tuple[Episode, TrajectoryView]]:
    """Each episode of `queryset` with its trajectory view, loading `chunk` episodes at a time."""
    for episode in with_trajectory_data(queryset).iterator(chunk_size=chunk):
        yield episode, trajectory_view(episode=episode)
