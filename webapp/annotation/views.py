"""Annotation pages: the annotator's queue, starting and forking demonstrations, the live session."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.access import page_requires
from webapp.annotation.models import Assignment
from webapp.annotation.selectors import (
    annotators,
    assignment_next,
    assignment_seed,
    assignments_open,
    demos_of,
    is_unproven,
    proposal_policies,
    tasks_to_demonstrate,
    tasks_unproven,
)
from webapp.annotation.services import DemoError, assignment_create, demo_abandon, demo_start
from webapp.catalog.availability import TaskUnavailable
from webapp.catalog.models import Task
from webapp.catalog.selectors import task_game, task_view_area
from webapp.common.errors import refusal
from webapp.common.params import parse_whole
from webapp.episodes.models import Episode
from webapp.episodes.selectors import episode_visible_to, steps_of
from webapp.policies.models import PolicyVersion
from webapp.reviews.selectors import reviews_sent_back
from webapp.sandboxes.control import control_of, control_offered, control_state


def _int(value: str | None) -> int | None:
    return parse_whole(value or "")


@require_GET
@page_requires("episodes.annotate")
def queue(request: HttpRequest) -> HttpResponse:
    """The annotator's assignments, their running and recent demonstrations, and a task picker."""
    can_assign = request.user.has_perm("annotation.add_assignment")
    assignments = list(assignments_open(annotator=request.user))
    for a in assignments:  # the seed its start will use: the queue shows the instance the person gets
        a.seed = a.episode.seed if a.episode else assignment_seed(a)
    context = {
        "assignments": assignments,
        "running": demos_of(annotator=request.user, running=True)[:50],
        "recent": demos_of(annotator=request.user, running=False)[:20],
        "tasks": tasks_to_demonstrate()[:1000],
        "unproven": tasks_unproven(),
        "policies": proposal_policies(),
        "can_assign": can_assign,
        "annotators": annotators() if can_assign else [],
        "sent_back": reviews_sent_back(annotator=request.user).count(),
    }
    return render(request, "annotation/queue.html", context)


@require_POST
@page_requires("episodes.annotate")
def start(request: HttpRequest) -> HttpResponse:
    """Start a demonstration of a task (from an assignment or picked); interactive with a policy."""
    assignment, seed = None, None
    if assignment_id := _int(request.POST.get("assignment")):
        assignment = get_object_or_404(
            Assignment, pk=assignment_id, annotator=request.user, state=Assignment.State.OPEN
        )
        task, seed = assignment.task, assignment_seed(assignment)  # the instance the queue showed
    else:
        task = get_object_or_404(Task, pk=_int(request.POST.get("task")) or 0)
        if not (task.is_published or is_unproven(task)):
            raise Http404("no such task to demonstrate")
    policy = None
    if policy_id := _int(request.POST.get("policy")):
        policy = get_object_or_404(PolicyVersion, pk=policy_id, is_active=True)
    try:
        episode = demo_start(
            task=task, annotator=request.user, policy_version=policy, assignment=assignment, seed=seed
        )
    except TaskUnavailable as exc:
        return refusal(request, str(exc), status=409)  # nothing started: no sandbox would ever come
    except DemoError as exc:
        messages.error(request, str(exc))
        return redirect("annotation:queue")
    return redirect("annotation:session", episode_id=episode.pk)


@require_POST
@page_requires("annotation.add_assignment")
def assign(request: HttpRequest) -> HttpResponse:
    """Put a task in an annotator's queue (administrators)."""
    task = get_object_or_404(Task, pk=_int(request.POST.get("task")) or 0)
    annotator = get_object_or_404(annotators(), pk=_int(request.POST.get("annotator")) or 0)
    try:
        assignment_create(
            task=task, annotator=annotator, assigned_by=request.user, note=request.POST.get("note", "")
        )
    except DemoError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{task.slug} assigned to {annotator}.")
    return redirect("annotation:queue")


@require_GET
@page_requires()
def session(request: HttpRequest, episode_id: int) -> HttpResponse:
    """The live session page: the sandbox's screen, the recorded steps, think-aloud, control, submit;
    once ended, its outcome from the database (reward, checks, error) and the next task. An htmx request
    gets the outcome alone (the page asks for it when the episode ends)."""
    episode = episode_visible_to(user=request.user, episode_id=episode_id)
    if episode is None:
        raise Http404("no such episode")
    episode = Episode.objects.select_related("task", "sandbox", "policy_version", "annotator").get(
        pk=episode.pk
    )
    is_annotator = episode.annotator_id == request.user.pk
    next_assignment = None
    if is_annotator and episode.is_done and request.user.has_perm("episodes.annotate"):
        next_assignment = assignment_next(annotator=request.user)
        if next_assignment is not None:
            next_assignment.seed = assignment_seed(next_assignment)
    outcome = {"episode": episode, "is_annotator": is_annotator, "next_assignment": next_assignment}
    if request.htmx:
        return render(request, "annotation/session.html#outcome", outcome)
    token = control_of(sandbox_id=episode.sandbox_id) if episode.sandbox_id else None
    context = {
        **outcome,
        "steps": steps_of(episode=episode),
        "control": control_state(token),
        "control_offered": control_offered(user=request.user, episode=episode),
        "view_area": task_view_area(task=episode.task),
        "game": task_game(task=episode.task),
        "transport": _transport(request, episode),
        # Where WebRTC cannot connect the page goes on over a WebSocket transport (input: the session socket).
        "fallback": _transport(None, episode),
    }
    return render(request, "annotation/session.html", context)


def _transport(request: HttpRequest | None, episode: Episode) -> str:
    """noVNC for desktops, the screencast otherwise; `?transport=webrtc` (or screencast) on request."""
    asked = request.GET.get("transport") if request is not None else None
    if asked in ("webrtc", "screencast"):
        return asked
    return "vnc" if episode.sandbox and episode.sandbox.provider == "xdesktop" else "screencast"


@require_POST
@page_requires("episodes.annotate")
def abandon(request: HttpRequest, episode_id: int) -> HttpResponse:
    """Stop one's own demonstration without scoring it."""
    episode = get_object_or_404(Episode, pk=episode_id, annotator=request.user)
    try:
        demo_abandon(episode=episode, user=request.user)
    except Exception as exc:  # noqa: BLE001 - shown to the person, nothing to undo
        messages.error(request, f"Could not stop episode {episode_id}: {exc}")
    return redirect("annotation:queue")


@require_POST
@page_requires("episodes.annotate")
def fork(request: HttpRequest, episode_id: int) -> HttpResponse:
    """Continue an episode from step k in a fresh sandbox: its first k actions are replayed first."""
    episode = episode_visible_to(user=request.user, episode_id=episode_id)
    if episode is None:
        raise Http404("no such episode")
    if not episode.is_done:
        raise PermissionDenied("only an ended episode can be forked")
    step = _int(request.POST.get("step"))
    if step is None:
        messages.error(request, "Say from which step to fork.")
        return redirect("episodes:episode_detail", episode_id=episode.pk)
    try:
        forked = demo_start(
            task=episode.task,
            annotator=request.user,
            policy_version=episode.policy_version if episode.source == "mixed" else None,
            fork_of=episode,
            fork_step=step,
        )
    except TaskUnavailable as exc:
        return refusal(request, str(exc), status=409)
    except DemoError as exc:
        messages.error(request, str(exc))
        return redirect("episodes:episode_detail", episode_id=episode.pk)
    return redirect("annotation:session", episode_id=forked.pk)
