"""Review pages: the queue, one review (replay + labels + verdict), assignment, sent-back work, agreement."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.access import page_requires
from webapp.common.params import int_param, parse_whole
from webapp.episodes.models import Episode
from webapp.episodes.selectors import episode_replay
from webapp.reviews.models import Review, StepLabel
from webapp.reviews.selectors import (
    OPEN_STATES,
    demonstration_agreement,
    episodes_unreviewed,
    review_agreement,
    review_history,
    review_labels,
    review_visible_to,
    reviewers_all,
    reviewers_for_auto,
    reviews_of_episode_decided,
    reviews_queue,
    reviews_sent_back,
)
from webapp.reviews.services import (
    ReviewInputError,
    ReviewTransitionError,
    review_assign,
    review_clear_label,
    review_correct_step,
    review_decide,
    review_label_step,
    review_may_act,
    review_resubmit,
    review_set_first_error,
    review_start,
    reviews_assign_auto,
)

_MAY_OPEN = ("reviews.review_episodes", "reviews.view_review")
REVIEW_TEMPLATE = "reviews/review.html"


def _int_or_none(value: str | None) -> int | None:
    return parse_whole(value or "")


@require_GET
@page_requires("reviews.review_episodes")
def queue(request: HttpRequest) -> HttpResponse:
    """Open reviews assigned to the user, oldest first."""
    return render(request, "reviews/queue.html", {"reviews": reviews_queue(reviewer=request.user)})


# --- one review ----------------------------------------------------------------------------------


def _visible(request: HttpRequest, pk: int) -> Review:
    """The review if the user may open it: 403 without any review role, 404 for others' reviews."""
    if not any(request.user.has_perm(p) for p in _MAY_OPEN):
        raise PermissionDenied("your roles do not include reviews")
    review = review_visible_to(user=request.user, review_id=pk)
    if review is None:
        raise Http404("no such review")
    return review


def _actionable(request: HttpRequest, pk: int) -> Review:
    """The review if the user may act on it (its reviewer or an admin), else 403 (404 if none)."""
    review = get_object_or_404(Review.objects.select_related("episode", "episode__task"), pk=pk)
    if not review_may_act(review=review, user=request.user):
        raise PermissionDenied("only the assigned reviewer may act on this review")
    return review


def _review_context(request: HttpRequest, review: Review, **extra: Any) -> dict[str, Any]:
    context = episode_replay(episode=review.episode, start=int_param(request.GET.get("step"), name="step"))
    may_act = review_may_act(review=review, user=request.user)
    decided = review.state not in OPEN_STATES
    context.update(
        review=review,
        may_act=may_act,
        is_open=not decided,
        review_labels=review_labels(review=review),
        history=review_history(review=review),
        # Other reviewers' verdicts are shown once this one is decided, so they cannot anchor it.
        others=reviews_of_episode_decided(review=review) if decided or not may_act else None,
        label_choices=StepLabel.Label.choices,
        qualities=range(1, 6),
    )
    context.update(extra)
    return context


@require_GET
@page_requires()
def review_page(request: HttpRequest, pk: int) -> HttpResponse:
    """The replay with per-step labels, corrections and the verdict; opening it starts the review."""
    review = _visible(request, pk)
    review = review_start(review=review, actor=request.user)
    return render(request, REVIEW_TEMPLATE, _review_context(request, review))


def _labels_fragment(
    request: HttpRequest, review: Review, *, error: str = "", status: int = 200
) -> HttpResponse:
    """The #review-labels fragment for htmx; a plain form post goes back to the page."""
    if not request.htmx:
        if error:
            messages.error(request, error)
        step = _int_or_none(request.POST.get("step"))
        return redirect(
            reverse("reviews:review", args=[review.pk]) + (f"?step={step}" if step is not None else "")
        )
    review.refresh_from_db()
    context = {"review": review, "review_labels": review_labels(review=review), "label_error": error}
    return render(request, f"{REVIEW_TEMPLATE}#labels", context, status=status)


def _step_index(request: HttpRequest) -> int:
    index = _int_or_none(request.POST.get("step"))
    if index is None:
        raise ReviewInputError("which step? (the form sent no step index)")
    return index


@require_POST
@page_requires("reviews.review_episodes")
def label_step(request: HttpRequest, pk: int) -> HttpResponse:
    """Label the posted step correct / redundant / wrong with a note, or clear its label."""
    review = _actionable(request, pk)
    try:
        index = _step_index(request)
        label = request.POST.get("label", "")
        if label == "clear":
            review_clear_label(review=review, actor=request.user, step_index=index)
        else:
            review_label_step(
                review=review,
                actor=request.user,
                step_index=index,
                label=label,
                note=request.POST.get("note", ""),
            )
    except (ReviewInputError, ReviewTransitionError) as exc:
        return _labels_fragment(request, review, error=str(exc), status=400)
    return _labels_fragment(request, review)


@require_POST
@page_requires("reviews.review_episodes")
def first_error(request: HttpRequest, pk: int) -> HttpResponse:
    """Set the posted step as the first error step, or clear it."""
    review = _actionable(request, pk)
    try:
        index = None if request.POST.get("clear") else _step_index(request)
        review_set_first_error(review=review, actor=request.user, step_index=index)
    except (ReviewInputError, ReviewTransitionError) as exc:
        return _labels_fragment(request, review, error=str(exc), status=400)
    return _labels_fragment(request, review)


