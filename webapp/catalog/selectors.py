"""Reads of tasks and suites."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet

from webapp.catalog.models import Task, TaskSuite, VerificationStatus


def tasks_filtered(
    *,
    query: str = "",
    platform: str = "",
    suite: str = "",
    published: bool | None = None,
    profile: str = "",
    check: str = "",
) -> QuerySet[Task]:
    """Tasks matching a free-text query, platform, suite slug, publication state, sandbox profile and
    where their publication check stands (a VerificationStatus value), by slug."""
    qs = Task.objects.prefetch_related("suites")
    if query:
        qs = qs.filter(Q(slug__icontains=query) | Q(title__icontains=query) | Q(instruction__icontains=query))
    if platform:
        qs = qs.filter(platform=platform)
    if suite:
        qs = qs.filter(pk__in=TaskSuite.tasks.through.objects.filter(tasksuite__slug=suite).values("task_id"))
    if published is not None:
        qs = qs.filter(is_published=published)
    if profile:
        qs = qs.filter(env_profile=profile)
    if check:
        qs = qs.filter(check_state_is(check))
    return qs.order_by("slug")


def check_state_is(status: str) -> Q:
    """Tasks whose check stands at `status`, as Task.verification_status reads it (checks recorded
    before statuses existed count by their verdict; none at all is "unchecked")."""
    stated = Q(verification__has_key="status")
    legacy = ~stated & Q(verification__has_key="ok")
    if status == VerificationStatus.PASSED:
        return Q(verification__status=status) | (legacy & Q(verification__ok=True))
    if status == VerificationStatus.FAILED:
        return Q(verification__status=status) | (legacy & Q(verification__ok=False))
    if status == VerificationStatus.UNCHECKED:
        return Q(verification__status=status) | (~stated & ~Q(verification__has_key="ok"))
    return Q(verification__status=status)


def tasks_counts(*, tasks: QuerySet[Task]) -> dict[str, int]:
    """How many of `tasks` there are, are published, and stand at each check state (one query)."""
    counts = {"total": Count("pk"), "published": Count("pk", filter=Q(is_published=True))}
    for status in VerificationStatus.values:
        counts[status] = Count("pk", filter=check_state_is(status))
    return tasks.order_by().aggregate(**counts)


def task_profiles() -> list[str]:
    """Every sandbox profile some task names, for the list's filter."""
    return sorted(set(Task.objects.order_by().values_list("env_profile", flat=True).distinct()))


@dataclass(frozen=True)
class InstructionPreview:
    """What a page shows of a task before its episode is prepared: the instance a seed draws."""

    text: str
    exact: bool
    """True when `text` is the instruction the person will get, word for word."""
    note: str = ""
    """What is not known yet and why ("" when exact)."""


PENDING_VALUE = "…"
"""Stands for a value only the sandbox's setup gives (a MiniWoB page's utterance), never `{{name}}`."""


def task_instruction_preview(*, task: Task, seed: int) -> InstructionPreview:
    """The instruction `task` gives on `seed`: its template filled with the parameters that seed draws
    (as agent_core.tasks.runner.prepare fills it). A value only the sandbox's setup gives is unknown
    until then: an instruction made only of one (MiniWoB's `{{start.utterance}}`) is described by the
    task's description instead, one that holds one shows it as "…"; either way the note says so."""
    from agent_core.tasks.spec import TaskSpecError, parse_task
    from agent_core.tasks.templating import TEMPLATE, render

    template = task.instruction
    if not TEMPLATE.search(template):
        return InstructionPreview(template, exact=True)
    try:
        spec = parse_task(task.spec)
        params = spec.draw_params(seed)
        template, description = spec.instruction, spec.description or spec.title
    except TaskSpecError:
        params, description = {}, task.title
    unknown = {m.group(1) for m in TEMPLATE.finditer(template) if m.group(1).split(".")[0] not in params}
    later = "once the sandbox is set up"
    if not unknown:
        return InstructionPreview(str(render(template, params)), exact=True)
    if TEMPLATE.fullmatch(template.strip()):
        return InstructionPreview(description, exact=False, note=f"The exact instruction is shown {later}.")
    # Unknown placeholders become a mark no template matches, the rest is filled as prepare() fills it.
    marked = TEMPLATE.sub(lambda m: "\x00" if m.group(1) in unknown else m.group(0), template)
    partial = str(render(marked, params)).replace("\x00", PENDING_VALUE)
    return InstructionPreview(partial, exact=False, note=f"“{PENDING_VALUE}” is filled in {later}.")


def task_view_area(*, task: Task) -> dict[str, int] | None:
    """The screen area a live view of `task` should fit (a MiniWoB++ page draws in a corner), or None."""
    from agent_core.suites.miniwob import VIEW_AREA

    setup = (task.spec or {}).get("setup") if isinstance(task.spec, dict) else None
    if isinstance(setup, list) and any(isinstance(s, dict) and s.get("op") == "miniwob" for s in setup):
        return dict(VIEW_AREA)
    return None


def task_game(*, task: Task) -> str:
    """The game `task` plays (its `game` setup op: the games suite), or ""."""
    setup = (task.spec or {}).get("setup") if isinstance(task.spec, dict) else None
    for step in setup if isinstance(setup, list) else ():
        if isinstance(step, dict) and step.get("op") == "game":
            return str(step.get("game") or (step.get("args") or {}).get("game") or "")
    return ""


def suites_list() -> QuerySet[TaskSuite]:
    """All suites by slug."""
    return TaskSuite.objects.order_by("slug")


def suites_by_slug(*, slugs: Iterable[str]) -> dict[str, TaskSuite]:
    """The suites among `slugs` that exist, by slug (callers compare to find the unknown ones)."""
    return {suite.slug: suite for suite in TaskSuite.objects.filter(slug__in=set(slugs))}
