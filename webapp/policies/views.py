"""The policy servers page: what each server serves, its load and its errors, refreshed by htmx."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.accounts.access import page_requires
from webapp.policies.selectors import servers_overview


@require_GET
@page_requires("policies.view_policyserver")
def servers(request: HttpRequest) -> HttpResponse:
    """Every registered policy server; htmx polls the #live fragment every 3 s."""
    context = {"servers": servers_overview()}
    template = "policies/servers.html#live" if request.htmx else "policies/servers.html"
    return render(request, template, context)
