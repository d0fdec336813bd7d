"""Researcher pages: launch a rollout batch, follow its progress and success per task."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.access import page_requires
from webapp.catalog.models import Task, TaskSuite
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.policies.selectors import newest_ready
from webapp.rollouts.launch import batch_seeds, seeds_parse, task_patterns_parse, tasks_matching
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.selectors import (
    batch_progress,
    batch_task_table,
    batch_waiting,
    batches_for,
    episode_waits,
)
from webapp.rollouts.services import MAX_SEED, MAX_SEEDS, RolloutError, batch_cancel, batch_create
from webapp.rollouts.verification import verification_request


class LaunchForm(forms.Form):
    suite = forms.ModelChoiceField(queryset=TaskSuite.objects.all())
    policy = forms.ModelChoiceField(
        queryset=PolicyVersion.objects.filter(is_active=True).exclude(backend=PolicyVersion.Backend.HUMAN)
    )
    tasks = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "every published task of the suite"}),
        help_text="Only these tasks of the suite: slugs or patterns (miniwob/click-*), separated by commas, "
        "spaces or lines",
    )
    episodes_per_task = forms.IntegerField(
        min_value=1, max_value=MAX_SEEDS, initial=1, required=False, help_text="Seeds: the first seed and on"
    )
    first_seed = forms.IntegerField(min_value=0, max_value=MAX_SEED, initial=0, required=False)
    seeds = forms.CharField(
        required=False,
        max_length=10000,
        help_text="Or the seeds themselves, instead of the two above: 0, 3, 7 or ranges such as 100-109",
    )
    concurrency = forms.IntegerField(min_value=1, max_value=1000, initial=4)
    history_images = forms.IntegerField(
        min_value=0, max_value=20, initial=3, help_text="Recent steps whose screenshots stay in the prompt"
    )
    name = forms.CharField(max_length=200, required=False)
    follow_newest = forms.BooleanField(
        required=False,
        label="Follow newer versions",
        help_text="Each episode runs the newest version of this policy's line that a server has ready "
        "when it starts: a promoted checkpoint takes over without a stop",
    )


def _can_see(request: HttpRequest) -> None:
    user = request.user
    if not (user.has_perm("episodes.run_rollouts") or user.has_perm("episodes.view_all_episodes")):
        raise PermissionDenied("rollouts are for researchers")


@require_GET
@page_requires()
def batch_list(request: HttpRequest) -> HttpResponse:
    """The batches, and (for those who may) the form that launches one."""
    _can_see(request)
    form = LaunchForm() if request.user.has_perm("episodes.run_rollouts") else None
    return _list_page(request, form)


@require_POST
@page_requires("episodes.run_rollouts")
def batch_launch(request: HttpRequest) -> HttpResponse:
    """Launch a batch from the form; a bad form comes back with its errors (400)."""
    form = LaunchForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            batch = batch_create(
                suite=data["suite"],
                policy_version=data["policy"],
                tasks=tasks_matching(suite=data["suite"], patterns=task_patterns_parse(data["tasks"])),
                seeds=_form_seeds(form),
                concurrency=data["concurrency"],
                created_by=request.user,
                name=data["name"],
                config={"history_images": data["history_images"]},
                follow_newest=bool(data["follow_newest"]),
            )
        except RolloutError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Launched {batch.name}.")
            return redirect("rollouts:batch_detail", pk=batch.pk)
    return _list_page(request, form, status=400)


def _form_seeds(form: LaunchForm) -> list[int]:
    """The form's seeds: its list, or its count from its first seed (fields left as they were: None)."""
    data = form.cleaned_data
    given = seeds_parse(data["seeds"]) if data["seeds"].strip() else None
    # Beside a seed list, a count or first seed left as the form had it is not a second answer.
    kept = set() if given is None else {"episodes_per_task", "first_seed"} - set(form.changed_data)
    return batch_seeds(
        seeds=given,
        episodes_per_task=None if "episodes_per_task" in kept else data["episodes_per_task"],
        first_seed=None if "first_seed" in kept else data["first_seed"],
    )


def _list_page(request: HttpRequest, form: LaunchForm | None, *, status: int = 200) -> HttpResponse:
    batches = [(b, batch_progress(batch=b)) for b in batches_for(user=request.user)[:50]]
    return render(request, "rollouts/batch_list.html", {"form": form, "batches": batches}, status=status)


@require_GET
@page_requires()
def batch_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Progress, success per task and the latest episodes; htmx polls #live until the batch ends."""
    _can_see(request)
    batch = get_object_or_404(batches_for(user=request.user), pk=pk)
    progress = batch_progress(batch=batch)
    episodes = list(
        Episode.objects.filter(batch=batch).select_related("task", "policy_version").order_by("-pk")[:100]
    )
    waits = episode_waits(batch=batch, episodes=episodes)
    for episode in episodes:
        episode.waits_for = waits.get(episode.pk)  # type: ignore[attr-defined]
    follows = bool((batch.config or {}).get("follow_newest"))
    context = {
        "batch": batch,
        # A batch that follows its policy's line: what a starting episode would run now.
        "newest_ready": newest_ready(batch.policy_version) if follows else None,
        "progress": progress,
        "waiting": batch_waiting(batch=batch),
        "tasks": batch_task_table(batch=batch),
        "episodes": episodes,
        "can_cancel": request.user.has_perm("episodes.run_rollouts"),
    }
    if request.htmx:
        response = render(request, "rollouts/batch_detail.html#live", context)
        if batch.status != RolloutBatch.Status.RUNNING:
            response.status_code = 286  # htmx: stop polling
        return response
    return render(request, "rollouts/batch_detail.html", context)


@require_POST
@page_requires("catalog.change_task")
def task_recheck(request: HttpRequest, task_id: int) -> HttpResponse:
    """Check a task's oracle and do-nothing runs again (the Tasks page's *Re-check*), on the workers."""
    task = get_object_or_404(Task, pk=task_id)
    verification_request(task=task)
    messages.success(request, f"Checking {task.slug} again on the checks workers.")
    target = request.POST.get("next", "")
    # Only a path on this site: redirect() would read anything else ("-1") as a view name (a 500).
    if not target.startswith("/") or not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}
    ):
        target = reverse("catalog:task_detail", args=[task.pk])
    return HttpResponseRedirect(target)


@require_POST
@page_requires("episodes.run_rollouts")
def batch_stop(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel a running batch: pending episodes are dropped, running ones end on their own."""
    batch = get_object_or_404(RolloutBatch, pk=pk)
    dropped = batch_cancel(batch=batch)
    messages.success(request, f"Cancelled {batch.name}: {dropped} pending episodes dropped.")
    return redirect("rollouts:batch_detail", pk=batch.pk)
