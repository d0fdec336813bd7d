"""Reads of reviews: queues, one review with its labels, assignment candidates, agreement tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet

from webapp.episodes.models import Episode, Source
from webapp.reviews.agreement import (
    FirstErrorAgreement,
    Kappa,
    cohen_kappa,
    first_error_agreement,
    pooled,
    rater_pairs,
)
from webapp.reviews.models import Review, StepLabel

OPEN_STATES = (Review.State.ASSIGNED, Review.State.IN_PROGRESS)
DECIDED_STATES = (Review.State.ACCEPTED, Review.State.REJECTED)


def reviews_queue(*, reviewer: AbstractBaseUser) -> QuerySet[Review]:
    """The reviewer's open reviews, oldest first."""
    return (
        Review.objects.filter(reviewer=reviewer, state__in=OPEN_STATES)
        .select_related("episode", "episode__task")
        .order_by("created_at")
    )


def review_visible_to(*, user: AbstractBaseUser | AnonymousUser, review_id: int) -> Review | None:
    """The review if `user` is its reviewer or may view all reviews, else None (callers answer 404)."""
    if not user.is_authenticated or not user.is_active:
        return None
    qs = Review.objects.select_related("episode", "episode__task", "episode__annotator", "reviewer")
    if not user.has_perm("reviews.view_review"):
        qs = qs.filter(reviewer=user)
    return qs.filter(pk=review_id).first()


def review_labels(*, review: Review) -> dict[str, Any]:
    """The review's per-step labels and corrections keyed by step index, and its first-error step."""
    labels = {
        str(row.step.index): {
            "label": row.label,
            "note": row.note,
            "corrected_thought": row.corrected_thought,
            "corrected_action_text": row.corrected_action_text,
            "corrected_action": row.corrected_action,
        }
        for row in StepLabel.objects.filter(review=review)
        .select_related("step")
        .only(
            "label", "note", "corrected_thought", "corrected_action_text", "corrected_action", "step__index"
        )
    }
    return {
        "labels": labels,
        "first_error_step": review.first_error_step,
        "labelled": sum(1 for row in labels.values() if row["label"]),
        "corrected": sum(
            1 for row in labels.values() if row["corrected_thought"] or row["corrected_action_text"]
        ),
    }


def review_history(*, review: Review) -> QuerySet[Any]:
    """The review's state moves, oldest first."""
    return review.events.select_related("actor").order_by("at", "pk")


def reviews_of_episode_decided(*, review: Review) -> list[dict[str, Any]]:
    """Other decided reviews of the same episode, each saying whether it agrees with this one."""
    others = (
        Review.objects.filter(episode_id=review.episode_id, state__in=DECIDED_STATES)
        .exclude(pk=review.pk)
        .select_related("reviewer")
        .order_by("decided_at")
    )
    out = []
    for other in others:
        same_verdict = other.state == review.state
        same_error = other.first_error_step == review.first_error_step
        out.append({"review": other, "same_verdict": same_verdict, "same_first_error": same_error})
    return out


def reviews_sent_back(*, annotator: AbstractBaseUser) -> QuerySet[Review]:
    """Trajectories `annotator` demonstrated that a reviewer sent back, newest first."""
    return (
        Review.objects.filter(episode__annotator=annotator, state=Review.State.SENT_BACK)
        .select_related("episode", "episode__task", "reviewer")
        .prefetch_related("labels__step")
        .order_by("-updated_at")
    )


def episodes_unreviewed() -> QuerySet[Episode]:
    """Ended episodes without any review (environment failures are not worth a reviewer's time)."""
    return (
        Episode.objects.filter(status__in=Episode.ENDED, env_error=False)
        .filter(reviews__isnull=True)
        .select_related("task", "annotator")
        .order_by("finished_at", "pk")
    )


def reviewers_all() -> QuerySet[Any]:
    """Active users who hold the review permission through a role or directly (admins included)."""
    perm = Q(
        groups__permissions__codename="review_episodes",
        groups__permissions__content_type__app_label="reviews",
    )
    direct = Q(
        user_permissions__codename="review_episodes", user_permissions__content_type__app_label="reviews"
    )
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(perm | direct | Q(is_superuser=True))
        .distinct()
        .order_by("username")
    )


def reviewers_for_auto() -> list[Any]:
    """Reviewers auto-assignment spreads work over: the role holders, or admins where there are none."""
    everyone = list(reviewers_all())
    dedicated = [u for u in everyone if not u.is_superuser]
    return dedicated or everyone


# --- agreement ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairAgreement:
    """Agreement of two people over the items both judged."""

    first: str
    second: str
    n: int
    kappa: Kappa
    first_error: FirstErrorAgreement | None = None


def _names(ids: set[Any]) -> dict[Any, str]:
    return dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))


def review_agreement() -> tuple[list[PairAgreement], PairAgreement | None]:
    """Accept/reject κ and first-error agreement per pair of reviewers and pooled over all pairs."""
    rows = Review.objects.filter(state__in=DECIDED_STATES).values_list(
        "episode_id", "reviewer_id", "state", "first_error_step"
    )
    pairs = rater_pairs((ep, who, (state, fe)) for ep, who, state, fe in rows)
    names = _names({p.first for p in pairs} | {p.second for p in pairs})

    def summarise(first: str, second: str, values: list[tuple[Any, Any]]) -> PairAgreement:
        return PairAgreement(
            first=min(first, second),
            second=max(first, second),
            n=len(values),
            kappa=cohen_kappa([(a[0], b[0]) for a, b in values]),
            first_error=first_error_agreement([(a[1], b[1]) for a, b in values]),
        )

    table = [summarise(names.get(p.first, "?"), names.get(p.second, "?"), list(p.values)) for p in pairs]
    overall = summarise("all", "pairs", pooled(pairs)) if pairs else None
    return table, overall


def demonstration_agreement() -> tuple[list[PairAgreement], PairAgreement | None]:
    """Success κ (reward ≥ 1 or not) between annotators over the tasks both demonstrated.

    Where someone demonstrated a task more than once, their latest ended attempt counts.
    """
    rows = (
        Episode.objects.filter(
            source=Source.HUMAN, status=Episode.Status.FINISHED, env_error=False, reward__isnull=False
        )
        .exclude(annotator__isnull=True)
        .order_by("finished_at", "pk")
        .values_list("task_id", "annotator_id", "reward")
    )
    pairs = rater_pairs((task, who, reward >= 1.0) for task, who, reward in rows)
    names = _names({p.first for p in pairs} | {p.second for p in pairs})
    table = [
        PairAgreement(
            first=min(names.get(p.first, "?"), names.get(p.second, "?")),
            second=max(names.get(p.first, "?"), names.get(p.second, "?")),
            n=len(p.values),
            kappa=cohen_kappa(list(p.values)),
        )
        for p in pairs
    ]
    everything = pooled(pairs)
    overall = (
        PairAgreement(first="all", second="pairs", n=len(everything), kappa=cohen_kappa(everything))
        if pairs
        else None
    )
    return table, overall
