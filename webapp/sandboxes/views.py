"""The sandboxes page: hosts, sandboxes, leases, recent errors and latencies; reset and kill."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from sandbox_workers.base import SandboxError
from webapp.accounts.access import page_requires
from webapp.sandboxes.models import Sandbox
from webapp.sandboxes.selectors import host_errors, hosts_with_counts, sandboxes_list
from webapp.sandboxes.services import sandbox_admin


@require_GET
@page_requires("sandboxes.view_sandbox")
def overview(request: HttpRequest) -> HttpResponse:
    """Hosts, sandboxes with their holders, recent errors; htmx polls the #live fragment every 2 s."""
    now = timezone.now()
    hosts = [(h, h.is_alive(now=now)) for h in hosts_with_counts()]
    context = {
        "hosts": hosts,
        "sandboxes": sandboxes_list()[:500],
        "errors": host_errors(hosts=[h for h, _ in hosts])[:30],
        "can_control": request.user.has_perm("sandboxes.change_sandbox"),
    }
    template = "sandboxes/overview.html#live" if request.htmx else "sandboxes/overview.html"
    return render(request, template, context)


@require_POST
@page_requires("sandboxes.change_sandbox")
def control(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Reset or kill one sandbox on its host (admins)."""
    sandbox = get_object_or_404(Sandbox.objects.select_related("host"), pk=pk)
    try:
        sandbox_admin(sandbox=sandbox, action=action)
    except (SandboxError, ValueError) as exc:
        messages.error(request, f"Could not {action} {sandbox}: {exc}")
    else:
        messages.success(request, f"{sandbox}: {action} sent to {sandbox.host.name}.")
    return redirect("sandboxes:overview")
