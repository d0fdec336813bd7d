"""Task pages."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from django.contrib import messages
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from agent_core.tasks.documents import DocumentError, loads_document
from agent_core.tasks.osworld_files import TaskFile
from agent_core.tasks.osworld_tables import DOMAINS as OSWORLD_DOMAINS
from webapp.accounts.access import page_requires
from webapp.catalog.availability import profile_unavailable_reason, task_unavailable_reason
from webapp.catalog.models import Platform, Task, VerificationStatus
from webapp.catalog.selectors import suites_list, task_profiles, tasks_counts, tasks_filtered
from webapp.catalog.services import osworld_import
from webapp.common.errors import refusal
from webapp.common.paging import page_of, push_query, query_of

_PUBLISHED = {"1": True, "0": False}
TASKS_PER_PAGE = 50
TASK_FILTERS = ("q", "suite", "platform", "profile", "published", "check")


@require_GET
@page_requires("catalog.view_task")
def task_list(request: HttpRequest) -> HttpResponse:
    """Tasks a page at a time, with filters kept in the URL and counts of what they match; an htmx
    request gets only the results (the filters' form pushes its URL, so a reload keeps them)."""
    params = request.GET
    query = query_of(params, TASK_FILTERS)  # what is set, for the page's links and the address bar
    check = params.get("check", "")
    tasks = tasks_filtered(
        query=params.get("q", "").strip(),
        platform=params.get("platform", ""),
        suite=params.get("suite", ""),
        published=_PUBLISHED.get(params.get("published", "")),
        profile=params.get("profile", ""),
        check=check if check in VerificationStatus.values else "",
    )
    counts = tasks_counts(tasks=tasks)
    page = page_of(tasks, params, per_page=TASKS_PER_PAGE)
    context = {
        "page": page,
        "tasks": page.object_list,
        "total": counts["total"],
        "counts": counts,
        "check_states": [(value, label, counts[value]) for value, label in VerificationStatus.choices],
        "suites": suites_list(),
        "platforms": Platform.choices,
        "profiles": task_profiles(),
        "params": params,
        "query": query,
        "filtered": any(query.get(k) for k in TASK_FILTERS),
        "osworld_domains": OSWORLD_DOMAINS,
    }
    if not request.htmx:
        return render(request, "catalog/task_list.html", context)
    # htmx: the results for the form's own requests; with the form too for links that change a filter.
    part = "browser" if request.htmx.target == "task-browser" else "results"
    return push_query(render(request, f"catalog/task_list.html#{part}", context), request, query)


@require_GET
@page_requires("catalog.view_task")
def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    """One task: instruction, limits, spec, suites, and why it cannot be started now (if it cannot)."""
    task = get_object_or_404(Task.objects.prefetch_related("suites"), pk=task_id)
    context = {"task": task, "unavailable": task_unavailable_reason(task=task)}
    return render(request, "catalog/task_detail.html", context)


MAX_SHOWN = 50  # problems listed on the page; the rest are counted


def _upload_name(upload: UploadedFile, i: int) -> str:
    """What messages call an uploaded file: its own name, without folders."""
    return Path(upload.name or "").name.replace("\x00", "") or f"file {i + 1}"


def _listed(items: list[str]) -> str:
    more = len(items) - MAX_SHOWN
    return "; ".join(items[:MAX_SHOWN]) + (f"; … and {more} more" if more > 0 else "")


@require_POST
@page_requires("catalog.add_task", "catalog.add_tasksuite")
def osworld_upload(request: HttpRequest) -> HttpResponse:
    """Import OSWorld task files (admins) into suites osworld-<domain>. A file that cannot be stored as it
    is (not UTF-8 JSON, a NUL, nesting past 32 levels, NaN) is a 400 naming each such file and its field,
    and nothing is imported; a file that reads but cannot run here is refused with its reason, and the
    others are imported. More files than DATA_UPLOAD_MAX_NUMBER_FILES: the door's 400."""
    uploads = request.FILES.getlist("files")
    domain = request.POST.get("domain", "")
    if not uploads:
        return refusal(request, "files: choose one or more OSWorld task files (.json)")
    if domain and domain not in OSWORLD_DOMAINS:
        return refusal(request, f"domain: {domain!r} is not one of OSWorld's: {', '.join(OSWORLD_DOMAINS)}")
    files, unreadable = [], []
    for i, upload in enumerate(uploads):
        name = _upload_name(upload, i)
        try:
            files.append(TaskFile(name=name, doc=loads_document(upload.read())))
        except DocumentError as exc:
            unreadable.append(f"{name}: {exc.field}: {exc.problem}")
    if unreadable:
        message = f"files: {len(unreadable)} of {len(uploads)} cannot be read, so none was imported"
        return refusal(request, f"{message}: {_listed(unreadable)}")
    result = osworld_import(files=files, domain=domain)
    created, changed = (sum(c[k] for c in result.counts.values()) for k in (0, 1))
    imported = f"Imported {len(result.slugs)} of {len(files)} OSWorld task files"
    messages.success(request, f"{imported} ({created} new, {changed} changed).")
    if result.known:
        known = [f"{name} is {slug}" for name, slug in result.known]
        messages.info(request, f"Imported before under another domain, and still one task: {_listed(known)}.")
    profiles = Counter(Task.objects.filter(slug__in=result.unavailable).values_list("env_profile", flat=True))
    for profile, n in sorted(profiles.items()):
        why = profile_unavailable_reason(profile)
        messages.warning(request, f"{n} of them cannot be started yet: {why}.")
    for name, why in result.refused[:MAX_SHOWN]:
        messages.error(request, f"{name}: {why}")
    if len(result.refused) > MAX_SHOWN:
        messages.error(request, f"… and {len(result.refused) - MAX_SHOWN} more refused.")
    return redirect("catalog:task_list")