@require_POST
@page_requires("reviews.review_episodes")
def correct_step(request: HttpRequest, pk: int) -> HttpResponse:
    """Store a corrected thought and action text for the posted step (the text must parse)."""
    review = _actionable(request, pk)
    try:
        review_correct_step(
            review=review,
            actor=request.user,
            step_index=_step_index(request),
            thought=request.POST.get("thought"),
            action_text=request.POST.get("action_text"),
        )
    except (ReviewInputError, ReviewTransitionError) as exc:
        return _labels_fragment(request, review, error=str(exc), status=400)
    return _labels_fragment(request, review)


@require_POST
@page_requires("reviews.review_episodes")
def decide(request: HttpRequest, pk: int) -> HttpResponse:
    """Accept with a quality, reject with a reason or send back with a comment."""
    review = _actionable(request, pk)
    post = request.POST
    try:
        review_decide(
            review=review,
            actor=request.user,
            verdict=post.get("verdict", ""),
            quality=_int_or_none(post.get("quality")),
            reason=post.get("reason", ""),
            comment=post.get("comment", ""),
        )
    except (ReviewInputError, ReviewTransitionError) as exc:
        review.refresh_from_db()
        if request.htmx:
            context = _review_context(request, review, verdict_error=str(exc))
            return render(request, f"{REVIEW_TEMPLATE}#verdict", context, status=400)
        return render(
            request, REVIEW_TEMPLATE, _review_context(request, review, verdict_error=str(exc)), status=400
        )
    url = reverse("reviews:review", args=[review.pk])
    if request.htmx:
        # The whole page changes (forms go, the history and other verdicts appear): load it afresh.
        response = HttpResponse()
        response["HX-Redirect"] = url
        return response
    return redirect(url)


# --- annotators: sent back -----------------------------------------------------------------------


@require_GET
@page_requires("episodes.annotate")
def sent_back(request: HttpRequest) -> HttpResponse:
    """The annotator's trajectories that reviewers sent back, with their comments and labels."""
    return render(request, "reviews/sent_back.html", {"reviews": reviews_sent_back(annotator=request.user)})


@require_POST
@page_requires("episodes.annotate")
def resubmit(request: HttpRequest, pk: int) -> HttpResponse:
    """The annotator hands a sent-back trajectory back to its reviewer."""
    review = get_object_or_404(Review.objects.select_related("episode"), pk=pk)
    try:
        review_resubmit(review=review, actor=request.user, comment=request.POST.get("comment", ""))
    except PermissionError:
        raise PermissionDenied("this trajectory is not yours") from None
    except (ReviewInputError, ReviewTransitionError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Episode {review.episode_id} went back to {review.reviewer}.")
    return redirect("reviews:sent_back")


# --- admins: assignment --------------------------------------------------------------------------


@require_GET
@page_requires("reviews.add_review")
def assign_page(request: HttpRequest) -> HttpResponse:
    """Ended episodes nobody reviews yet, with a reviewer picker per row and auto-assignment."""
    episodes = episodes_unreviewed()
    open_counts = dict(
        Review.objects.filter(state__in=OPEN_STATES).values_list("reviewer").annotate(n=Count("pk"))
    )
    reviewers = [(u, open_counts.get(u.pk, 0)) for u in reviewers_all()]
    context = {"episodes": episodes[:200], "total": episodes.count(), "reviewers": reviewers}
    return render(request, "reviews/assign.html", context)


@require_POST
@page_requires("reviews.add_review")
def assign_one(request: HttpRequest) -> HttpResponse:
    """Assign one episode to the chosen reviewer."""
    episode = get_object_or_404(Episode, pk=_int_or_none(request.POST.get("episode")) or 0)
    reviewer = reviewers_all().filter(pk=_int_or_none(request.POST.get("reviewer")) or 0).first()
    if reviewer is None:
        messages.error(request, "Choose a reviewer.")
    else:
        try:
            review_assign(episode=episode, reviewer=reviewer, assigned_by=request.user)
        except (PermissionError, ReviewTransitionError) as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Episode {episode.pk} assigned to {reviewer}.")
    return redirect("reviews:assign")


@require_POST
@page_requires("reviews.add_review")
def assign_auto(request: HttpRequest) -> HttpResponse:
    """Spread every unreviewed ended episode over the reviewers, round-robin."""
    per_episode = max(1, min(5, _int_or_none(request.POST.get("per_episode")) or 1))
    created = reviews_assign_auto(
        episodes=list(episodes_unreviewed()),
        reviewers=reviewers_for_auto(),
        per_episode=per_episode,
        assigned_by=request.user,
    )
    messages.success(request, f"Made {len(created)} assignment{'s' if len(created) != 1 else ''}.")
    return redirect("reviews:assign")


# --- agreement ------------------------------------------------------------------------------------


@require_GET
@page_requires("reviews.view_review")
def agreement(request: HttpRequest) -> HttpResponse:
    """Reviewer–reviewer and annotator–annotator agreement, per pair and overall."""
    review_pairs, review_overall = review_agreement()
    demo_pairs, demo_overall = demonstration_agreement()
    context = {
        "review_pairs": review_pairs,
        "review_overall": review_overall,
        "demo_pairs": demo_pairs,
        "demo_overall": demo_overall,
    }
    return render(request, "reviews/agreement.html", context)
