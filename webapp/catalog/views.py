"""Task pages."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from webapp.accounts.access import page_requires
from webapp.catalog.models import Platform, Task
from webapp.catalog.selectors import suites_list, tasks_filtered

_PUBLISHED = {"1": True, "0": False}


@require_GET
@page_requires("catalog.view_task")
def task_list(request: HttpRequest) -> HttpResponse:
    """Tasks with live filters; an htmx request gets only the table."""
    params = request.GET
    tasks = tasks_filtered(
        query=params.get("q", "").strip(),
        platform=params.get("platform", ""),
        suite=params.get("suite", ""),
        published=_PUBLISHED.get(params.get("published", "")),
    )
    context = {
        "tasks": tasks[:500],
        "total": tasks.count(),
        "suites": suites_list(),
        "platforms": Platform.choices,
        "params": params,
    }
    template = "catalog/task_list.html#results" if request.htmx else "catalog/task_list.html"
    return render(request, template, context)


@require_GET
@page_requires("catalog.view_task")
def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    """One task: instruction, limits, spec, suites."""
    task = get_object_or_404(Task.objects.prefetch_related("suites"), pk=task_id)
    return render(request, "catalog/task_detail.html", {"task": task})
