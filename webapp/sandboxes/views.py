"""The sandboxes overview."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from webapp.accounts.access import page_requires
from webapp.sandboxes.selectors import hosts_with_counts, leases_active, sandboxes_list


@require_GET
@page_requires("sandboxes.view_sandbox")
def overview(request: HttpRequest) -> HttpResponse:
    """Hosts, sandboxes and live leases."""
    now = timezone.now()
    hosts = [(h, h.is_alive(now=now)) for h in hosts_with_counts()]
    return render(
        request,
        "sandboxes/overview.html",
        {"hosts": hosts, "sandboxes": sandboxes_list()[:500], "leases": leases_active()[:500]},
    )
