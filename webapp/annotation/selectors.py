"""Reads for annotation: an annotator's queue and demonstrations."""

from __future__ import annotations

import zlib

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from webapp.annotation.models import Assignment
from webapp.catalog.models import Task
from webapp.episodes.models import Episode, Source
from webapp.policies.models import PolicyVersion


def assignments_open(*, annotator: AbstractBaseUser) -> QuerySet[Assignment]:
    """The annotator's assignments not yet done, oldest first."""
    return (
        Assignment.objects.filter(
            annotator=annotator, state__in=[Assignment.State.OPEN, Assignment.State.IN_PROGRESS]
        )
        .select_related("task", "episode", "assigned_by")
        .order_by("created_at")
    )


def assignment_seed(assignment: Assignment) -> int:
    """The seed an assignment is demonstrated on: fixed by the assignment, so that its queue shows the
    very instance (file names, values) the annotator will get when they start it."""
    return zlib.crc32(f"assignment:{assignment.pk}".encode()) % 2**31


def assignment_next(*, annotator: AbstractBaseUser) -> Assignment | None:
    """The annotator's oldest assignment not started yet (what *Next task* starts), or None."""
    return (
        Assignment.objects.filter(annotator=annotator, state=Assignment.State.OPEN)
        .select_related("task")
        .order_by("created_at", "pk")
        .first()
    )


def demos_of(*, annotator: AbstractBaseUser, running: bool) -> QuerySet[Episode]:
    """The annotator's demonstrations: running (to resume) or ended (most recent first)."""
    qs = Episode.objects.filter(annotator=annotator, source__in=[Source.HUMAN, Source.MIXED]).select_related(
        "task"
    )
    states = [Episode.Status.PENDING, Episode.Status.RUNNING]
    qs = qs.filter(status__in=states) if running else qs.exclude(status__in=states)
    return qs.order_by("-created_at")


def tasks_to_demonstrate() -> QuerySet[Task]:
    """Published tasks an annotator may pick themselves."""
    return Task.objects.filter(is_published=True).order_by("slug")


def is_unproven(task: Task, scripted: set[str] | None = None) -> bool:
    """An unpublished task no scripted solution can prove (an imported benchmark task): a person's
    demonstration that the checker scores 1 proves it (and then doing nothing must score 0)."""
    if scripted is None:
        from agent_core.tasks.oracles import oracle_names

        scripted = set(oracle_names())
    if task.is_published or not task.spec:
        return False
    return (task.spec.get("oracle") or task.slug) not in scripted


def tasks_unproven(limit: int = 1000) -> list[Task]:
    """The unproven tasks (`is_unproven`), by slug."""
    from agent_core.tasks.oracles import oracle_names

    scripted = set(oracle_names())
    out: list[Task] = []
    for task in Task.objects.filter(is_published=False).order_by("slug").iterator():
        if is_unproven(task, scripted):
            out.append(task)
            if len(out) >= limit:
                break
    return out


def annotators() -> QuerySet[AbstractBaseUser]:
    """Active users who may record demonstrations."""
    perm = Q(groups__permissions__codename="annotate") | Q(user_permissions__codename="annotate")
    return get_user_model().objects.filter(is_active=True).filter(perm).distinct().order_by("username")


def proposal_policies() -> QuerySet[PolicyVersion]:
    """Policies that can propose steps in interactive annotation."""
    return PolicyVersion.objects.filter(is_active=True).exclude(backend=PolicyVersion.Backend.HUMAN)
