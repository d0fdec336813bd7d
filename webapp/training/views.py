"""Training pages."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.accounts.access import page_requires
from webapp.training.selectors import policy_versions_active, training_runs_list


@require_GET
@page_requires("training.view_trainingrun")
def run_list(request: HttpRequest) -> HttpResponse:
    """Training runs and the policy versions rollouts can use."""
    return render(
        request,
        "training/run_list.html",
        {"runs": training_runs_list()[:200], "policies": policy_versions_active()},
    )
