"""Task pages."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from agent_core.tasks.osworld_tables import DOMAINS as OSWORLD_DOMAINS
from webapp.accounts.access import page_requires
from webapp.catalog.models import Platform, Task
from webapp.catalog.selectors import suites_list, tasks_filtered
from webapp.catalog.services import osworld_import

_PUBLISHED = {"1": True, "0": False}
MAX_IMPORT_FILES = 500


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
        "osworld_domains": OSWORLD_DOMAINS,
    }
    template = "catalog/task_list.html#results" if request.htmx else "catalog/task_list.html"
    return render(request, template, context)


@require_GET
@page_requires("catalog.view_task")
def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    """One task: instruction, limits, spec, suites."""
    task = get_object_or_404(Task.objects.prefetch_related("suites"), pk=task_id)
    return render(request, "catalog/task_detail.html", {"task": task})


@require_POST
@page_requires("catalog.add_task", "catalog.add_tasksuite")
def osworld_upload(request: HttpRequest) -> HttpResponse:
    """Import OSWorld task files (admins): into suite osworld-<domain>; every file refused is listed."""
    files = request.FILES.getlist("files")
    domain = request.POST.get("domain", "")
    if not files:
        return HttpResponse("files: choose one or more OSWorld task files (.json)", status=400)
    if len(files) > MAX_IMPORT_FILES:
        return HttpResponse(f"files: at most {MAX_IMPORT_FILES} at once, got {len(files)}", status=400)
    if domain and domain not in OSWORLD_DOMAINS:
        return HttpResponse(
            f"domain: {domain!r} is not one of OSWorld's: {', '.join(OSWORLD_DOMAINS)}", status=400
        )
    with tempfile.TemporaryDirectory(prefix="osworld-upload-") as tmp:
        folder = Path(tmp) / (domain or "uploaded")
        folder.mkdir()
        paths = []
        for i, upload in enumerate(files):
            name = Path(upload.name or f"task-{i}.json").name or f"task-{i}.json"
            path = folder / f"{i:04d}-{name}"
            with path.open("wb") as out:
                for chunk in upload.chunks():
                    out.write(chunk)
            paths.append(path)
        counts, refused = osworld_import(paths=paths)
    created = sum(c for c, _ in counts.values())
    changed = sum(c for _, c in counts.values())
    imported = len(paths) - len(refused)
    messages.success(
        request, f"Imported {imported} of {len(paths)} OSWorld task files ({created} new, {changed} changed)."
    )
    for path, why in refused[:50]:
        messages.error(request, f"{Path(path).name.split('-', 1)[-1]}: {why}")
    if len(refused) > 50:
        messages.error(request, f"… and {len(refused) - 50} more refused.")
    return redirect("catalog:task_list")
